#include "runtime/hf_import.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"

namespace gc::rt {

namespace {

namespace fs = std::filesystem;

// "model.layers.7.mlp.experts.up_proj.weight" -> {"model.layers.7.mlp.", "experts.up_proj.weight"}.
bool split_mlp(const std::string& name, std::string& prefix, std::string& rest) {
  const std::size_t at = name.find(".mlp.");
  if (name.rfind("model.layers.", 0) != 0 || at == std::string::npos) return false;
  prefix = name.substr(0, at + 5);
  rest = name.substr(at + 5);
  return true;
}

void require_zero(const SafetensorsFile& file, const std::string& name, std::set<std::string>& used) {
  if (!file.has(name)) return;
  used.insert(name);
  for (float x : file.load_f32(name)) {
    if (x != 0.0f) {
      throw tensor_error(file.path(), name, "is not zero: this Qwen2-MoE model is not one gcompile trains "
                                           "(it has no attention biases and an ungated shared expert)");
    }
  }
}

// One tree parameter from a Qwen2-MoE export.
void load_qwen2_moe(const SafetensorsFile& file, const ParamBuffers& p, float* out, std::set<std::string>& used) {
  // The attention biases Qwen2-MoE carries must be zero (checked with the layer's q_proj).
  const std::string q = "self_attn.q_proj.weight";
  if (p.name.size() > q.size() && p.name.compare(p.name.size() - q.size(), q.size(), q) == 0) {
    const std::string layer = p.name.substr(0, p.name.size() - q.size());
    for (const char* b : {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"}) {
      require_zero(file, layer + b, used);
    }
  }
  std::string prefix, rest;
  if (!split_mlp(p.name, prefix, rest)) {
    file.load_f32(p.name, p.shape, out);
    used.insert(p.name);
    return;
  }
  if (rest == "router.weight") {
    file.load_f32(prefix + "gate.weight", p.shape, out);
    used.insert(prefix + "gate.weight");
  } else if (rest.rfind("experts.", 0) == 0 && p.shape.size() == 3) {
    const std::string proj = rest.substr(8);
    const std::vector<std::int64_t> one = {p.shape[1], p.shape[2]};
    for (std::int64_t e = 0; e < p.shape[0]; ++e) {
      const std::string name = prefix + "experts." + std::to_string(e) + "." + proj;
      file.load_f32(name, one, out + e * p.shape[1] * p.shape[2]);
      used.insert(name);
    }
  } else if (rest.rfind("shared_experts.", 0) == 0) {
    const std::string proj = rest.substr(15);
    const std::string name = prefix + "shared_expert." + proj;
    file.load_f32(name, p.shape, out);
    used.insert(name);
    if (proj == "down_proj.weight") {
      for (std::int64_t i = 0; i < numel(p.shape); ++i) out[i] *= 0.5f;  // exact: the export doubled it
    }
    require_zero(file, prefix + "shared_expert_gate.weight", used);
  } else {
    file.load_f32(p.name, p.shape, out);
    used.insert(p.name);
  }
}

}  // namespace

HfImport load_hf_export(const std::string& dir, const std::vector<ParamBuffers>& params) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw RuntimeError(dir, "--init-from: no such directory");
  if (!fs::exists(config_path, ec)) {
    throw RuntimeError(dir, "--init-from: not a Hugging Face model directory (no config.json); write one with "
                            "gcompile export CHECKPOINT --hf DIR");
  }
  HfImport out;
  try {
    out.config = nlohmann::json::parse(read_file(config_path));
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(config_path, std::string("not valid JSON: ") + e.what());
  }
  const std::string type = out.config.value("model_type", "");
  if (type != "llama" && type != "qwen2_moe" && type != "gcompile") {
    throw RuntimeError(config_path, "model_type '" + type + "': --init-from reads exports of gcompile models "
                                    "(llama, qwen2_moe or gcompile)");
  }
  const SafetensorsFile file = read_safetensors((fs::path(dir) / "model.safetensors").string());
  std::set<std::string> used;
  std::vector<std::vector<float>> staged(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamBuffers& p = params[i];
    staged[i].resize(std::size_t(numel(p.shape)));
    if (!file.has(p.name) && type != "qwen2_moe") {
      throw tensor_error(file.path(), p.name, "missing: this tree's model has it, so the export is from a spec "
                                              "with other features or shapes");
    }
    if (type == "qwen2_moe") {
      load_qwen2_moe(file, p, staged[i].data(), used);
    } else {
      file.load_f32(p.name, p.shape, staged[i].data());
      used.insert(p.name);
    }
  }
  for (const TensorInfo& t : file.tensors()) {
    std::string prefix, rest;
    if (type == "gcompile" && split_mlp(t.name, prefix, rest) && rest == "router.selection_bias") {
      const int layer = std::stoi(t.name.substr(std::string("model.layers.").size()));
      out.selection_bias[layer] = file.load_f32(t.name);
      used.insert(t.name);
    }
    if (!used.count(t.name)) {
      throw tensor_error(file.path(), t.name, "this tree's model has no such tensor: the export is from a spec "
                                              "with other features (e.g. gated attention or QK-norm)");
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::copy(staged[i].begin(), staged[i].end(), params[i].weight);
  }
  return out;
}

}  // namespace gc::rt
