// Which Hugging Face class computes a plan's model exactly, its config.json,
// and the checkpoint tensors under that class's names.
#include "export/hf_layout.hpp"

#include <cmath>
#include <cstdint>

#include "runtime/hf_names.hpp"
#include "runtime/safetensors.hpp"

namespace gc {

namespace {

// The value the generated code uses: the float knob's value, as a double.
double as_float(double x) { return double(float(x)); }

bool same_float(double a, double b) { return float(a) == float(b); }

std::vector<int> layers_of(const Plan& plan, LayerKind kind) {
  std::vector<int> out;
  for (const LayerPlan& l : plan.layers) {
    if (l.kind == kind) out.push_back(l.index);
  }
  return out;
}

// What plain Llama (and Qwen2-MoE) attention and norms cannot express.
std::vector<std::string> non_llama_features(const Plan& plan) {
  const ModelSpec& m = plan.spec.model;
  std::vector<std::string> r;
  if (m.gated_attention != GatedAttention::none) r.push_back(std::string("gated_attention = ") + to_string(m.gated_attention));
  if (m.embedding_norm) r.push_back("embedding_norm");
  if (m.qk_norm) r.push_back("qk_norm");
  if (m.norm_placement != NormPlacement::pre) r.push_back("norm_placement = sandwich");
  if (!same_float(plan.embedding_scale, 1.0)) r.push_back("embedding_scale != 1");
  if (!same_float(plan.logit_scale, 1.0)) r.push_back("logit_scale != 1");
  if (!same_float(plan.attn_scale, 1.0 / std::sqrt(double(m.head_dim)))) r.push_back("attn_scale != 1/sqrt(head_dim)");
  return r;
}

std::vector<std::string> non_qwen2_moe_features(const Plan& plan) {
  const ModelSpec& m = plan.spec.model;
  const MoeSpec& moe = plan.spec.moe;
  std::vector<std::string> r = non_llama_features(plan);
  if (m.head_dim * m.n_heads != m.d_model) r.push_back("head_dim * n_heads != d_model");
  if (moe.router_scoring != RouterScoring::softmax) r.push_back("moe.router_scoring = sigmoid");
  if (moe.load_balance == LoadBalance::aux_free) r.push_back("moe.load_balance = aux_free (selection biases)");
  if (moe.n_shared_experts == 0) r.push_back("no shared expert");
  return r;
}

nlohmann::json common_config(const Plan& plan, bool bf16) {
  const ModelSpec& m = plan.spec.model;
  nlohmann::json c;
  c["vocab_size"] = m.vocab_size;
  c["hidden_size"] = m.d_model;
  c["num_hidden_layers"] = m.n_layers;
  c["num_attention_heads"] = m.n_heads;
  c["num_key_value_heads"] = m.n_kv_heads;
  c["head_dim"] = m.head_dim;
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = m.max_seq_len > 0 ? m.max_seq_len : plan.spec.train.seq_len;
  c["rms_norm_eps"] = as_float(m.norm_eps);
  c["rope_theta"] = m.rope_theta;
  c["tie_word_embeddings"] = m.tie_embeddings;
  c["torch_dtype"] = bf16 ? "bfloat16" : "float32";
  c["use_cache"] = true;
  c["initializer_range"] = 0.02;
  c["attention_dropout"] = 0.0;
  return c;
}

std::int64_t dense_width(const Plan& plan) {
  for (const LayerPlan& l : plan.layers) {
    if (l.kind == LayerKind::dense) return l.d_ff;
  }
  return plan.spec.moe.dense_d_ff > 0 ? plan.spec.moe.dense_d_ff : plan.spec.model.d_ff;
}

}  // namespace

const char* hf_architecture(HfKind kind) {
  switch (kind) {
    case HfKind::llama: return "LlamaForCausalLM";
    case HfKind::qwen2_moe: return "Qwen2MoeForCausalLM";
    case HfKind::gcompile: return "GcompileForCausalLM";
  }
  return "?";
}

HfLayout choose_hf_layout(const Plan& plan) {
  HfLayout out;
  if (plan.spec.model.arch == Arch::dense) {
    out.reasons = non_llama_features(plan);
    out.kind = out.reasons.empty() ? HfKind::llama : HfKind::gcompile;
  } else {
    out.reasons = non_qwen2_moe_features(plan);
    out.kind = out.reasons.empty() ? HfKind::qwen2_moe : HfKind::gcompile;
  }
  return out;
}

nlohmann::json hf_config(const Plan& plan, const HfLayout& layout, bool bf16, const nlohmann::json& provenance) {
  const ModelSpec& m = plan.spec.model;
  const MoeSpec& moe = plan.spec.moe;
  nlohmann::json c = common_config(plan, bf16);
  c["architectures"] = {hf_architecture(layout.kind)};
  switch (layout.kind) {
    case HfKind::llama:
      c["model_type"] = "llama";
      c["intermediate_size"] = m.d_ff;
      c["attention_bias"] = false;
      c["mlp_bias"] = false;
      c["pretraining_tp"] = 1;
      c["rope_scaling"] = nullptr;
      break;
    case HfKind::qwen2_moe:
      c["model_type"] = "qwen2_moe";
      c["intermediate_size"] = dense_width(plan);
      c["moe_intermediate_size"] = moe.expert_d_ff;
      c["shared_expert_intermediate_size"] = moe.n_shared_experts * moe.shared_d_ff;
      c["num_experts"] = moe.n_experts;
      c["num_experts_per_tok"] = moe.top_k;
      c["norm_topk_prob"] = moe.norm_topk_prob;
      c["decoder_sparse_step"] = 1;
      c["mlp_only_layers"] = layers_of(plan, LayerKind::dense);
      c["output_router_logits"] = false;
      c["router_aux_loss_coef"] = moe.load_balance == LoadBalance::aux_loss ? moe.load_balance_coef : 0.0;
      c["use_sliding_window"] = false;
      c["sliding_window"] = nullptr;
      c["max_window_layers"] = m.n_layers;
      c["rope_scaling"] = nullptr;
      break;
    case HfKind::gcompile:
      c["model_type"] = "gcompile";
      c["use_cache"] = false;  // modeling_gcompile.py keeps no key/value cache
      c["auto_map"] = {{"AutoConfig", "configuration_gcompile.GcompileConfig"},
                       {"AutoModelForCausalLM", "modeling_gcompile.GcompileForCausalLM"}};
      c["intermediate_size"] = dense_width(plan);
      c["norm_placement"] = to_string(m.norm_placement);
      c["embedding_norm"] = m.embedding_norm;
      c["qk_norm"] = m.qk_norm;
      c["gated_attention"] = to_string(m.gated_attention);
      c["embedding_scale"] = as_float(plan.embedding_scale);
      c["attn_scale"] = as_float(plan.attn_scale);
      c["logit_scale"] = as_float(plan.logit_scale);
      c["moe_layers"] = layers_of(plan, LayerKind::moe);
      if (m.arch == Arch::moe) {
        c["num_experts"] = moe.n_experts;
        c["num_experts_per_tok"] = moe.top_k;
        c["num_shared_experts"] = moe.n_shared_experts;
        c["moe_intermediate_size"] = moe.expert_d_ff;
        c["shared_intermediate_size"] = moe.shared_d_ff;
        c["router_scoring"] = moe.router_scoring == RouterScoring::softmax ? "softmax" : "sigmoid";
        c["norm_topk_prob"] = moe.norm_topk_prob;
        c["selection_bias"] = moe.load_balance == LoadBalance::aux_free;
      }
      break;
  }
  c["gcompile"] = provenance;
  return c;
}

std::vector<HfTensor> hf_tensors(const Plan& plan, const HfLayout& layout, const TensorSource& source) {
  std::vector<HfTensor> out;
  const MoeSpec& moe = plan.spec.moe;
  for (const ParamEntry& p : plan.params) {
    std::vector<float> data = source.weight(p.name, p.shape);
    if (layout.kind != HfKind::qwen2_moe) {
      out.push_back({p.name, p.shape, std::move(data)});
      continue;
    }
    for (const rt::HfPart& part : rt::qwen2_moe_parts(p.name, p.shape)) {
      const auto begin = data.begin() + std::ptrdiff_t(part.offset);
      std::vector<float> values(begin, begin + std::ptrdiff_t(rt::numel(part.shape)));
      for (float& x : values) x *= part.scale;
      out.push_back({part.name, part.shape, std::move(values)});
    }
  }
  if (layout.kind == HfKind::qwen2_moe) {
    // Zeros for what Qwen2-MoE has and gcompile's model lacks (runtime/hf_names.hpp).
    const ModelSpec& m = plan.spec.model;
    const std::int64_t widths[3] = {m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim, m.n_kv_heads * m.head_dim};
    for (const LayerPlan& l : plan.layers) {
      const std::vector<std::string> biases = rt::qwen2_moe_attention_biases(l.index);
      for (int i = 0; i < 3; ++i) out.push_back({biases[std::size_t(i)], {widths[i]}, std::vector<float>(std::size_t(widths[i]))});
      if (l.kind == LayerKind::moe) {
        out.push_back({rt::qwen2_moe_shared_gate(l.index), {1, m.d_model}, std::vector<float>(std::size_t(m.d_model))});
      }
    }
  }
  if (layout.kind == HfKind::gcompile && moe.load_balance == LoadBalance::aux_free) {
    for (const LayerPlan& l : plan.layers) {
      if (l.kind != LayerKind::moe) continue;
      out.push_back({"model.layers." + std::to_string(l.index) + ".mlp.router.selection_bias", {moe.n_experts},
                     source.selection_bias(l.index, moe.n_experts)});
    }
  }
  return out;
}

}  // namespace gc
