// `gcompile schema --markdown`: the key reference of docs/spec.md, from the schema table.
#include "common/text.hpp"
#include "spec/classes.hpp"
#include "spec/schema.hpp"
#include "spec/schema_builder.hpp"

namespace gc {

using schema_detail::metric_defaults;
using schema_detail::section_of;

namespace {

std::string markdown_cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string bounds_text(const KeySpec& k) {
  if (k.min && k.max) return " in [" + format_double(*k.min) + ", " + format_double(*k.max) + "]";
  if (k.min) return std::string(k.min_exclusive ? " > " : " ≥ ") + format_double(*k.min);
  return "";
}

std::string type_text(const KeySpec& k) {
  if (k.type == KeyType::choice_list && !k.choices.empty()) {
    if (k.choices == weight_class_names()) return "array of weight-class names";
    if (k.choices == class_names()) return "array of class names";
  }
  return key_type_name(k) + bounds_text(k);
}

std::string key_row(const KeySpec& k, const std::string& key, const std::string& doc) {
  return "| `" + key + "` | " + markdown_cell(type_text(k)) + " | `" + markdown_cell(k.default_text) + "` | " +
         markdown_cell(doc) + " | " + (k.example.empty() ? "" : "`" + markdown_cell(key + " = " + k.example) + "`") +
         " |\n";
}

const char* const kTableHead = "| key | type | default | meaning | example |\n|---|---|---|---|---|\n";

// Per-metric tables share their keys: one row per metric instead.
std::string metrics_markdown() {
  std::string out =
      "\n### [metrics.NAME] (one table per metric)\n\n"
      "Keys: `enabled` (boolean), `interval` (integer ≥ 1, steps between measurements), `classes` (array of class "
      "names, for per-matrix metrics), `layers` (array of 0-based layer indices; `[]` = all layers). "
      "A dash means the metric has no such key.\n\n"
      "| metric | meaning | enabled | interval | classes | layers |\n|---|---|---|---|---|---|\n";
  for (const auto& m : metric_defaults()) {
    const std::string p = std::string("metrics.") + m.name + ".";
    auto cell = [&](const char* key) {
      const KeySpec* k = find_key(p + key);
      return k ? "`" + markdown_cell(k->default_text) + "`" : std::string("-");
    };
    out += std::string("| `") + m.name + "` | " + markdown_cell(m.doc) + " | " + cell("enabled") + " | " +
           cell("interval") + " | " + cell("classes") + " | " + cell("layers") + " |\n";
  }
  out += "\nMetric-specific keys:\n\n" + std::string(kTableHead);
  for (const char* path : {"metrics.embedding_cosine.top_tokens", "metrics.cosine_similarity.image_steps"}) {
    const KeySpec* k = find_key(path);
    out += key_row(*k, std::string(path).substr(8), k->doc);
  }
  return out;
}

}  // namespace

std::string schema_markdown() {
  std::string out;
  std::string current;
  bool metrics_done = false;
  for (const auto& k : schema()) {
    const std::string section = section_of(k.path);
    if (section.rfind("metrics.", 0) == 0) {
      if (!metrics_done) out += metrics_markdown();
      metrics_done = true;
      current = section;
      continue;
    }
    // Per-class tables are documented once, as [init.CLASS] and [optim.lr_mult].
    const bool per_class_init = section.rfind("init.", 0) == 0;
    const bool per_class_lr = section == "optim.lr_mult";
    if (per_class_init && section != "init.embedding") continue;
    if (per_class_lr && k.path != "optim.lr_mult.embedding") continue;
    if (section != current) {
      current = section;
      std::string title = "[" + section + "]";
      if (per_class_init) title = "[init.CLASS] (one table per weight class)";
      if (per_class_lr) title = "[optim.lr_mult] (one key per class, including norm)";
      out += "\n### " + title + "\n\n" + kTableHead;
    }
    std::string key = k.path.substr(section.size() + 1);
    std::string doc = k.doc;
    if (per_class_init) {
      doc.replace(doc.find("embedding"), 9, "CLASS");
    }
    if (per_class_lr) {
      key = "CLASS";
      doc = "Learning-rate multiplier for CLASS (μP-style presets set these).";
    }
    out += key_row(k, key, doc);
  }
  return out;
}

}  // namespace gc
