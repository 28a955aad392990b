// The two AST passes of the specializer. Each returns a FrontendAction that
// records text edits for the target files it meets in the translation unit
// (several headers are specialized from one parse) into `edits`.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <clang/AST/ASTConsumer.h>
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

// The base of both passes' AST consumers. The passes edit only their targets, so Clang may skip
// the bodies of every function defined elsewhere (the library headers, the templates another
// parse specializes): the action turns FrontendOptions::SkipFunctionBodies on and this consumer
// says which bodies. Clang itself never skips a constexpr function or one with a deduced return
// type, so constant evaluation (an `if constexpr` condition) still sees every body it needs.
class TargetsOnlyConsumer : public clang::ASTConsumer {
 public:
  explicit TargetsOnlyConsumer(const PassContext& ctx) : ctx_(ctx) {}
  bool shouldSkipFunctionBody(clang::Decl* d) override;

 private:
  const PassContext& ctx_;
};

// Replaces knob initializers with spec literals; drops `#include "gc/knob.hpp"`.
std::unique_ptr<clang::FrontendAction> make_knob_action(PassContext& ctx);
// Replaces constant `if constexpr` statements with the branch taken.
std::unique_ptr<clang::FrontendAction> make_prune_action(PassContext& ctx);

}  // namespace gc
