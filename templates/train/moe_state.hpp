// The trainer's side of mixture-of-experts: per-step expert loads, the
// aux_free selection bias (updated after each step, saved in checkpoints) and
// the routing records of metrics.jsonl (docs/metrics.md "Mixture of experts").
// The host model is the training model (MoE trains on the CPU backend).
#pragma once

#include <cmath>
#include <string>

#include "config.hpp"
#include "metrics/collector.hpp"
#include "model/model.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics_log.hpp"

namespace gcm {

// Zeroes every MoE layer's load counters (at the start of a step).
inline void begin_moe_step(Model<float>& model) {
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l)) std::fill(model.moe_layer(l).load.begin(), model.moe_layer(l).load.end(), 0);
  }
}

// After the optimizer step: the aux_free bias moves toward balance.
inline void end_moe_step(Model<float>& model) {
  if constexpr (kLoadBalance == LoadBalance::aux_free) {
    for (int l = 0; l < kLayers; ++l) {
      if (is_moe_layer(l)) update_selection_bias(model.moe_layer(l));
    }
  }
}

// Mean over tokens of the router's entropy −Σ_e p log p (p = scores, or
// scores/Σ for sigmoid scoring) over the last forward's rows.
inline double router_entropy(const MoeLayer<cpu::Backend<float>>& L) {
  const std::size_t E = std::size_t(kExperts), rows = L.scores.size() / E;
  double total = 0.0;
  for (std::size_t t = 0; t < rows; ++t) {
    double sum = 0.0, h = 0.0;
    for (std::size_t e = 0; e < E; ++e) sum += double(L.scores[t * E + e]);
    for (std::size_t e = 0; e < E; ++e) {
      const double p = double(L.scores[t * E + e]) / sum;
      if (p > 0.0) h -= p * std::log(p);
    }
    total += h;
  }
  return rows ? total / double(rows) : 0.0;
}

// One record per logged step: per MoE layer the assignments each expert
// received since the previous record (training batches; a window of several
// steps is less noisy than one batch), max/mean of that load, the router
// entropy of the last micro-batch and the step's balancing loss. Starts the
// next window.
inline Json moe_record(Model<float>& model, std::int64_t step, double aux_loss) {
  Json load = Json::object(), imbalance = Json::object(), entropy = Json::object();
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    auto& L = model.moe_layer(l);
    const std::string key = std::to_string(l);
    double total = 0.0, most = 0.0;
    for (std::int64_t c : L.window_load) {
      total += double(c);
      most = std::max(most, double(c));
    }
    load[key] = L.window_load;
    std::fill(L.window_load.begin(), L.window_load.end(), 0);
    imbalance[key] = total > 0.0 ? most / (total / double(kExperts)) : 0.0;
    entropy[key] = router_entropy(L);
  }
  return {{"step", step},           {"metric", "moe_routing"},     {"load", load},
          {"imbalance", imbalance}, {"router_entropy", entropy}, {"aux_loss", aux_loss}};
}

// The aux_free biases for a checkpoint: {"LAYER": [b_0, ...]}.
inline Json moe_bias_state(const Model<float>& model) {
  Json out = Json::object();
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l)) out[std::to_string(l)] = model.moe_layer(l).bias;
  }
  return out;
}

inline void restore_moe_bias(Model<float>& model, const Json& state, const std::string& where) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    const std::string key = std::to_string(l);
    if (!state.is_object() || !state.contains(key) || !state[key].is_array() ||
        state[key].size() != std::size_t(kExperts)) {
      throw gc::rt::RuntimeError(where, "extra.moe_bias lacks layer " + key + "'s " + std::to_string(kExperts) +
                                            " selection biases (moe.load_balance = \"aux_free\")");
    }
    for (int e = 0; e < kExperts; ++e) model.moe_layer(l).bias[std::size_t(e)] = state[key][std::size_t(e)].get<float>();
  }
}

}  // namespace gcm
