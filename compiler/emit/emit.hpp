// The emitter: a Plan becomes a self-contained source tree (generated/NAME/)
// that builds with CMake and a C++17 compiler (plus the CUDA toolkit when
// present). Same spec, same bytes: nothing time- or machine-dependent is
// written except what the spec itself names (data paths).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "data/text_data.hpp"
#include "runtime/sha256.hpp"
#include "plan/plan.hpp"
#include "specialize/specialize.hpp"

namespace gc {

struct Tree {
  std::map<std::string, std::string> files;  // relative path -> contents
};

// Builds the tree in memory. Fails (with diagnostics) when a template does not
// specialize, or when a spec key is consumed by no knob and no emitted table.
// `data` names the token shards the train binary reads (prepare_data).
std::optional<Tree> generate_tree(const Plan& plan, const PreparedData& data, Diagnostics& diags);

// Writes `tree` to `dir`, replacing a tree gcompile generated there before
// without losing what the user put in it (write_tree.cpp): entries the old
// manifest does not list are moved into the new tree (and listed in `kept`),
// a generated file edited by hand or a directory that is not a gcompile tree
// is an error, and the swap is atomic (renameat2 RENAME_EXCHANGE). The build/
// directory is kept for incremental builds.
bool write_tree(const Tree& tree, const std::string& dir, Diagnostics& diags, std::vector<std::string>* kept = nullptr);

// specialize() over the embedded templates, with the work that is the same
// across a sweep's trees cached on disk (specialize_cache.cpp).
std::optional<SpecializeResult> specialize_templates(const std::vector<TemplateFile>& templates,
                                                     const std::map<std::string, std::string>& runtime,
                                                     const KnobTable& knobs,
                                                     const std::map<std::string, std::string>& after_knobs,
                                                     const Toolchain& toolchain, Diagnostics& diags);

// Keys of the gc::knob<T>("KEY", ...) calls in a template's text, sorted.
std::set<std::string> knob_keys_in(const std::string& text);

// The knob values a plan binds: the spec keys the templates read (spec_knob_values, written
// from the typed spec, not the resolved map) plus plan-derived "plan.*" keys.
KnobTable knob_table(const Plan& plan, const PreparedData& data);
KnobTable spec_knob_values(const Spec& spec);

// The named place that consumes a spec key no template knob reads (a plan
// table, data preparation, the loader), or nullopt when there is none.
std::optional<std::string> table_consumer(const std::string& key);

// SHA-256 of `text`, lowercase hex: the runtime's (runtime/sha256.hpp), the one the trees use too.
using rt::sha256_hex;

// plan.hpp: the parameter table as constexpr arrays.
std::string plan_header(const Plan& plan, const std::string& banner);
// plan_init.cpp: kInitStd, the per-tensor init σ (kept out of plan.hpp so a γ
// sweep changes one small source file).
std::string plan_init_source(const Plan& plan, const std::string& banner);
// CMakeLists.txt of the generated tree.
std::string tree_cmake(const Plan& plan, const std::vector<std::string>& sources,
                       const std::vector<std::string>& cuda_sources);

}  // namespace gc
