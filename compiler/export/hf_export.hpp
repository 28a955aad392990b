// `gcompile export CHECKPOINT --hf OUT`: a training checkpoint as a Hugging
// Face model directory that `transformers` loads (docs/evaluation.md).
//
// The layout follows the spec (hf_layout.cpp):
//   - LlamaForCausalLM    a dense pre-norm model with nothing Llama lacks;
//   - Qwen2MoeForCausalLM an MoE model Qwen2-MoE can express exactly (zero
//                         q/k/v biases, a shared-expert gate of constant 1/2
//                         with the shared down projection doubled);
//   - GcompileForCausalLM every other spec, with modeling_gcompile.py,
//                         configuration_gcompile.py and gcompile_decoder.py (the
//                         model, shared with the bench and the test oracle)
//                         written into the export and registered through
//                         auto_map (trust_remote_code=True).
// Beside config.json, generation_config.json and model.safetensors (F32 or
// BF16), a run on text data gets its SentencePiece model as tokenizer.model
// with the config a Llama tokenizer needs (BOS added, as the training data had).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.hpp"

namespace gc {

enum class HfKind { llama, qwen2_moe, gcompile };

struct HfLayout {
  HfKind kind = HfKind::gcompile;
  std::vector<std::string> reasons;  // why the spec needs custom code (empty otherwise)
};

const char* hf_architecture(HfKind kind);  // "LlamaForCausalLM", ...

// The most standard class that computes this plan's model exactly.
HfLayout choose_hf_layout(const Plan& plan);

struct HfExportOptions {
  std::string checkpoint;  // a checkpoint directory, or a run directory (its latest checkpoint)
  std::string out;         // must not exist, or be an empty directory
  bool bf16 = false;       // --dtype bf16
  std::string tokenizer;   // a SentencePiece model overriding the run's (optional)
};

// Writes the export; returns 0, or prints the error (naming the file) and returns 1.
int export_hf(const HfExportOptions& options);

// argv after "export": CHECKPOINT --hf OUT [--dtype fp32|bf16] [--tokenizer FILE].
int export_command(int argc, char** argv);

}  // namespace gc
