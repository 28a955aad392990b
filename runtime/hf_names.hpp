// How gcompile's checkpoint tensors appear in a Qwen2-MoE export, in one place
// for both directions (gcompile export writes them, train --init-from reads
// them back). Llama and custom-code exports keep the checkpoint's names.
//
//   mlp.router.weight                  -> mlp.gate.weight
//   mlp.experts.P.weight  [E, r, c]    -> mlp.experts.e.P.weight [r, c], e = 0..E-1
//   mlp.shared_experts.P.weight        -> mlp.shared_expert.P.weight (down_proj doubled)
//   (absent in gcompile's model, zero)    self_attn.{q,k,v}_proj.bias, mlp.shared_expert_gate.weight
//
// Qwen2-MoE multiplies the shared expert by sigmoid(x·w_gate); with w_gate = 0
// that is exactly 1/2, so the shared down projection is exported doubled
// (exact in binary floating point) and halved back on import.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gc::rt {

// One Qwen2-MoE tensor holding elements [offset, offset + numel(shape)) of a
// checkpoint tensor, multiplied by `scale`.
struct HfPart {
  std::string name;
  std::vector<std::int64_t> shape;
  std::int64_t offset = 0;
  float scale = 1.0f;
};

// The Qwen2-MoE tensors of checkpoint tensor `name` with `shape` (itself, renamed, or split by expert).
std::vector<HfPart> qwen2_moe_parts(const std::string& name, const std::vector<std::int64_t>& shape);

// The tensors Qwen2-MoE has and gcompile's model lacks, exported as zeros:
// layer L's q/k/v biases, and the shared-expert gate of an MoE layer.
std::vector<std::string> qwen2_moe_attention_biases(int layer);
std::string qwen2_moe_shared_gate(int layer);
// Whether `name` is one of those.
bool is_qwen2_moe_zero_tensor(const std::string& name);

}  // namespace gc::rt
