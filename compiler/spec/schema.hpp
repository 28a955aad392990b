// The spec schema: one table listing every key of spec language v1 with its
// type, default, bounds and documentation. The loader validates against it,
// defaults come from it, and docs/spec.md's key reference is generated from
// it (`gcompile schema --markdown`), so the three cannot drift apart.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "spec/value.hpp"

namespace gc {

enum class KeyType {
  boolean,
  integer,
  number,        // a float; an integer is accepted and converted
  string,
  choice,        // a string from `choices`
  formula,       // a number, or a string expression (compiler/expr)
  integer_list,
  number_list,
  choice_list,   // strings from `choices`
};

// Which variables a formula may use.
enum class FormulaScope {
  none,
  model,   // d_model, n_layers, d_ff, head_dim, n_heads, n_kv_heads, vocab, width_mult
  tensor,  // model variables plus fan_in, fan_out, layer, gamma
};

struct KeySpec {
  std::string path;  // dotted: "model.norm_eps", "init.attn_q.gamma"
  KeyType type = KeyType::string;
  std::optional<Value> default_value;  // none when required, derived or optional
  std::string default_text;            // as documented: "1e-05", "= n_heads", "required", "unset"
  bool required = false;
  std::optional<double> min, max;  // numeric bounds (for lists: of each item)
  bool min_exclusive = false;
  std::vector<std::string> choices;
  int list_length = 0;          // 0 = any length
  std::string exclusive_group;  // alternatives: setting one in a file clears the others from its base
  FormulaScope scope = FormulaScope::none;
  bool preset_allowed = false;  // may be set by an init preset file
  std::string doc;
  std::string example;  // TOML right-hand side for the docs
};

const std::vector<KeySpec>& schema();
const KeySpec* find_key(const std::string& path);

// True if `path` names a section ("model", "init.attn_q", "metrics.sink_score").
bool is_section(const std::string& path);
// Keys directly inside a section (last components only), and subsections.
std::vector<std::string> keys_in_section(const std::string& section);
std::vector<std::string> subsections_of(const std::string& section);

// The variables formulas of a scope may use.
const std::vector<std::string>& formula_variables(FormulaScope scope);

// Metric names of the [metrics] section.
const std::vector<std::string>& metric_names();

std::string key_type_name(const KeySpec& k);

// The key reference of docs/spec.md, as Markdown.
std::string schema_markdown();

}  // namespace gc
