// Loading a checkpoint's (or a Hugging Face export's) weights into a host
// model, for the programs that evaluate a trained model (analyze, probe): not
// the optimizer state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine/cpu_model.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/hf_import.hpp"
#include "train/moe_state.hpp"

namespace gc::tree {

// A flat fp32 parameter array (kOffsets) as checkpoint buffers (weights only).
inline std::vector<gc::rt::ParamBuffers> weight_buffers(float* params) {
  std::vector<gc::rt::ParamBuffers> buffers;
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    buffers.push_back(
        {p.name, std::vector<std::int64_t>(p.shape, p.shape + p.rank), params + kOffsets.at[i], nullptr, nullptr});
  }
  return buffers;
}
inline std::vector<gc::rt::ParamBuffers> weight_buffers(Model<float>& model) { return weight_buffers(model.params.data()); }

// The aux_free selection biases, one vector per MoE layer in layer order,
// from an export's biases by layer (zeros for a layer the export lacks).
// Biases for a layer that routes without them (not an MoE layer, or a spec
// whose load_balance is not aux_free), or of the wrong length, are errors:
// the export's routing would silently change.
inline std::vector<std::vector<float>> selection_biases(const std::map<int, std::vector<float>>& by_layer,
                                                        const std::string& where) {
  for (const auto& [layer, bias] : by_layer) {
    if (layer < 0 || layer >= kLayers || !is_moe_layer(layer) || kLoadBalance != LoadBalance::aux_free) {
      throw gc::rt::RuntimeError(where, "has aux_free selection biases for layer " + std::to_string(layer) +
                                            ", but this tree's spec does not route that layer with them "
                                            "(moe.load_balance = \"aux_free\" on an MoE layer)");
    }
    if (bias.size() != std::size_t(kExperts)) {
      throw gc::rt::RuntimeError(where, "layer " + std::to_string(layer) + "'s selection bias has " +
                                            std::to_string(bias.size()) + " values for " + std::to_string(kExperts) +
                                            " experts");
    }
  }
  std::vector<std::vector<float>> out;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    const auto it = by_layer.find(l);
    out.push_back(it != by_layer.end() ? it->second : std::vector<float>(kExperts, 0.0f));
  }
  return out;
}

// Loads the weights (checked against this tree's spec hash and shapes) and,
// for aux_free MoE routing, the selection biases; returns the checkpoint's step.
inline std::int64_t load_weights(const std::string& path, float* params, std::vector<std::vector<float>>& biases) {
  const std::string dir = gc::rt::resolve_checkpoint(path);
  const gc::rt::CheckpointState state = gc::rt::load_checkpoint(dir, weight_buffers(params), kSpecHash);
  if constexpr (kMoe && kLoadBalance == LoadBalance::aux_free) {
    biases = moe_bias_from_json(state.extra.value("moe_bias", Json::object()), dir + "/" + gc::rt::kStateFile);
  }
  return state.step;
}
inline std::int64_t load_weights(const std::string& path, Model<float>& model) {
  std::vector<std::vector<float>> biases;
  const std::int64_t step = load_weights(path, model.params.data(), biases);
  if (!biases.empty()) set_moe_biases(model, biases);
  return step;
}

// Loads the weights of a `gcompile export` directory (runtime/hf_import.hpp).
inline void load_export_weights(const std::string& dir, Model<float>& model) {
  const gc::rt::HfImport imported = gc::rt::load_hf_export(dir, weight_buffers(model));
  const std::vector<std::vector<float>> biases = selection_biases(imported.selection_bias, dir + "/model.safetensors");
  if constexpr (kMoe && kLoadBalance == LoadBalance::aux_free) {
    set_moe_biases(model, biases);
  }
}

}  // namespace gc::tree
