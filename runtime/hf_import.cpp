#include "runtime/hf_import.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/hf_names.hpp"
#include "runtime/safetensors.hpp"

namespace gc::rt {

namespace {

namespace fs = std::filesystem;

bool is_selection_bias(const std::string& name, int& layer) {
  const std::string suffix = ".mlp.router.selection_bias";
  if (name.rfind("model.layers.", 0) != 0 || name.size() <= suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return false;
  }
  layer = std::stoi(name.substr(std::string("model.layers.").size()));
  return true;
}

void require_zero(const SafetensorsFile& file, const std::string& name) {
  for (float x : file.load_f32(name)) {
    if (x != 0.0f) {
      throw tensor_error(file.path(), name, "is not zero: this Qwen2-MoE model is not one gcompile trains "
                                           "(it has no attention biases and an ungated shared expert)");
    }
  }
}

// One tree parameter from a Qwen2-MoE export (runtime/hf_names.hpp).
void load_qwen2_moe(const SafetensorsFile& file, const ParamBuffers& p, float* out, std::set<std::string>& used) {
  for (const HfPart& part : qwen2_moe_parts(p.name, p.shape)) {
    float* at = out + part.offset;
    file.load_f32(part.name, part.shape, at);
    used.insert(part.name);
    if (part.scale != 1.0f) {
      const float undo = 1.0f / part.scale;  // 1/2: exact
      for (std::int64_t i = 0; i < numel(part.shape); ++i) at[i] *= undo;
    }
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
    int layer = 0;
    if (type == "gcompile" && is_selection_bias(t.name, layer)) {
      out.selection_bias[layer] = file.load_f32(t.name);
      used.insert(t.name);
    }
    if (type == "qwen2_moe" && !used.count(t.name) && is_qwen2_moe_zero_tensor(t.name)) {
      require_zero(file, t.name);
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
