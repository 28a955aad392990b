// Helpers shared by the tests.
#pragma once

#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "plan/plan.hpp"
#include "spec/spec.hpp"

namespace gc::test {

// Loads a spec from text (label "spec.toml", bases resolved in `dir`).
inline std::optional<Spec> spec_from(const std::string& text, Diagnostics& diags, const std::string& dir = ".") {
  return load_spec_text(text, "spec.toml", dir, diags);
}

// Formatted diagnostics in source order, one string each.
inline std::vector<std::string> messages(const Diagnostics& diags) {
  std::vector<std::string> out;
  for (const auto& d : diags.sorted()) out.push_back(d.format());
  return out;
}

// The text of an error diagnostic at WHERE ("LINE:COL") of a spec loaded as spec.toml.
inline std::string spec_error(const std::string& where, const std::string& message) {
  return "spec.toml:" + where + ": error: " + message;
}

// A complete, valid dense spec body; tests append or replace sections.
inline std::string minimal_spec_sections() {
  return R"([experiment]
name = "t"

[model]
vocab_size = 512
d_model = 64
n_layers = 2
n_heads = 4
d_ff = 128

[optim]
lr = 1e-3

[train]
seq_len = 32
global_batch = 4
steps = 10

[data]
format = "synthetic"
)";
}

}  // namespace gc::test
