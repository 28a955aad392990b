// The per-step bookkeeping of a model's MoE layers, the same for every backend (the engine's
// view, engine/engine.hpp): the step's expert loads and dropped assignments (each layer's step
// tally), their sums over data-parallel ranks, the windows the routing records report
// (train/moe_state.hpp), and aux_free's selection biases, moved after each step and saved in
// checkpoints. All of it stays where the backend keeps the routing (core/moe_balance.hpp); only
// a routing record or a checkpoint reads it on the host. The layers are model/moe_block.hpp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "config.hpp"
#include "model/moe_block.hpp"

namespace gc::tree {

// ---- the engine's view of a model's MoE layers (host side, any backend) ----

// One MoE layer's routing since the previous take.
struct MoeLayerStats {
  int layer = 0;
  std::vector<std::int64_t> load;  // assignments per expert (before any dropping)
  double router_entropy = 0.0;     // of the last micro-batch
  std::int64_t dropped = 0;        // assignments dropped by moe.capacity_factor
};

// Zeroes the per-step tallies (at the start of a step).
template <typename Model>
void begin_moe_step(Model& model) {
  using Backend = typename Model::Ops;
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l)) Backend::zero(model.moe_layer(l).step_tally);
  }
}

// Data parallelism: sum(tally, n) sums each MoE layer's step tally (E loads and the dropped, in
// the backend's memory) over the ranks in place, before end_moe_step, so that every rank moves
// its bias alike.
template <typename Model, typename Sum>
void sum_moe_loads(Model& model, Sum&& sum) {
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l)) sum(model.moe_layer(l).step_tally.data(), std::int64_t(kExperts) + 1);
  }
}

// A step's tallies (all ranks' by then) join the routing-record window; with move_biases,
// aux_free's biases move toward balance: b_e += rate · sign(mean load − load_e).
template <typename Model>
void close_moe_tallies(Model& model, bool move_biases) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    auto& L = model.moe_layer(l);
    model.backend().moe_close_step(L.step_tally.data(), L.window_tally.data(), move_biases ? L.bias.data() : nullptr,
                                   kLoadBalanceCoef);
  }
}

// After a training step.
template <typename Model>
void end_moe_step(Model& model) {
  close_moe_tallies(model, kLoadBalance == LoadBalance::aux_free);
}

// Without moving any bias (./analyze: the validation batches' routing).
template <typename Model>
void accumulate_moe_window(Model& model) {
  close_moe_tallies(model, false);
}

// The window's loads and dropped since the previous take (then zeroed), read on the host, and
// each layer's router entropy, entropy_of(l) (it reads the scores where they are).
template <typename Model, typename Entropy>
std::vector<MoeLayerStats> take_moe_stats(Model& model, Entropy&& entropy_of) {
  using Backend = typename Model::Ops;
  std::vector<MoeLayerStats> out;
  std::vector<double> tally(std::size_t(kExperts) + 1);
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    auto& L = model.moe_layer(l);
    Backend::to_host(tally.data(), L.window_tally.data(), std::int64_t(kExperts) + 1);
    MoeLayerStats stats{l, std::vector<std::int64_t>(std::size_t(kExperts)), entropy_of(l), 0};
    for (int e = 0; e < kExperts; ++e) stats.load[std::size_t(e)] = std::int64_t(tally[std::size_t(e)]);
    stats.dropped = std::int64_t(tally[std::size_t(kExperts)]);
    out.push_back(std::move(stats));
    Backend::zero(L.window_tally);
  }
  return out;
}

// The aux_free selection biases, one vector per MoE layer in layer order (read on the host).
template <typename Model>
std::vector<std::vector<float>> moe_biases(const Model& model) {
  using Backend = typename Model::Ops;
  std::vector<std::vector<float>> out;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    std::vector<float> bias(static_cast<std::size_t>(kExperts));
    Backend::to_host(bias.data(), model.moe_layer(l).bias.data(), std::int64_t(kExperts));
    out.push_back(std::move(bias));
  }
  return out;
}

// Sets them (a checkpoint's; each vector holds E values: train/checkpointing checks it).
template <typename Model>
void set_moe_biases(Model& model, const std::vector<std::vector<float>>& biases) {
  using Backend = typename Model::Ops;
  std::size_t i = 0;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l) || i >= biases.size()) continue;
    const std::vector<float>& bias = biases[i++];
    Backend::from_host(model.moe_layer(l).bias.data(), bias.data(),
                       std::min<std::int64_t>(std::int64_t(bias.size()), kExperts));
  }
}

}  // namespace gc::tree
