#include "spec/schema.hpp"

#include <map>
#include <set>

#include "common/text.hpp"
#include "spec/classes.hpp"

namespace gc {

namespace {

// Builders keep the table below readable: one line per key.
struct Builder {
  std::vector<KeySpec> keys;

  KeySpec& add(std::string path, KeyType type, std::string doc) {
    KeySpec k;
    k.path = std::move(path);
    k.type = type;
    k.doc = std::move(doc);
    k.default_text = "unset";
    keys.push_back(std::move(k));
    return keys.back();
  }
};

KeySpec& with_default(KeySpec& k, Value v) {
  k.default_text = v.to_toml();
  k.default_value = std::move(v);
  return k;
}

KeySpec& required(KeySpec& k) {
  k.required = true;
  k.default_text = "required";
  return k;
}

KeySpec& derived(KeySpec& k, std::string text) {
  k.default_text = std::move(text);
  return k;
}

KeySpec& at_least(KeySpec& k, double lo, bool exclusive = false) {
  k.min = lo;
  k.min_exclusive = exclusive;
  return k;
}

KeySpec& between(KeySpec& k, double lo, double hi) {
  k.min = lo;
  k.max = hi;
  return k;
}

KeySpec& example(KeySpec& k, std::string e) {
  k.example = std::move(e);
  return k;
}

Value strings(std::vector<std::string> items) {
  std::vector<Value> v;
  for (auto& s : items) v.push_back(Value::string(std::move(s)));
  return Value::list(std::move(v));
}

void add_experiment(Builder& b) {
  example(required(b.add("experiment.name", KeyType::string,
                         "Name of the experiment; names the generated directory, so it may contain only "
                         "a-z, 0-9, '_', '.' and '-' (at most 64 characters).")),
          "\"moe_3b_gamma1\"");
  example(with_default(b.add("experiment.description", KeyType::string,
                             "Free text recorded in the generated tree (escaped wherever it is written)."),
                       Value::string("")),
          "\"γ = 1 with ε = 1e-12\"");
  example(at_least(with_default(b.add("experiment.seed", KeyType::integer,
                                      "Seed of the counter-based RNG for initialization and data order."),
                                Value::integer(1234)),
                   0),
          "42");
  example(b.add("experiment.extends", KeyType::string,
                "Base spec to merge under this one, relative to this file. Chains are allowed; this "
                "file overrides the base key by key; cycles are an error."),
          "\"../base/dense_0.1b.toml\"");
}

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
  example(at_least(with_default(b.add("moe.n_dense_layers", KeyType::integer,
                                      "Leading layers that keep a dense MLP (seed 000 Table 3: 1)."),
                                Value::integer(0)),
                   0),
          "1");
  example(at_least(with_default(b.add("moe.layer_interval", KeyType::integer,
                                      "After the dense layers, every k-th layer is MoE (1 = all)."),
                                Value::integer(1)),
                   1),
          "1");
  example(at_least(derived(b.add("moe.n_experts", KeyType::integer, "Routed experts per MoE layer."),
                           "required for moe"),
                   1),
          "145");
  example(at_least(derived(b.add("moe.top_k", KeyType::integer, "Routed experts active per token."),
                           "required for moe"),
                   1),
          "9");
  example(at_least(with_default(b.add("moe.n_shared_experts", KeyType::integer,
                                      "Always-active shared experts (one MLP of width n·shared_d_ff)."),
                                Value::integer(0)),
                   0),
          "1");
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
  example(at_least(with_default(b.add("moe.load_balance_coef", KeyType::number,
                                      "Auxiliary-loss weight (aux_loss) or bias update rate (aux_free)."),
                                Value::number(0.01)),
                   0),
          "0.001");
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

void add_optim(Builder& b) {
  example(at_least(required(b.add("optim.lr", KeyType::number, "Peak learning rate η of AdamW.")), 0, true),
          "6e-4");
  auto& betas = with_default(b.add("optim.betas", KeyType::number_list, "AdamW (β1, β2)."),
                             Value::list({Value::number(0.9), Value::number(0.95)}));
  betas.list_length = 2;
  betas.min = 0;
  betas.max = 0.999999;
  example(betas, "[0.9, 0.98]");
  example(at_least(with_default(b.add("optim.eps", KeyType::number, "AdamW ε."), Value::number(1e-8)), 0, true),
          "1e-15");
  example(at_least(with_default(b.add("optim.weight_decay", KeyType::number,
                                      "Decoupled weight decay λ: θ ← θ̂ − λ·η_t·θ (seed 003 eq. 1)."),
                                Value::number(0.1)),
                   0),
          "1.0");
  auto& nd = with_default(b.add("optim.no_decay", KeyType::choice_list,
                                "Classes exempt from weight decay (norm = RMSNorm gains)."),
                          strings({"norm"}));
  nd.choices = class_names();
  example(nd, "[\"norm\", \"embedding\"]");
  example(at_least(with_default(b.add("optim.grad_clip", KeyType::number,
                                      "Clip the global gradient norm to this value (0 = off)."),
                                Value::number(1.0)),
                   0),
          "0.5");
  for (const auto& cls : class_names()) {
    auto& m = with_default(b.add("optim.lr_mult." + cls, KeyType::formula,
                                 "Learning-rate multiplier for " + cls + " (μP-style presets set these)."),
                           Value::number(1.0));
    m.scope = FormulaScope::tensor;
    m.preset_allowed = true;
    example(m, "\"1/width_mult\"");
  }
}

void add_schedule(Builder& b) {
  auto& ratio = with_default(b.add("schedule.warmup_ratio", KeyType::number,
                                   "Linear warm-up as a fraction of all steps (seed 000: 0.03)."),
                             Value::number(0.03));
  between(ratio, 0, 1).exclusive_group = "schedule.warmup";
  example(ratio, "0.01");
  auto& steps = b.add("schedule.warmup_steps", KeyType::integer, "Linear warm-up in steps (instead of the ratio).");
  at_least(steps, 0).exclusive_group = "schedule.warmup";
  example(steps, "2000");
  auto& decay = with_default(b.add("schedule.decay", KeyType::choice, "Decay after warm-up."),
                             Value::string("cosine"));
  decay.choices = {"cosine", "linear", "constant"};
  example(decay, "\"linear\"");
  example(between(with_default(b.add("schedule.min_lr_ratio", KeyType::number,
                                     "Final learning rate as a fraction of the peak (seed 000: 0.1)."),
                               Value::number(0.1)),
                  0, 1),
          "0.0");
}

void add_train(Builder& b) {
  example(at_least(required(b.add("train.seq_len", KeyType::integer, "Tokens per training sequence T.")), 2),
          "2048");
  example(at_least(derived(b.add("train.micro_batch", KeyType::integer,
                                 "Sequences per forward/backward pass; gradients accumulate to global_batch."),
                           "= global_batch"),
                   1),
          "8");
  example(at_least(required(b.add("train.global_batch", KeyType::integer, "Sequences per optimizer step.")), 1),
          "256");
  auto& steps = b.add("train.steps", KeyType::integer, "Optimizer steps (give steps or tokens).");
  at_least(steps, 1).exclusive_group = "train.length";
  example(steps, "20000");
  auto& tokens = b.add("train.tokens", KeyType::integer,
                       "Training tokens; steps = tokens / (global_batch·seq_len), rounded up.");
  at_least(tokens, 1).exclusive_group = "train.length";
  example(tokens, "36000000000");
  auto& prec = with_default(b.add("train.precision", KeyType::choice,
                                  "CUDA backend: bf16 = bf16 activations and working weights, fp32 accumulation, master "
                                  "weights, gradients and moments; fp32 = all fp32, TF32 off (for parity with the CPU). "
                                  "The CPU backend always computes in fp32."),
                            Value::string("bf16"));
  prec.choices = {"bf16", "fp32"};
  example(prec, "\"fp32\"");
  example(at_least(with_default(b.add("train.eval_every", KeyType::integer,
                                      "Steps between validation passes (0 = only at the end)."),
                                Value::integer(100)),
                   0),
          "500");
  example(at_least(with_default(b.add("train.eval_batches", KeyType::integer, "Micro-batches per validation pass."),
                                Value::integer(10)),
                   1),
          "20");
  example(at_least(with_default(b.add("train.checkpoint_every", KeyType::integer,
                                      "Steps between checkpoints (0 = only at the end)."),
                                Value::integer(1000)),
                   0),
          "5000");
  example(at_least(with_default(b.add("train.log_every", KeyType::integer,
                                      "Steps between log lines (on a GPU also between the host's "
                                      "reads of a step's loss and gradient norm)."),
                                Value::integer(10)),
                   1),
          "1");
}

// data.format = "anchor" (runtime/anchor.hpp; docs/reproductions.md).
void add_anchor(Builder& b) {
  example(at_least(derived(b.add("data.anchor.seed", KeyType::integer,
                                 "anchor: seed of the generated sequences (training and evaluation sets)."),
                           "= experiment.seed"),
                   0),
          "7");
  example(between(with_default(b.add("data.anchor.train_sequences", KeyType::integer,
                                     "anchor: training sequences generated (the reader cycles through them)."),
                               Value::integer(20000)),
                  1, 100000000),
          "50000");
  example(between(with_default(b.add("data.anchor.eval_sequences", KeyType::integer,
                                     "anchor: sequences in each evaluation set (train keys, test keys, held-out pair)."),
                               Value::integer(1000)),
                  1, 1000000),
          "2000");
  auto& held = with_default(b.add("data.anchor.held_out", KeyType::integer_list,
                                  "anchor: the anchor pair never trained on; its mirror is trained with the composite "
                                  "plus 4 (x−6 for the default)."),
                            Value::list({Value::integer(4), Value::integer(3)}));
  held.list_length = 2;
  held.min = 1;
  held.max = 4;
  example(held, "[2, 1]");
}

void add_data(Builder& b) {
  auto& format = required(b.add("data.format", KeyType::choice,
                                "llmc: llm.c token shards; text: raw text tokenized with SentencePiece; "
                                "synthetic: a generated task (no files); anchor: the anchor-function task of "
                                "Zhang et al. (NeurIPS 2024), generated, loss on the last position only ([data.anchor])."));
  format.choices = {"llmc", "text", "synthetic", "anchor"};
  example(format, "\"llmc\"");
  example(derived(b.add("data.train", KeyType::string,
                        "Training data: a file, directory or glob; a relative path is relative to the spec file that sets it."),
                  "required for llmc and text"),
          "\"data/fineweb_train_*.bin\"");
  example(b.add("data.val", KeyType::string,
                "Validation data (llmc: required; text: optional, else val_fraction of train)."),
          "\"data/fineweb_val_*.bin\"");
  example(between(with_default(b.add("data.val_fraction", KeyType::number,
                                     "text: fraction of the tokens held out for validation when val is unset."),
                               Value::number(0.02)),
                  0.0001, 0.5),
          "0.05");
  example(b.add("data.tokenizer", KeyType::string,
                "text: an existing SentencePiece model; when unset one is trained with vocab_size tokens."),
          "\"tok/sp60k.model\"");
  auto& tt = with_default(b.add("data.tokenizer_type", KeyType::choice, "text: SentencePiece model type to train."),
                          Value::string("bpe"));
  tt.choices = {"bpe", "unigram"};
  example(tt, "\"unigram\"");
  example(with_default(b.add("data.text_extensions", KeyType::choice_list,
                             "text: file extensions read from a directory."),
                       strings({".txt", ".rst", ".md"})),
          "[\".txt\"]");
  // choice_list without choices = any non-empty strings
  example(b.add("data.cache_dir", KeyType::string,
                "Where prepared (tokenized or synthetic) data is cached; relative to the spec file that sets it. "
                "Unset: the user's cache directory, $GCOMPILE_CACHE_DIR, else $XDG_CACHE_HOME/gcompile, else "
                "~/.cache/gcompile (never beside the spec)."),
          "\"/scratch/gc-cache\"");
  auto& task = with_default(b.add("data.synthetic_task", KeyType::choice, "synthetic: which task to generate."),
                            Value::string("copy"));
  task.choices = {"copy", "reverse", "sort"};
  example(task, "\"sort\"");
  add_anchor(b);
}

struct MetricDefault {
  const char* name;
  bool enabled;
  int interval;
  bool has_classes;
  bool has_layers;
  const char* doc;
};

const std::vector<MetricDefault>& metric_defaults() {
  static const std::vector<MetricDefault> m = {
      {"sink_score", true, 100, false, true, "Attention sink score per layer (seed 000 eq. 5)."},
      {"residual_flow", true, 100, false, false, "Residual flow ratio ‖h_L − e‖₂/‖e‖₂ (seed 000 §2.4)."},
      {"rmsnorm_factor", true, 100, false, true,
       "Effective RMSNorm factor (σ²(h)+ε)^-1/2 vs its ε-free value (seed 000 Fig. 1c)."},
      {"cosine_similarity", true, 500, true, true, "Row cosine similarity of weight matrices, mean absolute C_ij (seed 000 eq. 6)."},
      {"stable_rank", true, 500, true, true, "Stable rank ‖W‖_F²/‖W‖₂² (seed 000 eq. 7)."},
      {"embedding_cosine", true, 500, false, false,
       "Cosine similarity among the most frequent tokens' embeddings (seed 003 §5.3)."},
      {"param_norm", true, 10, true, false, "Parameter norm per class."},
      {"grad_norm", true, 10, true, false, "Gradient norm per class."},
      {"update_ratio", true, 10, true, false, "Update-to-weight ratio per class."},
      {"activation_rms", true, 100, false, true, "Residual-stream RMS per layer."},
      {"attention_entropy", true, 100, false, true, "Attention entropy per layer."},
      {"logit_std", true, 100, false, false, "Standard deviation of the output logits."},
      {"initial_loss", true, 1, false, false, "Step-0 loss against log V (seed 001)."},
      {"moe_routing", true, 10, false, false,
       "MoE models: assignments per expert, max/mean load, router entropy and balancing loss per MoE layer."},
  };
  return m;
}

void add_metrics(Builder& b) {
  for (const auto& m : metric_defaults()) {
    const std::string p = std::string("metrics.") + m.name + ".";
    example(with_default(b.add(p + "enabled", KeyType::boolean, m.doc), Value::boolean(m.enabled)), "false");
    if (std::string(m.name) != "initial_loss") {
      example(at_least(with_default(b.add(p + "interval", KeyType::integer, "Steps between measurements."),
                                    Value::integer(m.interval)),
                       1),
              "250");
    }
    if (m.has_classes) {
      auto& c = with_default(b.add(p + "classes", KeyType::choice_list, "Parameter classes measured."),
                             strings({"attn_q", "attn_k", "attn_v", "attn_o", "mlp_up", "mlp_down"}));
      c.choices = class_names();
      example(c, "[\"attn_q\", \"attn_k\"]");
    }
    if (m.has_layers) {
      auto& l = with_default(b.add(p + "layers", KeyType::integer_list, "Layers measured (0-based; [] = all)."),
                             Value::list({}));
      at_least(l, 0);
      example(l, "[0, 5, 11]");
    }
  }
  example(at_least(with_default(b.add("metrics.embedding_cosine.top_tokens", KeyType::integer,
                                      "How many of the most frequent tokens (seed 003 uses 350)."),
                                Value::integer(350)),
                   2),
          "200");
  auto& img = with_default(b.add("metrics.cosine_similarity.image_steps", KeyType::integer_list,
                                 "Steps at which full cosine matrices are saved as images."),
                           Value::list({}));
  at_least(img, 0);
  example(img, "[0, 1000, 10000]");
}

void add_distributed(Builder& b) {
  auto& backend = with_default(b.add("distributed.backend", KeyType::choice,
                                     "auto: data-parallel when launched by mpirun/srun with several ranks (NCCL "
                                     "on GPUs, MPI on the CPU backend), else one process; none: refuse a "
                                     "multi-rank launch; nccl: data parallelism on GPUs only (a multi-rank run "
                                     "on the CPU backend is refused)."),
                               Value::string("auto"));
  backend.choices = {"auto", "none", "nccl"};
  example(backend, "\"nccl\"");
  example(between(with_default(b.add("distributed.zero_stage", KeyType::integer,
                                     "ZeRO stage: 0 replicates the optimizer state on every rank; 1 shards the "
                                     "AdamW moments (and on GPUs under bf16 the fp32 master weights) over the "
                                     "ranks; 2-3 (also gradients, parameters) are refused at generation."),
                               Value::integer(0)),
                  0, 3),
          "1");
  auto& bucket = at_least(with_default(b.add("distributed.bucket_mb", KeyType::number,
                                    "On GPUs: the fp32 gradients are reduced in buckets of at least this many "
                                    "MiB (whole layers, last layer first) while the backward pass goes on "
                                    "(all-reduced; under zero_stage = 1 reduced to the ranks whose shards hold "
                                    "them); the embedding, final norm and LM head follow after it."),
                              Value::number(25.0)),
                          0.0, /*exclusive=*/true);
  example(bucket, "50");
}

void add_preset_header(Builder& b) {
  // Only preset files may use [preset]; the loader enforces that.
  for (const char* key : {"name", "description", "source"}) {
    auto& k = b.add(std::string("preset.") + key, KeyType::string, std::string("Preset ") + key + ".");
    k.preset_allowed = true;
  }
  auto& scope = b.add("preset.scope", KeyType::choice,
                      "init-only: sets initialization only; full: also sets lr multipliers and forward scales.");
  scope.choices = {"init-only", "full"};
  scope.preset_allowed = true;
}

std::vector<KeySpec> build_schema() {
  Builder b;
  add_experiment(b);
  add_model(b);
  add_moe(b);
  add_init(b);
  add_optim(b);
  add_schedule(b);
  add_train(b);
  add_data(b);
  add_metrics(b);
  add_distributed(b);
  add_preset_header(b);
  return std::move(b.keys);
}

std::string section_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = build_schema();
  return keys;
}

const KeySpec* find_key(const std::string& path) {
  static const std::map<std::string, const KeySpec*> index = [] {
    std::map<std::string, const KeySpec*> m;
    for (const auto& k : schema()) m[k.path] = &k;
    return m;
  }();
  auto it = index.find(path);
  return it == index.end() ? nullptr : it->second;
}

bool is_section(const std::string& path) {
  static const std::set<std::string> sections = [] {
    std::set<std::string> s;
    for (const auto& k : schema()) {
      std::string sec = section_of(k.path);
      while (!sec.empty()) {
        s.insert(sec);
        sec = section_of(sec);
      }
    }
    return s;
  }();
  return sections.count(path) > 0;
}

std::vector<std::string> keys_in_section(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& k : schema()) {
    if (section_of(k.path) == section) out.push_back(k.path.substr(section.size() + 1));
  }
  return out;
}

std::vector<std::string> subsections_of(const std::string& section) {
  std::set<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& k : schema()) {
    if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = k.path.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot != std::string::npos) out.insert(rest.substr(0, dot));
  }
  return {out.begin(), out.end()};
}

const std::vector<std::string>& formula_variables(FormulaScope scope) {
  static const std::vector<std::string> none;
  static const std::vector<std::string> model = {"d_model", "n_layers", "d_ff",  "head_dim",
                                                 "n_heads", "n_kv_heads", "vocab", "width_mult"};
  static const std::vector<std::string> tensor = [] {
    std::vector<std::string> v = model;
    for (const char* extra : {"fan_in", "fan_out", "layer", "gamma"}) v.push_back(extra);
    return v;
  }();
  switch (scope) {
    case FormulaScope::none: return none;
    case FormulaScope::model: return model;
    case FormulaScope::tensor: return tensor;
  }
  return none;
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : metric_defaults()) v.push_back(m.name);
    return v;
  }();
  return names;
}

std::string key_type_name(const KeySpec& k) {
  std::string len = k.list_length ? " of " + std::to_string(k.list_length) : "";
  switch (k.type) {
    case KeyType::boolean: return "boolean";
    case KeyType::integer: return "integer";
    case KeyType::number: return "float";
    case KeyType::string: return "string";
    case KeyType::choice: return "string: " + join(k.choices, " | ");
    case KeyType::formula: return "float or expression";
    case KeyType::integer_list: return "array of integers" + len;
    case KeyType::number_list: return "array of floats" + len;
    case KeyType::choice_list: return "array of strings" + len;
  }
  return "value";
}

namespace {

std::string markdown_cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|') out += "\\|";
    else out += c;
  }
  return out;
}

std::string bounds_text(const KeySpec& k) {
  if (k.min && k.max) return " in [" + format_double(*k.min) + ", " + format_double(*k.max) + "]";
  if (k.min) return std::string(k.min_exclusive ? " > " : " ≥ ") + format_double(*k.min);
  return "";
}

std::string type_text(const KeySpec& k) {
  if (k.type == KeyType::choice_list && !k.choices.empty()) {
    if (k.choices == weight_class_names()) return "array of weight-class names";
    if (k.choices == class_names()) return "array of class names";
  }
  return key_type_name(k) + bounds_text(k);
}

std::string key_row(const KeySpec& k, const std::string& key, const std::string& doc) {
  return "| `" + key + "` | " + markdown_cell(type_text(k)) + " | `" + markdown_cell(k.default_text) + "` | " +
         markdown_cell(doc) + " | " + (k.example.empty() ? "" : "`" + markdown_cell(key + " = " + k.example) + "`") +
         " |\n";
}

const char* const kTableHead = "| key | type | default | meaning | example |\n|---|---|---|---|---|\n";

// Per-metric tables share their keys: one row per metric instead.
std::string metrics_markdown() {
  std::string out =
      "\n### [metrics.NAME] (one table per metric)\n\n"
      "Keys: `enabled` (boolean), `interval` (integer ≥ 1, steps between measurements), `classes` (array of class "
      "names, for per-matrix metrics), `layers` (array of 0-based layer indices; `[]` = all layers). "
      "A dash means the metric has no such key.\n\n"
      "| metric | meaning | enabled | interval | classes | layers |\n|---|---|---|---|---|---|\n";
  for (const auto& m : metric_defaults()) {
    const std::string p = std::string("metrics.") + m.name + ".";
    auto cell = [&](const char* key) {
      const KeySpec* k = find_key(p + key);
      return k ? "`" + markdown_cell(k->default_text) + "`" : std::string("-");
    };
    out += std::string("| `") + m.name + "` | " + markdown_cell(m.doc) + " | " + cell("enabled") + " | " +
           cell("interval") + " | " + cell("classes") + " | " + cell("layers") + " |\n";
  }
  out += "\nMetric-specific keys:\n\n" + std::string(kTableHead);
  for (const char* path : {"metrics.embedding_cosine.top_tokens", "metrics.cosine_similarity.image_steps"}) {
    const KeySpec* k = find_key(path);
    out += key_row(*k, std::string(path).substr(8), k->doc);
  }
  return out;
}

}  // namespace

std::string schema_markdown() {
  std::string out;
  std::string current;
  bool metrics_done = false;
  for (const auto& k : schema()) {
    const std::string section = section_of(k.path);
    if (section.rfind("metrics.", 0) == 0) {
      if (!metrics_done) out += metrics_markdown();
      metrics_done = true;
      current = section;
      continue;
    }
    // Per-class tables are documented once, as [init.CLASS] and [optim.lr_mult].
    const bool per_class_init = section.rfind("init.", 0) == 0;
    const bool per_class_lr = section == "optim.lr_mult";
    if (per_class_init && section != "init.embedding") continue;
    if (per_class_lr && k.path != "optim.lr_mult.embedding") continue;
    if (section != current) {
      current = section;
      std::string title = "[" + section + "]";
      if (per_class_init) title = "[init.CLASS] (one table per weight class)";
      if (per_class_lr) title = "[optim.lr_mult] (one key per class, including norm)";
      out += "\n### " + title + "\n\n" + kTableHead;
    }
    std::string key = k.path.substr(section.size() + 1);
    std::string doc = k.doc;
    if (per_class_init) {
      doc.replace(doc.find("embedding"), 9, "CLASS");
    }
    if (per_class_lr) {
      key = "CLASS";
      doc = "Learning-rate multiplier for CLASS (μP-style presets set these).";
    }
    out += key_row(k, key, doc);
  }
  return out;
}

}  // namespace gc
