// The specializer: Clang LibTooling passes over the templates (real C++/CUDA
// sources that compile unmodified with their defaults).
//
//   1. Knobs: every `constexpr T kName = gc::knob<T>("spec.key", default);`
//      gets the spec's literal in place of the call, type-checked against T.
//      The include of gc/knob.hpp is dropped.
//   2. Pruning: every `if constexpr` whose condition is now a constant (also
//      through other constexpr values) is replaced by the branch that runs;
//      else-if chains collapse to the one branch taken.
//   3. Formatting with clang-format's library, so the output is deterministic.
//
// Errors name the template file, line and column.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "spec/value.hpp"

namespace gc {

// Values knobs may bind, by key ("model.norm_eps", "plan.total_steps").
using KnobTable = std::map<std::string, Value>;

struct Toolchain {
  std::string resource_dir;  // clang's resource directory (builtin headers)
  std::string cuda_path;     // CUDA toolkit root, "" when absent
  std::vector<std::string> include_dirs;
};

// The toolchain gcompile was built against (paths fixed at build time).
Toolchain default_toolchain();

// A template that is one program's main (train_main.cpp, parity_main.cu): its own translation
// unit and executable, never sharing a parse or a library with another main.
bool is_program_main(const std::string& path);

struct TemplateFile {
  std::string path;  // relative to the include root, as `#include` names it ("cpu/rmsnorm.hpp")
  std::string text;
};

struct SpecializedFile {
  std::string path;
  std::string text;
};

struct SpecializeResult {
  std::vector<SpecializedFile> files;
  std::set<std::string> used_knobs;  // keys bound by some knob
};

// Specializes a set of templates together: headers among them are seen by the
// others in their specialized form. `include_root` is the absolute directory
// the templates' paths are relative to; diagnostics name files as
// `label_root/path`. `extra_files` (absolute path -> text) are visible to the
// parser but not specialized (the runtime). `after_knobs` (template path ->
// text) replaces templates once knobs are folded: generated tables that only
// agree with the folded knobs (plan.hpp). Returns nullopt on any error.
std::optional<SpecializeResult> specialize(const std::vector<TemplateFile>& templates, const std::string& include_root,
                                           const std::string& label_root, const KnobTable& knobs,
                                           const Toolchain& toolchain, Diagnostics& diags,
                                           const std::map<std::string, std::string>& extra_files = {},
                                           const std::map<std::string, std::string>& after_knobs = {});

// Formats C++/CUDA source with the project's style (clang-format library).
std::string format_source(const std::string& path, const std::string& text);

}  // namespace gc
