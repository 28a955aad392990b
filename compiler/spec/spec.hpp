// The typed experiment spec: what a user wrote, validated, with every default
// and derived default filled in. Built by load_spec(); consumed by the planner.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "expr/expr.hpp"
#include "spec/classes.hpp"
#include "spec/load.hpp"

namespace gc {

enum class Arch { dense, moe };
enum class NormPlacement { pre, sandwich };
enum class GatedAttention { none, headwise, elementwise };
enum class Distribution { normal, trunc_normal, uniform };
enum class FanMode { fan_in, d_model };
enum class DepthScaling { none, total, per_layer };
enum class Decay { cosine, linear, constant };
enum class Precision { bf16, fp32 };
enum class DataFormat { llmc, text, synthetic, anchor };
enum class RouterScoring { softmax, sigmoid };
enum class LoadBalance { none, aux_loss, aux_free };

// The names the spec language gives these values (compiler/spec/enum_names.cpp).
const char* to_string(Distribution d);
const char* to_string(GatedAttention g);
const char* to_string(NormPlacement p);
const char* to_string(Precision p);
const char* to_string(Decay d);

// A formula as written, parsed, with where it was written.
struct Formula {
  expr::Expr expr = expr::Expr::constant(0.0);
  SourceLoc loc;  // of the value (the string's opening quote, or the number)
};

struct ExperimentSpec {
  std::string name;
  std::string description;
  std::int64_t seed = 0;
};

struct ModelSpec {
  Arch arch = Arch::dense;
  std::int64_t vocab_size = 0, d_model = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::int64_t d_ff = 0;  // 0 when a MoE model has no dense d_ff
  double norm_eps = 1e-5;
  NormPlacement norm_placement = NormPlacement::pre;
  bool embedding_norm = false, qk_norm = false, tie_embeddings = false;
  Formula embedding_scale, attn_scale, logit_scale;
  double rope_theta = 10000.0;
  std::int64_t max_seq_len = 0;
  GatedAttention gated_attention = GatedAttention::none;
};

struct MoeSpec {
  std::int64_t n_dense_layers = 0, layer_interval = 1, n_experts = 0, top_k = 0, n_shared_experts = 0;
  std::int64_t expert_d_ff = 0, shared_d_ff = 0, dense_d_ff = 0;
  RouterScoring router_scoring = RouterScoring::softmax;
  LoadBalance load_balance = LoadBalance::aux_loss;
  double load_balance_coef = 0.01;
  bool norm_topk_prob = false;
  double z_loss = 0.0;        // router z-loss coefficient (ST-MoE)
  double seq_aux_loss = 0.0;  // sequence-wise balancing loss coefficient (DeepSeek-V3)
  double capacity_factor = 0.0;  // 0: dropless; else per expert and sequence (plan: moe_capacity)
};

// A class's own rule; unset fields fall back (class -> mlp class for experts
// -> init defaults).
struct ClassRule {
  std::optional<double> gamma;
  std::optional<Formula> std;
  std::optional<Distribution> distribution;
  std::optional<double> cutoff;
  SourceLoc gamma_loc;
};

struct InitSpec {
  std::string preset;  // "" = none
  double gamma = 0.5;
  SourceLoc gamma_loc;
  FanMode fan = FanMode::fan_in;
  Distribution distribution = Distribution::normal;
  double cutoff = 3.0;
  DepthScaling depth_scaling = DepthScaling::none;
  std::vector<ParamClass> depth_scaling_classes;
  double base_width = 0.0;
  std::array<ClassRule, kNumWeightClasses> classes;
};

struct OptimSpec {
  double lr = 0.0, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
  std::vector<ParamClass> no_decay;
  std::array<Formula, kNumClasses> lr_mult;
};

struct ScheduleSpec {
  std::optional<double> warmup_ratio;
  std::optional<std::int64_t> warmup_steps;
  Decay decay = Decay::cosine;
  double min_lr_ratio = 0.1;
};

struct TrainSpec {
  std::int64_t seq_len = 0, micro_batch = 0, global_batch = 0;
  std::optional<std::int64_t> steps, tokens;
  Precision precision = Precision::bf16;
  std::int64_t eval_every = 0, eval_batches = 0, checkpoint_every = 0, log_every = 0;
};

struct DataSpec {
  DataFormat format = DataFormat::synthetic;
  std::string train, val, tokenizer, cache_dir;  // paths as written (relative to the spec)
  double val_fraction = 0.02;
  std::string tokenizer_type, synthetic_task;
  std::vector<std::string> text_extensions;
  // data.format = "anchor" (runtime/anchor.hpp)
  std::uint64_t anchor_seed = 0;
  std::int64_t anchor_train_sequences = 0, anchor_eval_sequences = 0;
  int anchor_held_first = 4, anchor_held_second = 3;
};

struct MetricSpec {
  bool enabled = false;
  std::int64_t interval = 1;
  std::vector<ParamClass> classes;
  std::vector<std::int64_t> layers;  // empty = all
};

struct MetricsSpec {
  std::map<std::string, MetricSpec> metrics;  // by name (schema metric_names())
  std::int64_t embedding_top_tokens = 350;
  std::vector<std::int64_t> cosine_image_steps;
};

struct DistributedSpec {
  std::string backend;
  std::int64_t zero_stage = 0;
  double bucket_mb = 25.0;  // GPU gradient all-reduce buckets (zero_stage 0)
  std::int64_t expert_parallel = 1;  // ranks per expert-parallel group (MoE)
  double expert_exchange_factor = 0.0;  // rows a rank's experts may receive / its own assignments (0: worst case)
};

struct Spec {
  std::string file;  // the root spec file as given
  SpecDocument document;  // explicit settings with locations (for resolved output and knob binding)
  std::map<std::string, Value> resolved;  // every value the spec resolved to, explicit, default or derived
  ExperimentSpec experiment;
  ModelSpec model;
  MoeSpec moe;
  InitSpec init;
  OptimSpec optim;
  ScheduleSpec schedule;
  TrainSpec train;
  DataSpec data;
  MetricsSpec metrics;
  DistributedSpec distributed;

  // Where a key was set, or the root file when it was left to its default.
  SourceLoc where(const std::string& path) const;
  SourceLoc where_key(const std::string& path) const;
};

// Loads, validates and completes a spec. Reports every error and warning to
// `diags`; returns nullopt when there were errors.
std::optional<Spec> load_spec(const std::string& path, Diagnostics& diags);
std::optional<Spec> load_spec_text(const std::string& text, const std::string& label, const std::string& base_dir,
                                   Diagnostics& diags);

// All settings (explicit and default) as a resolved TOML document, in schema
// order; strings escaped. Deterministic.
std::string resolved_toml(const Spec& spec);

}  // namespace gc
