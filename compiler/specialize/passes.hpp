// The two AST passes of the specializer. Each returns a FrontendAction that
// records text edits for the target files it meets in the translation unit
// (several headers are specialized from one parse) into `edits`.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <clang/Frontend/FrontendAction.h>

#include "common/diagnostics.hpp"
#include "specialize/edits.hpp"
#include "specialize/specialize.hpp"

namespace gc {

struct PassContext {
  std::set<std::string> targets;  // absolute paths of the files being specialized (edits apply to them only)
  const KnobTable* knobs = nullptr;
  const std::map<std::string, std::string>* labels = nullptr;  // absolute path -> diagnostic path
  Diagnostics* diags = nullptr;
  std::map<std::string, std::vector<Edit>> edits;  // by target
  std::set<std::string> used_knobs;
};

// Replaces knob initializers with spec literals; drops `#include "gc/knob.hpp"`.
std::unique_ptr<clang::FrontendAction> make_knob_action(PassContext& ctx);
// Replaces constant `if constexpr` statements with the branch taken.
std::unique_ptr<clang::FrontendAction> make_prune_action(PassContext& ctx);

}  // namespace gc
