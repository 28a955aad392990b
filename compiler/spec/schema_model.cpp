// The schema's [model], [moe] and [init] tables (the rest: schema.cpp).
#include "spec/classes.hpp"
#include "spec/schema_builder.hpp"

namespace gc::schema_detail {

void add_model(Builder& b) {
  auto& arch = with_default(b.add("model.arch", KeyType::choice, "Dense or mixture-of-experts decoder."),
                            Value::string("dense"));
  arch.choices = {"dense", "moe"};
  example(arch, "\"moe\"");
  example(between(required(b.add("model.vocab_size", KeyType::integer, "Vocabulary size V.")), 2, 2147483647),
          "60416");
  example(at_least(required(b.add("model.d_model", KeyType::integer, "Hidden size d.")), 1), "768");
  example(at_least(required(b.add("model.n_layers", KeyType::integer, "Number of decoder layers N.")), 1),
          "12");
  example(at_least(required(b.add("model.n_heads", KeyType::integer, "Attention (query) heads H.")), 1), "12");
  example(at_least(derived(b.add("model.n_kv_heads", KeyType::integer,
                                 "Key/value heads; fewer than n_heads gives grouped-query attention "
                                 "(n_heads must be divisible by it)."),
                           "= n_heads"),
                   1),
          "4");
  example(at_least(derived(b.add("model.head_dim", KeyType::integer,
                                 "Per-head dimension d_h; H·d_h need not equal d."),
                           "= d_model / n_heads"),
                   1),
          "64");
  example(at_least(derived(b.add("model.d_ff", KeyType::integer,
                                 "SwiGLU intermediate size of dense layers. Required for dense models."),
                           "required for dense"),
                   1),
          "2304");
  auto& act = with_default(b.add("model.activation", KeyType::choice, "MLP activation."),
                           Value::string("swiglu"));
  act.choices = {"swiglu"};
  example(at_least(with_default(b.add("model.norm_eps", KeyType::number,
                                      "RMSNorm ε (seed 000 eq. 2); accumulated in fp32 so 1e-12 matters."),
                                Value::number(1e-5)),
                   0, true),
          "1e-12");
  auto& place = with_default(b.add("model.norm_placement", KeyType::choice,
                                   "pre: RMSNorm before each sublayer. sandwich: also after each sublayer's "
                                   "output, before the residual add (seed 003 App. B)."),
                             Value::string("pre"));
  place.choices = {"pre", "sandwich"};
  example(place, "\"sandwich\"");
  example(with_default(b.add("model.embedding_norm", KeyType::boolean,
                             "RMSNorm on the token embedding output (seed 003)."),
                       Value::boolean(false)),
          "true");
  auto& es = with_default(b.add("model.embedding_scale", KeyType::formula,
                                "Forward multiplier on the embedding output (Spike No More uses sqrt(d_model))."),
                          Value::number(1.0));
  es.scope = FormulaScope::model;
  es.preset_allowed = true;
  example(es, "\"sqrt(d_model)\"");
  example(with_default(b.add("model.qk_norm", KeyType::boolean, "RMSNorm on queries and keys per head."),
                       Value::boolean(false)),
          "true");
  example(with_default(b.add("model.tie_embeddings", KeyType::boolean,
                             "Share the embedding matrix with the LM head."),
                       Value::boolean(false)),
          "true");
  example(at_least(with_default(b.add("model.rope_theta", KeyType::number, "RoPE base θ."),
                                Value::number(10000.0)),
                   0, true),
          "500000");
  example(at_least(derived(b.add("model.max_seq_len", KeyType::integer,
                                 "Longest sequence the model supports (RoPE table size)."),
                           "= train.seq_len"),
                   1),
          "4096");
  auto& gate = with_default(b.add("model.gated_attention", KeyType::choice,
                                   "Sigmoid output gate per head (seed 000 eq. 3-4): headwise adds d×H "
                                   "parameters per layer, elementwise d×H·d_h."),
                            Value::string("none"));
  gate.choices = {"none", "headwise", "elementwise"};
  example(gate, "\"elementwise\"");
  auto& as = derived(b.add("model.attn_scale", KeyType::formula,
                           "Softmax temperature on q·k (μP uses 1/head_dim)."),
                     "\"1/sqrt(head_dim)\"");
  as.default_value = Value::string("1/sqrt(head_dim)");
  as.scope = FormulaScope::model;
  as.preset_allowed = true;
  example(as, "\"1/head_dim\"");
  auto& ls = with_default(b.add("model.logit_scale", KeyType::formula,
                                "Forward multiplier on the LM-head logits (μP uses 1/width_mult)."),
                          Value::number(1.0));
  ls.scope = FormulaScope::model;
  ls.preset_allowed = true;
  example(ls, "\"1/width_mult\"");
}

void add_moe(Builder& b) {
  optional_at_least(b, "moe.n_dense_layers", KeyType::integer,
                    "Leading layers that keep a dense MLP (seed 000 Table 3: 1).", Value::integer(0), 0, "1");
  optional_at_least(b, "moe.layer_interval", KeyType::integer,
                    "After the dense layers, every k-th layer is MoE (1 = all).", Value::integer(1), 1, "1");
  example(at_least(derived(b.add("moe.n_experts", KeyType::integer, "Routed experts per MoE layer."),
                           "required for moe"),
                   1),
          "145");
  example(at_least(derived(b.add("moe.top_k", KeyType::integer, "Routed experts active per token."),
                           "required for moe"),
                   1),
          "9");
  optional_at_least(b, "moe.n_shared_experts", KeyType::integer,
                    "Always-active shared experts (one MLP of width n·shared_d_ff).", Value::integer(0), 0, "1");
  example(at_least(derived(b.add("moe.expert_d_ff", KeyType::integer, "Intermediate size of each routed expert."),
                           "required for moe"),
                   1),
          "512");
  example(at_least(derived(b.add("moe.shared_d_ff", KeyType::integer, "Intermediate size of each shared expert."),
                           "= expert_d_ff"),
                   1),
          "512");
  example(at_least(derived(b.add("moe.dense_d_ff", KeyType::integer, "Intermediate size of the dense layers."),
                           "= model.d_ff"),
                   1),
          "10944");
  auto& scoring = with_default(b.add("moe.router_scoring", KeyType::choice,
                                     "Router scores: softmax over experts, or per-expert sigmoid (DeepSeek-V3)."),
                               Value::string("softmax"));
  scoring.choices = {"softmax", "sigmoid"};
  example(scoring, "\"sigmoid\"");
  auto& lb = with_default(b.add("moe.load_balance", KeyType::choice,
                                "Load balancing: auxiliary loss, DeepSeek-V3's auxiliary-loss-free bias, or none."),
                          Value::string("aux_loss"));
  lb.choices = {"none", "aux_loss", "aux_free"};
  example(lb, "\"aux_free\"");
  example(with_default(b.add("moe.norm_topk_prob", KeyType::boolean,
                             "Renormalize the top-k routing weights of each token to sum to 1 (Mixtral, DeepSeek-V3); "
                             "false multiplies the experts' outputs by the raw scores (Qwen2-MoE)."),
                       Value::boolean(false)),
          "true");
  optional_at_least(b, "moe.load_balance_coef", KeyType::number,
                    "Auxiliary-loss weight (aux_loss) or bias update rate (aux_free).", Value::number(0.01), 0, "0.001");
  optional_at_least(b, "moe.seq_aux_loss", KeyType::number,
                    "Sequence-wise balancing loss weight (DeepSeek-V3 eqs. 17-20): the aux_loss form over each "
                    "sequence, averaged over sequences; the same whatever the micro-batch and data-parallel layout; "
                    "combines with any load_balance. 0 = off.",
                    Value::number(0.0), 0, "0.0001");
  optional_at_least(b, "moe.capacity_factor", KeyType::number,
                    "0 = dropless. Else each expert takes at most ceil(factor · seq_len · top_k / n_experts) "
                    "assignments per sequence, in token order; the rest are dropped (no expert output, weights not "
                    "renormalized) and counted in the routing records. Under expert parallelism on GPUs the bound also "
                    "makes the exchange slotted (fixed-size slots, no device-to-host copy per MoE layer) unless a "
                    "tighter distributed.expert_exchange_factor is set (train --expert-route chooses).",
                    Value::number(0.0), 0, "1.25");
  optional_at_least(b, "moe.z_loss", KeyType::number,
                    "Router z-loss weight (ST-MoE eq. 5): weight · mean over tokens of (log Σ_e exp router_logit_e)²; "
                    "softmax routers only. 0 = off.",
                    Value::number(0.0), 0, "0.001");
}

void add_init(Builder& b) {
  auto& preset = b.add("init.preset", KeyType::string,
                       "Name of a shipped init scheme (specs/presets/NAME.toml); merged under this spec, "
                       "so any key below overrides it.");
  example(preset, "\"olmo_mitchell\"");
  auto& gamma = with_default(b.add("init.gamma", KeyType::number,
                                   "Default init rate γ: σ = fan^-γ (seed 000 §4.2). 0.5 is the standard scale, "
                                   "1 the small-init scale seed 000 recommends."),
                             Value::number(0.5));
  between(gamma, 0, 4).preset_allowed = true;
  example(gamma, "1.0");
  auto& fan = with_default(b.add("init.fan", KeyType::choice,
                                 "Which dimension the γ rule raises to -γ: the tensor's fan-in, or d_model."),
                           Value::string("fan_in"));
  fan.choices = {"fan_in", "d_model"};
  fan.preset_allowed = true;
  example(fan, "\"d_model\"");
  auto& dist = with_default(b.add("init.distribution", KeyType::choice,
                                  "normal, trunc_normal (cut at ±cutoff·σ) or uniform (±√3·σ, same std)."),
                            Value::string("normal"));
  dist.choices = {"normal", "trunc_normal", "uniform"};
  dist.preset_allowed = true;
  example(dist, "\"trunc_normal\"");
  auto& cutoff = with_default(b.add("init.cutoff", KeyType::number,
                                    "Truncation point of trunc_normal in units of σ."),
                              Value::number(3.0));
  at_least(cutoff, 0, true).preset_allowed = true;
  example(cutoff, "2.0");
  auto& depth = with_default(b.add("init.depth_scaling", KeyType::choice,
                                   "Extra factor on the classes in depth_scaling_classes: total = 1/sqrt(2·n_layers), "
                                   "per_layer = 1/sqrt(2·(layer+1))."),
                             Value::string("none"));
  depth.choices = {"none", "total", "per_layer"};
  depth.preset_allowed = true;
  example(depth, "\"per_layer\"");
  auto& depth_classes =
      with_default(b.add("init.depth_scaling_classes", KeyType::choice_list, "Classes that depth_scaling applies to."),
                   strings({"attn_o", "mlp_down", "expert_down", "shared_down"}));
  depth_classes.choices = weight_class_names();
  depth_classes.preset_allowed = true;
  example(depth_classes, "[\"attn_o\", \"mlp_down\"]");
  auto& base = derived(b.add("init.base_width", KeyType::number,
                             "Width of the μP base model: width_mult = d_model / base_width."),
                       "= d_model");
  at_least(base, 0, true).preset_allowed = true;
  example(base, "256");

  for (const auto& cls : weight_class_names()) {
    const std::string p = "init." + cls + ".";
    auto& g = b.add(p + "gamma", KeyType::number, "γ for " + cls + " (σ = fan^-γ).");
    between(g, 0, 4).preset_allowed = true;
    g.exclusive_group = "init." + cls + ".rule";
    g.default_text = "= init.gamma";
    example(g, "1.0");
    auto& s = b.add(p + "std", KeyType::formula,
                    "σ for " + cls + " as an expression; replaces the γ rule for this class.");
    s.scope = FormulaScope::tensor;
    s.preset_allowed = true;
    s.exclusive_group = "init." + cls + ".rule";
    s.default_text = "γ rule";
    example(s, "\"0.02 / sqrt(2 * n_layers)\"");
    auto& d = derived(b.add(p + "distribution", KeyType::choice, "Distribution for " + cls + "."),
                      "= init.distribution");
    d.choices = {"normal", "trunc_normal", "uniform"};
    d.preset_allowed = true;
    auto& c = derived(b.add(p + "cutoff", KeyType::number, "trunc_normal cutoff for " + cls + ", in σ."),
                      "= init.cutoff");
    at_least(c, 0, true).preset_allowed = true;
  }
}

}  // namespace gc::schema_detail
