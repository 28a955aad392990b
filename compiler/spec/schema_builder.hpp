// Internal to compiler/spec: the helpers the schema table is written with (one line per key),
// shared by schema.cpp and schema_model.cpp, and the metric defaults schema_markdown.cpp lists.
#pragma once

#include <string>
#include <vector>

#include "spec/schema.hpp"

namespace gc::schema_detail {

// Builders keep the table below readable: one line per key.
struct Builder {
  std::vector<KeySpec> keys;

  KeySpec& add(std::string path, KeyType type, std::string doc) {
    KeySpec k;
    k.path = std::move(path);
    k.type = type;
    k.doc = std::move(doc);
    k.default_text = "unset";
    keys.push_back(std::move(k));
    return keys.back();
  }
};

inline KeySpec& with_default(KeySpec& k, Value v) {
  k.default_text = v.to_toml();
  k.default_value = std::move(v);
  return k;
}

inline KeySpec& required(KeySpec& k) {
  k.required = true;
  k.default_text = "required";
  return k;
}

inline KeySpec& derived(KeySpec& k, std::string text) {
  k.default_text = std::move(text);
  return k;
}

inline KeySpec& at_least(KeySpec& k, double lo, bool exclusive = false) {
  k.min = lo;
  k.min_exclusive = exclusive;
  return k;
}

inline KeySpec& between(KeySpec& k, double lo, double hi) {
  k.min = lo;
  k.max = hi;
  return k;
}

inline KeySpec& example(KeySpec& k, std::string e) {
  k.example = std::move(e);
  return k;
}

// The common shape of a tuning key: KEY of TYPE with a default, at least `lo`, and an example.
inline KeySpec& optional_at_least(Builder& b, std::string key, KeyType type, std::string doc, Value fallback, double lo,
                                  std::string sample) {
  return example(at_least(with_default(b.add(std::move(key), type, std::move(doc)), std::move(fallback)), lo),
                 std::move(sample));
}

inline Value strings(std::vector<std::string> items) {
  std::vector<Value> v;
  for (auto& s : items) v.push_back(Value::string(std::move(s)));
  return Value::list(std::move(v));
}

// The [model], [moe] and [init] keys (schema_model.cpp).
void add_model(Builder& b);
void add_moe(Builder& b);
void add_init(Builder& b);

struct MetricDefault {
  const char* name;
  bool enabled;
  int interval;
  bool has_classes;
  bool has_layers;
  const char* doc;
};

inline const std::vector<MetricDefault>& metric_defaults() {
  static const std::vector<MetricDefault> m = {
      {"sink_score", true, 100, false, true, "Attention sink score per layer (seed 000 eq. 5)."},
      {"residual_flow", true, 100, false, false, "Residual flow ratio ‖h_L − e‖₂/‖e‖₂ (seed 000 §2.4)."},
      {"rmsnorm_factor", true, 100, false, true,
       "Effective RMSNorm factor (σ²(h)+ε)^-1/2 vs its ε-free value (seed 000 Fig. 1c)."},
      {"cosine_similarity", true, 500, true, true, "Row cosine similarity of weight matrices, mean absolute C_ij (seed 000 eq. 6)."},
      {"stable_rank", true, 500, true, true, "Stable rank ‖W‖_F²/‖W‖₂² (seed 000 eq. 7)."},
      {"embedding_cosine", true, 500, false, false,
       "Cosine similarity among the most frequent tokens' embeddings (seed 003 §5.3)."},
      {"param_norm", true, 10, true, false, "Parameter norm per class."},
      {"grad_norm", true, 10, true, false, "Gradient norm per class."},
      {"update_ratio", true, 10, true, false, "Update-to-weight ratio per class."},
      {"activation_rms", true, 100, false, true, "Residual-stream RMS per layer."},
      {"attention_entropy", true, 100, false, true, "Attention entropy per layer."},
      {"logit_std", true, 100, false, false, "Standard deviation of the output logits."},
      {"initial_loss", true, 1, false, false, "Step-0 loss against log V (seed 001)."},
      {"moe_routing", true, 10, false, false,
       "MoE models: assignments per expert, max/mean load, router entropy and balancing loss per MoE layer."},
  };
  return m;
}

// "model" for "model.d_model": the table a key belongs to.
inline std::string section_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

}  // namespace gc::schema_detail
