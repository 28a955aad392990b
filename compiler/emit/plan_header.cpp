// plan.hpp: what varies per tensor (names, shapes, init rules, optimizer
// settings) as constexpr tables, in the order of the plan's parameter table.
#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/embedded.hpp"
#include "common/text.hpp"
#include "emit/emit.hpp"
#include "spec/schema.hpp"

namespace gc {

namespace {

const char* dist_enum(const ParamEntry& p) {
  if (p.cls == ParamClass::norm) return "InitKind::ones";
  switch (p.distribution) {
    case Distribution::normal: return "InitKind::normal";
    case Distribution::trunc_normal: return "InitKind::trunc_normal";
    case Distribution::uniform: return "InitKind::uniform";
  }
  return "InitKind::normal";
}

std::string literal(double v) {
  std::string s = format_double(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

// The tensor (after "model.layers.N.") whose row index each field of LayerParams holds; -1 when
// the layer lacks it.
const std::map<std::string, std::string>& layer_field_tensors() {
  static const std::map<std::string, std::string> tensors = {
      {"input_norm", "input_layernorm.weight"},
      {"q", "self_attn.q_proj.weight"},
      {"k", "self_attn.k_proj.weight"},
      {"v", "self_attn.v_proj.weight"},
      {"q_norm", "self_attn.q_norm.weight"},
      {"k_norm", "self_attn.k_norm.weight"},
      {"gate", "self_attn.gate_proj.weight"},
      {"o", "self_attn.o_proj.weight"},
      {"attn_out_norm", "self_attn.out_norm.weight"},
      {"post_attn_norm", "post_attention_layernorm.weight"},
      {"mlp_gate", "mlp.gate_proj.weight"},
      {"mlp_up", "mlp.up_proj.weight"},
      {"mlp_down", "mlp.down_proj.weight"},
      {"mlp_out_norm", "mlp.out_norm.weight"},
      {"router", "mlp.router.weight"},
      {"experts_gate", "mlp.experts.gate_proj.weight"},
      {"experts_up", "mlp.experts.up_proj.weight"},
      {"experts_down", "mlp.experts.down_proj.weight"},
      {"shared_gate", "mlp.shared_experts.gate_proj.weight"},
      {"shared_up", "mlp.shared_experts.up_proj.weight"},
      {"shared_down", "mlp.shared_experts.down_proj.weight"},
  };
  return tensors;
}

// What a row of kParams holds, in the order the emitter writes it.
const std::vector<std::string> kParamInfoFields = {"name",  "cls",  "layer",  "rank",    "shape",
                                                   "numel", "init", "cutoff", "lr_mult", "weight_decay"};

// The members of `type` in templates/plan_types.hpp, in declaration order (one per line: the name
// before ';' or '['; the header declares one member per line, without initializers).
std::vector<std::string> declared_fields(const std::string& type) {
  const std::string* text = nullptr;
  for (const auto& f : embedded_templates()) {
    if (f.path == "plan_types.hpp") text = &f.text;
  }
  if (!text) throw std::logic_error("templates/plan_types.hpp is not embedded in gcompile");
  const std::size_t open = text->find("struct " + type + " {");
  const std::size_t close = open == std::string::npos ? open : text->find("\n};", open);
  if (close == std::string::npos) throw std::logic_error("templates/plan_types.hpp declares no struct " + type);
  static const std::regex member(R"((\w+)\s*(\[\d+\])?\s*;\s*$)");
  std::vector<std::string> fields;
  std::istringstream lines(text->substr(open, close - open));
  for (std::string line; std::getline(lines, line);) {
    line = line.substr(0, line.find("//"));
    std::smatch m;
    if (std::regex_search(line, m, member)) fields.push_back(m[1]);
  }
  return fields;
}

// ParamInfo's fields in the template are those of the row plan_header writes, in its order.
void check_param_info_fields() {
  const std::vector<std::string> declared = declared_fields("ParamInfo");
  if (declared != kParamInfoFields) {
    throw std::logic_error("templates/plan_types.hpp: ParamInfo's fields (" + join(declared, ", ") +
                           ") differ from the row compiler/emit/plan_header.cpp writes (kParamInfoFields: " +
                           join(kParamInfoFields, ", ") + ")");
  }
}

// LayerParams' fields in the template's order; each must have its tensor here, and every tensor
// here its field (the rows are written positionally, so a field added, removed or moved on one
// side only would shift every value after it).
const std::vector<std::string>& layer_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> declared = declared_fields("LayerParams");
    for (const auto& f : declared) {
      if (!layer_field_tensors().count(f)) {
        throw std::logic_error("templates/plan_types.hpp: LayerParams::" + f +
                               " has no tensor in compiler/emit/plan_header.cpp (layer_field_tensors)");
      }
    }
    for (const auto& [field, tensor] : layer_field_tensors()) {
      if (std::find(declared.begin(), declared.end(), field) == declared.end()) {
        throw std::logic_error("templates/plan_types.hpp: LayerParams lacks the field " + field + " (" + tensor +
                               ") that compiler/emit/plan_header.cpp fills (layer_field_tensors)");
      }
    }
    if (declared.size() != layer_field_tensors().size()) {
      throw std::logic_error("templates/plan_types.hpp: LayerParams declares a field twice (" + join(declared, ", ") + ")");
    }
    return declared;
  }();
  return fields;
}

int index_of(const Plan& plan, const std::string& name) {
  for (std::size_t i = 0; i < plan.params.size(); ++i) {
    if (plan.params[i].name == name) return int(i);
  }
  return -1;
}

void layer_index_tables(std::ostringstream& o, const Plan& plan) {
  o << "// Row indices into kParams (-1: the model has no such tensor).\n";
  o << "inline constexpr int kParamEmbed = " << index_of(plan, "model.embed_tokens.weight") << ";\n";
  o << "inline constexpr int kParamEmbedNorm = " << index_of(plan, "model.embed_norm.weight") << ";\n";
  o << "inline constexpr int kParamFinalNorm = " << index_of(plan, "model.norm.weight") << ";\n";
  o << "inline constexpr int kParamLmHead = " << index_of(plan, "lm_head.weight") << ";\n\n";
  o << "inline constexpr int kNumLayers = " << plan.layers.size() << ";\n";
  o << "inline constexpr LayerParams kLayerParams[kNumLayers] = {\n";
  for (const auto& layer : plan.layers) {
    const std::string prefix = "model.layers." + std::to_string(layer.index) + ".";
    o << "    {";
    for (std::size_t i = 0; i < layer_fields().size(); ++i) {
      o << (i ? ", " : "") << index_of(plan, prefix + layer_field_tensors().at(layer_fields()[i]));
    }
    o << "},\n";
  }
  o << "};\n\n";
}

// "sink_score" -> "SinkScore"
std::string camel(const std::string& name) {
  std::string out;
  bool upper = true;
  for (char c : name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

std::string bool_list(const std::vector<bool>& v) {
  std::string out = "{";
  for (std::size_t i = 0; i < v.size(); ++i) out += std::string(i ? ", " : "") + (v[i] ? "true" : "false");
  return out + "}";
}

// The [metrics] selections: for each metric with `layers`, a mask over layers;
// for each with `classes`, a mask over kParams rows (class chosen, and layer
// chosen when the metric has layers too). Emitted for disabled metrics too, so
// the templates compile the same way whatever is on.
void metric_tables(std::ostringstream& o, const Plan& plan) {
  o << "// What each metric measures ([metrics.NAME] layers and classes in the spec).\n";
  const auto& spec = plan.spec.metrics;
  for (const auto& name : metric_names()) {
    const MetricSpec& m = spec.metrics.at(name);
    const bool has_layers = find_key("metrics." + name + ".layers") != nullptr;
    const bool has_classes = find_key("metrics." + name + ".classes") != nullptr;
    std::vector<bool> layers(plan.layers.size(), m.layers.empty());
    for (std::int64_t l : m.layers) {
      if (l >= 0 && std::size_t(l) < layers.size()) layers[std::size_t(l)] = true;
    }
    if (has_layers) {
      o << "inline constexpr bool k" << camel(name) << "Layers[kNumLayers] = " << bool_list(layers) << ";\n";
    }
    if (has_classes) {
      std::vector<bool> tensors;
      for (const auto& p : plan.params) {
        bool chosen = std::find(m.classes.begin(), m.classes.end(), p.cls) != m.classes.end();
        if (has_layers && p.layer >= 0) chosen = chosen && layers[std::size_t(p.layer)];
        tensors.push_back(chosen);
      }
      o << "inline constexpr bool k" << camel(name) << "Tensors[kNumParams] = " << bool_list(tensors) << ";\n";
    }
  }
  o << "// Steps at which cosine matrices are saved as heatmaps (metrics.cosine_similarity.image_steps;\n"
       "// defined in plan_init.cpp, which a sweep over the step count, moving them, recompiles alone).\n"
       "extern const StepList kCosineImageSteps;\n\n";
}

// kCosineImageSteps' definition (plan_init.cpp).
void cosine_image_steps(std::ostream& o, const Spec& spec) {
  const auto& steps = spec.metrics.cosine_image_steps;
  o << "// Steps at which cosine matrices are saved as heatmaps (metrics.cosine_similarity.image_steps).\n";
  if (steps.empty()) {
    o << "const StepList kCosineImageSteps = {nullptr, 0};\n";
    return;
  }
  o << "namespace {\nconstexpr std::int64_t kCosineImageStepValues[] = {";
  for (std::size_t i = 0; i < steps.size(); ++i) o << (i ? ", " : "") << steps[i];
  o << "};\n}  // namespace\nconst StepList kCosineImageSteps = {kCosineImageStepValues, " << steps.size() << "};\n";
}

}  // namespace

std::string plan_init_source(const Plan& plan, const std::string& banner) {
  std::ostringstream o;
  o << banner;
  o << "// σ of every parameter's init rule, in kParams order (seed 000 §4.2: σ = fan^-γ unless\n"
       "// the spec gives a std expression; trunc_normal: σ of the untruncated normal).\n"
       "#include \"plan.hpp\"\n\nnamespace gc::tree {\n\n"
       "const double kInitStd[kNumParams] = {\n";
  for (const auto& p : plan.params) o << "    " << literal(p.std) << ",  // " << p.name << "\n";
  o << "};\n\n";
  cosine_image_steps(o, plan.spec);
  o << "\n}  // namespace gc::tree\n";
  return o.str();
}

std::string plan_header(const Plan& plan, const std::string& banner) {
  check_param_info_fields();
  std::ostringstream o;
  o << banner;
  o << "// The parameter table: every trainable tensor with its init rule (seed 000\n"
       "// §4.2: σ = fan^-γ unless the spec gives a std expression) and optimizer\n"
       "// settings. Row order is the order of the checkpoint and of the optimizer.\n"
       "#pragma once\n\n#include <cstdint>\n\n#include \"plan_types.hpp\"\n\nnamespace gc::tree {\n\n";
  o << "inline constexpr int kNumParams = " << plan.params.size() << ";\n";
  o << "inline constexpr std::int64_t kTotalParams = " << plan.counts.total << ";\n";
  o << "// Elements of the flat parameter array as planned (each tensor 128-aligned; model.hpp checks it).\n";
  o << "inline constexpr std::int64_t kStoredParams = " << plan.counts.stored << ";\n";
  o << "// FLOPs per token (6·matmul weights + attention) and planned bytes: the model's\n"
    << "// buffers for one micro-batch, and everything on one GPU (state + buffers + scratch).\n";
  o << "inline constexpr double kFlopsPerToken = " << literal(plan.flops.per_token) << ";\n";
  o << "inline constexpr std::int64_t kPlannedModelBufferBytes = " << std::int64_t(plan.memory.model_buffers) << ";\n";
  o << "inline constexpr std::int64_t kPlannedDeviceBytes = " << std::int64_t(plan.memory.device_total()) << ";\n";
  o << "// Rows of LM-head logits held at once (the whole micro-batch unless its logits exceed\n"
    << "// 2^27 elements): the head and the cross-entropy run in chunks of these rows.\n";
  o << "inline constexpr int kHeadChunkRows = " << plan.head_chunk_rows << ";\n";
  o << "// The CUDA backend's scratch for bf16 projections whose width is not a multiple of 8\n"
    << "// (cuda/aligned_linear.cuh: zero-padded copies; elements of the activation type and of fp32).\n";
  o << "inline constexpr std::int64_t kAlignScratchActElems = " << plan.align_scratch.act_elems << ";\n";
  o << "inline constexpr std::int64_t kAlignScratchGradElems = " << plan.align_scratch.grad_elems << ";\n\n";
  o << "inline constexpr ParamInfo kParams[kNumParams] = {\n";
  for (const auto& p : plan.params) {
    o << "    {" << cpp_string_literal(p.name) << ", " << cpp_string_literal(class_name(p.cls)) << ", " << p.layer << ", "
      << p.shape.size() << ", {";
    for (std::size_t i = 0; i < 3; ++i) o << (i ? ", " : "") << (i < p.shape.size() ? p.shape[i] : 1);
    o << "}, " << p.numel() << ", " << dist_enum(p) << ", " << literal(p.cutoff) << ", "
      << literal(p.lr_mult) << ", " << literal(p.weight_decay) << "},\n";
  }
  o << "};\n\n";
  o << "// σ of each row's init rule (trunc_normal: of the untruncated normal). Defined in\n"
       "// plan_init.cpp, the one file an init ablation changes, so a sweep over γ recompiles\n"
       "// that file alone.\n"
       "extern const double kInitStd[kNumParams];\n\n";
  layer_index_tables(o, plan);
  metric_tables(o, plan);
  o << "}  // namespace gc::tree\n";
  return o.str();
}

}  // namespace gc
