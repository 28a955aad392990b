// The trainer's side of mixture-of-experts: the routing records of
// metrics.jsonl (docs/metrics.md "Mixture of experts") and the aux_free
// selection biases in checkpoints, from what the engine reports
// (engine/engine.hpp moe_*; model/moe_steps.hpp).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine/engine.hpp"
#include "metrics/collector.hpp"
#include "model/moe_block.hpp"
#include "runtime/error.hpp"

namespace gc::tree {

// One record per logged step, keyed by MoE layer: the assignments each expert
// received since the previous record (training batches; a window of several
// steps is less noisy than one batch), max/mean of that load, the router
// entropy of the last micro-batch, and the step's balancing loss; with moe.capacity_factor the
// assignments dropped since the previous record and their share of the load.
inline Json moe_record(const std::vector<MoeLayerStats>& stats, std::int64_t step, double aux_loss) {
  Json load = Json::object(), imbalance = Json::object(), entropy = Json::object(), dropped = Json::object(),
       dropped_fraction = Json::object();
  for (const MoeLayerStats& s : stats) {
    const std::string key = std::to_string(s.layer);
    double total = 0.0, most = 0.0;
    for (std::int64_t c : s.load) {
      total += double(c);
      most = std::max(most, double(c));
    }
    load[key] = s.load;
    imbalance[key] = total > 0.0 ? most / (total / double(kExperts)) : 0.0;
    entropy[key] = s.router_entropy;
    dropped[key] = s.dropped;
    dropped_fraction[key] = total > 0.0 ? double(s.dropped) / total : 0.0;
  }
  Json record = {{"step", step},           {"metric", "moe_routing"},     {"load", load},
                 {"imbalance", imbalance}, {"router_entropy", entropy}, {"aux_loss", aux_loss}};
  if constexpr (kMoeCapacity > 0) {
    record["dropped"] = dropped;
    record["dropped_fraction"] = dropped_fraction;
  }
  return record;
}

// analyze's routing record over the validation batches (the last batch's entropy), marked as
// such, for a tree that routes tokens and records routing. (Here rather than in analyze_main.cpp:
// the specializer prunes the branch in the headers' shared parse, and analyze_main.cpp, left with
// no `if constexpr`, is not parsed at all.)
inline void append_validation_routing(std::vector<Json>& records, Engine& engine, std::int64_t step) {
  if constexpr (kMoe && kMoeRoutingOn) {
    Json routing = moe_record(engine.moe_take_stats(), step, engine.last_aux_loss());
    routing["data"] = "validation";
    records.push_back(routing);
  }
}

// The aux_free biases for a checkpoint's state.json: {"LAYER": [b_0, ...]}.
inline Json moe_bias_json(const std::vector<std::vector<float>>& biases) {
  Json out = Json::object();
  std::size_t i = 0;
  for (int l = 0; l < kLayers; ++l) {
    if (is_moe_layer(l) && i < biases.size()) out[std::to_string(l)] = biases[i++];
  }
  return out;
}

// The biases of a checkpoint's extra.moe_bias; `where` names the file in errors.
inline std::vector<std::vector<float>> moe_bias_from_json(const Json& state, const std::string& where) {
  std::vector<std::vector<float>> out;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    const std::string key = std::to_string(l);
    if (!state.is_object() || !state.contains(key) || !state[key].is_array() ||
        state[key].size() != std::size_t(kExperts)) {
      throw gc::rt::RuntimeError(where, "extra.moe_bias lacks layer " + key + "'s " + std::to_string(kExperts) +
                                            " selection biases (moe.load_balance = \"aux_free\")");
    }
    std::vector<float> layer;
    for (const auto& b : state[key]) {
      if (!b.is_number()) throw gc::rt::RuntimeError(where, "extra.moe_bias." + key + " holds a non-number");
      layer.push_back(b.get<float>());
    }
    out.push_back(std::move(layer));
  }
  return out;
}

}  // namespace gc::tree
