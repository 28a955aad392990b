#include "plan/params.hpp"

#include <string>

namespace gc {

namespace {

class TableBuilder {
 public:
  explicit TableBuilder(std::vector<ParamEntry>& out) : out_(out) {}

  // A linear map from `in` to `out` features: weight [out, in] (or
  // [experts, out, in] for stacked experts).
  void linear(std::string name, ParamClass cls, int layer, std::int64_t out, std::int64_t in, std::int64_t experts = 0) {
    ParamEntry p;
    p.name = std::move(name);
    p.cls = cls;
    p.layer = layer;
    p.shape = experts ? std::vector<std::int64_t>{experts, out, in} : std::vector<std::int64_t>{out, in};
    p.fan_in = in;
    p.fan_out = out;
    out_.push_back(std::move(p));
  }

  void norm(std::string name, int layer, std::int64_t dim) {
    ParamEntry p;
    p.name = std::move(name);
    p.cls = ParamClass::norm;
    p.layer = layer;
    p.shape = {dim};
    p.fan_in = dim;
    p.fan_out = dim;
    out_.push_back(std::move(p));
  }

 private:
  std::vector<ParamEntry>& out_;
};

void add_attention(TableBuilder& t, const Spec& spec, int l, const std::string& prefix) {
  const auto& m = spec.model;
  const std::int64_t q_dim = m.n_heads * m.head_dim;
  const std::int64_t kv_dim = m.n_kv_heads * m.head_dim;
  const std::string a = prefix + "self_attn.";
  t.linear(a + "q_proj.weight", ParamClass::attn_q, l, q_dim, m.d_model);
  t.linear(a + "k_proj.weight", ParamClass::attn_k, l, kv_dim, m.d_model);
  t.linear(a + "v_proj.weight", ParamClass::attn_v, l, kv_dim, m.d_model);
  if (m.qk_norm) {
    t.norm(a + "q_norm.weight", l, m.head_dim);
    t.norm(a + "k_norm.weight", l, m.head_dim);
  }
  // Seed 000 eq. 4: one gate per head (headwise) or per head channel (elementwise).
  if (m.gated_attention == GatedAttention::headwise) {
    t.linear(a + "gate_proj.weight", ParamClass::attn_gate, l, m.n_heads, m.d_model);
  } else if (m.gated_attention == GatedAttention::elementwise) {
    t.linear(a + "gate_proj.weight", ParamClass::attn_gate, l, q_dim, m.d_model);
  }
  t.linear(a + "o_proj.weight", ParamClass::attn_o, l, m.d_model, q_dim);
  if (m.norm_placement == NormPlacement::sandwich) t.norm(a + "out_norm.weight", l, m.d_model);
}

void add_dense_mlp(TableBuilder& t, const Spec& spec, int l, const std::string& prefix, std::int64_t d_ff) {
  const std::int64_t d = spec.model.d_model;
  t.linear(prefix + "mlp.gate_proj.weight", ParamClass::mlp_gate, l, d_ff, d);
  t.linear(prefix + "mlp.up_proj.weight", ParamClass::mlp_up, l, d_ff, d);
  t.linear(prefix + "mlp.down_proj.weight", ParamClass::mlp_down, l, d, d_ff);
}

void add_moe_mlp(TableBuilder& t, const Spec& spec, int l, const std::string& prefix) {
  const std::int64_t d = spec.model.d_model;
  const auto& e = spec.moe;
  t.linear(prefix + "mlp.router.weight", ParamClass::router, l, e.n_experts, d);
  t.linear(prefix + "mlp.experts.gate_proj.weight", ParamClass::expert_gate, l, e.expert_d_ff, d, e.n_experts);
  t.linear(prefix + "mlp.experts.up_proj.weight", ParamClass::expert_up, l, e.expert_d_ff, d, e.n_experts);
  t.linear(prefix + "mlp.experts.down_proj.weight", ParamClass::expert_down, l, d, e.expert_d_ff, e.n_experts);
  if (e.n_shared_experts > 0) {
    // Shared experts are always active, so they are one SwiGLU MLP of the
    // combined width.
    const std::int64_t width = e.n_shared_experts * e.shared_d_ff;
    t.linear(prefix + "mlp.shared_experts.gate_proj.weight", ParamClass::shared_gate, l, width, d);
    t.linear(prefix + "mlp.shared_experts.up_proj.weight", ParamClass::shared_up, l, width, d);
    t.linear(prefix + "mlp.shared_experts.down_proj.weight", ParamClass::shared_down, l, d, width);
  }
}

}  // namespace

std::vector<ParamEntry> list_parameters(const Spec& spec, const std::vector<LayerPlan>& layers) {
  std::vector<ParamEntry> params;
  TableBuilder t(params);
  const auto& m = spec.model;
  t.linear("model.embed_tokens.weight", ParamClass::embedding, -1, m.vocab_size, m.d_model);
  // The embedding is a lookup, not a matmul: PyTorch's convention (weight
  // [V, d]) gives fan_in = d and DESIGN §4 uses d_in = d_model.
  params.back().fan_in = m.d_model;
  params.back().fan_out = m.vocab_size;
  if (m.embedding_norm) t.norm("model.embed_norm.weight", -1, m.d_model);
  for (const auto& layer : layers) {
    const int l = layer.index;
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    t.norm(prefix + "input_layernorm.weight", l, m.d_model);
    add_attention(t, spec, l, prefix);
    t.norm(prefix + "post_attention_layernorm.weight", l, m.d_model);
    if (layer.kind == LayerKind::dense) {
      add_dense_mlp(t, spec, l, prefix, layer.d_ff);
    } else {
      add_moe_mlp(t, spec, l, prefix);
    }
    if (m.norm_placement == NormPlacement::sandwich) t.norm(prefix + "mlp.out_norm.weight", l, m.d_model);
  }
  t.norm("model.norm.weight", -1, m.d_model);
  if (!m.tie_embeddings) t.linear("lm_head.weight", ParamClass::lm_head, -1, m.vocab_size, m.d_model);
  return params;
}

}  // namespace gc
