#include "runtime/hf_names.hpp"

#include <cstdlib>

namespace gc::rt {

namespace {

constexpr const char* kLayers = "model.layers.";

// "model.layers.7.mlp.experts.up_proj.weight" -> {"model.layers.7.mlp.", "experts.up_proj.weight"}.
bool split_mlp(const std::string& name, std::string& prefix, std::string& rest) {
  const std::size_t at = name.find(".mlp.");
  if (name.rfind(kLayers, 0) != 0 || at == std::string::npos) return false;
  prefix = name.substr(0, at + 5);
  rest = name.substr(at + 5);
  return true;
}

std::string layer_prefix(int layer) { return kLayers + std::to_string(layer) + "."; }

}  // namespace

std::vector<HfPart> qwen2_moe_parts(const std::string& name, const std::vector<std::int64_t>& shape) {
  std::string prefix, rest;
  if (!split_mlp(name, prefix, rest)) return {{name, shape}};
  if (rest == "router.weight") return {{prefix + "gate.weight", shape}};
  if (rest.rfind("experts.", 0) == 0 && shape.size() == 3) {
    const std::string proj = rest.substr(8);
    const std::int64_t size = shape[1] * shape[2];
    std::vector<HfPart> parts;
    for (std::int64_t e = 0; e < shape[0]; ++e) {
      parts.push_back({prefix + "experts." + std::to_string(e) + "." + proj, {shape[1], shape[2]}, e * size});
    }
    return parts;
  }
  if (rest.rfind("shared_experts.", 0) == 0) {
    const std::string proj = rest.substr(15);
    return {{prefix + "shared_expert." + proj, shape, 0, proj == "down_proj.weight" ? 2.0f : 1.0f}};
  }
  return {{name, shape}};
}

std::vector<std::string> qwen2_moe_attention_biases(int layer) {
  const std::string attn = layer_prefix(layer) + "self_attn.";
  return {attn + "q_proj.bias", attn + "k_proj.bias", attn + "v_proj.bias"};
}

std::string qwen2_moe_shared_gate(int layer) { return layer_prefix(layer) + "mlp.shared_expert_gate.weight"; }

bool is_qwen2_moe_zero_tensor(const std::string& name) {
  if (name.rfind(kLayers, 0) != 0) return false;
  char* end = nullptr;
  const long layer = std::strtol(name.c_str() + std::string(kLayers).size(), &end, 10);
  if (end == name.c_str() + std::string(kLayers).size() || *end != '.') return false;
  for (const std::string& bias : qwen2_moe_attention_biases(int(layer))) {
    if (name == bias) return true;
  }
  return name == qwen2_moe_shared_gate(int(layer));
}

}  // namespace gc::rt
