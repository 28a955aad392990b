// The per-step bookkeeping of a model's MoE layers, host side and the same for every backend
// (the engine's view, engine/engine.hpp): the step's expert loads and dropped assignments, their
// sums over data-parallel ranks, the windows the routing records report (train/moe_state.hpp),
// and aux_free's selection biases, moved after each step and saved in checkpoints. The layers
// themselves are model/moe_block.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "model/moe_block.hpp"

namespace gcm {

// aux_free (DeepSeek-V3): after each step, raise the bias of under-loaded
// experts and lower it for over-loaded ones by the update rate
// (moe.load_balance_coef): b_e += rate · sign(mean load − load_e).
template <typename Backend>
void update_selection_bias(MoeLayer<Backend>& L) {
  double mean = 0.0;
  for (std::int64_t c : L.load) mean += double(c);
  mean /= double(kExperts);
  for (int e = 0; e < kExperts; ++e) {
    const double c = double(L.load[std::size_t(e)]);
    const float step = float(kLoadBalanceCoef);
    L.bias[std::size_t(e)] += c < mean ? step : c > mean ? -step : 0.0f;
  }
}

// ---- the engine's view of a model's MoE layers (host side, any backend) ----

// One MoE layer's routing since the previous take.
struct MoeLayerStats {
  int layer = 0;
  std::vector<std::int64_t> load;  // assignments per expert (before any dropping)
  double router_entropy = 0.0;     // of the last micro-batch
  std::int64_t dropped = 0;        // assignments dropped by moe.capacity_factor
};

// Zeroes the per-step loads (at the start of a step).
template <typename Model>
void begin_moe_step(Model& model) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    std::fill(model.moe_layer(l).load.begin(), model.moe_layer(l).load.end(), 0);
    model.moe_layer(l).step_dropped = 0;
  }
}

// Data parallelism: sum(loads, n) sums each MoE layer's step loads over the
// ranks in place (before end_moe_step, so every rank moves its bias alike).
template <typename Model, typename Sum>
void sum_moe_loads(Model& model, Sum&& sum) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    sum(model.moe_layer(l).load.data(), std::int64_t(kExperts));
    if constexpr (kMoeCapacity > 0) {
      sum(&model.moe_layer(l).step_dropped, std::int64_t(1));
    }
  }
}

// Adds the step's loads (all ranks' by then) to the routing-record window.
template <typename Model>
void accumulate_moe_window(Model& model) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    auto& L = model.moe_layer(l);
    for (std::size_t e = 0; e < L.load.size(); ++e) L.window_load[e] += L.load[e];
    L.window_dropped += L.step_dropped;
  }
}

// After a step: its loads join the window, and the aux_free biases move toward balance.
template <typename Model>
void end_moe_step(Model& model) {
  accumulate_moe_window(model);
  if constexpr (kLoadBalance == LoadBalance::aux_free) {
    for (int l = 0; l < kLayers; ++l) {
      if (is_moe_layer(l)) update_selection_bias(model.moe_layer(l));
    }
  }
}

// The loads since the previous take (then zeroed) and each layer's router
// entropy, entropy_of(l) (it reads the scores where they are).
template <typename Model, typename Entropy>
std::vector<MoeLayerStats> take_moe_stats(Model& model, Entropy&& entropy_of) {
  std::vector<MoeLayerStats> out;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    auto& L = model.moe_layer(l);
    out.push_back({l, L.window_load, entropy_of(l), L.window_dropped});
    std::fill(L.window_load.begin(), L.window_load.end(), 0);
    L.window_dropped = 0;
  }
  return out;
}

// The aux_free selection biases, one vector per MoE layer in layer order.
template <typename Model>
std::vector<std::vector<float>> moe_biases(const Model& model) {
  std::vector<std::vector<float>> out;
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l)) out.push_back(model.moe_layer(l).bias);
  }
  return out;
}

template <typename Model>
void set_moe_biases(Model& model, const std::vector<std::vector<float>>& biases) {
  std::size_t i = 0;
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l) && i < biases.size()) model.moe_layer(l).bias = biases[i++];
  }
}

}  // namespace gcm
