// Starting a run from a Hugging Face directory written by `gcompile export`
// (./train --init-from DIR): the weights of model.safetensors (F32 or BF16)
// mapped back to the checkpoint's names. A Qwen2-MoE export's per-expert
// tensors are stacked again, its router is mlp.gate, and its shared down
// projection is halved back (the export doubled it for the constant 1/2 gate);
// its q/k/v biases and shared-expert gate must be zero (else the model is not
// one this tree computes). Every parameter of the tree must be present with
// its shape, and every tensor of the file must be used; nothing is copied
// unless all checks pass. Errors name the file and the tensor.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/checkpoint.hpp"

namespace gc::rt {

struct HfImport {
  nlohmann::json config;                          // config.json
  std::map<int, std::vector<float>> selection_bias;  // aux_free biases by MoE layer (custom-code exports)
};

// Loads DIR into the buffers' `weight` arrays (optimizer state untouched).
HfImport load_hf_export(const std::string& dir, const std::vector<ParamBuffers>& params);

}  // namespace gc::rt
