// The two AST passes of the specializer. Each returns a FrontendAction that
// records text edits for the main file into `edits`.
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
  std::string target;  // absolute path of the file being specialized (edits apply to it only)
  const KnobTable* knobs = nullptr;
  const std::map<std::string, std::string>* labels = nullptr;  // absolute path -> diagnostic path
  Diagnostics* diags = nullptr;
  std::vector<Edit> edits;
  std::set<std::string> used_knobs;
};

// Replaces knob initializers with spec literals; drops `#include "gc/knob.hpp"`.
std::unique_ptr<clang::FrontendAction> make_knob_action(PassContext& ctx);
// Replaces constant `if constexpr` statements with the branch taken.
std::unique_ptr<clang::FrontendAction> make_prune_action(PassContext& ctx);

}  // namespace gc
