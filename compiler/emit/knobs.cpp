#include "common/version.hpp"
#include "emit/emit.hpp"
#include "spec/schema.hpp"

#include <vector>

namespace gc {

namespace {

// The MoE layout as plan.* knobs, with neutral values for a dense model (one
// expert of width 1, no shared experts) so the templates' arrays stay valid
// and every MoE branch is pruned by `if constexpr (kMoe)`.
void add_moe_knobs(const Spec& s, KnobTable& t) {
  const bool moe = s.model.arch == Arch::moe;
  const MoeSpec& e = s.moe;
  t["plan.moe"] = Value::boolean(moe);
  t["plan.dense_d_ff"] = Value::integer(moe ? e.dense_d_ff : s.model.d_ff);
  t["plan.moe_experts"] = Value::integer(moe ? e.n_experts : 1);
  t["plan.moe_top_k"] = Value::integer(moe ? e.top_k : 1);
  t["plan.moe_expert_d_ff"] = Value::integer(moe ? e.expert_d_ff : 1);
  t["plan.moe_shared_d_ff"] = Value::integer(moe ? e.n_shared_experts * e.shared_d_ff : 0);
  t["plan.moe_router_scoring"] = Value::string(e.router_scoring == RouterScoring::sigmoid ? "sigmoid" : "softmax");
  t["plan.moe_load_balance"] = Value::string(e.load_balance == LoadBalance::aux_loss   ? "aux_loss"
                                             : e.load_balance == LoadBalance::aux_free ? "aux_free"
                                                                                       : "none");
  t["plan.moe_load_balance_coef"] = Value::number(e.load_balance_coef);
  t["plan.moe_norm_topk_prob"] = Value::boolean(e.norm_topk_prob);
  t["plan.moe_z_loss"] = Value::number(e.z_loss);
  t["plan.moe_seq_aux_loss"] = Value::number(e.seq_aux_loss);
  t["plan.moe_capacity"] = Value::integer(moe_capacity(s));
}

// [model] and [experiment]: the architecture's shape and choices.
void add_model_knobs(const Spec& s, KnobTable& t) {
  const ModelSpec& m = s.model;
  t["experiment.name"] = Value::string(s.experiment.name);
  t["experiment.seed"] = Value::integer(s.experiment.seed);
  t["model.vocab_size"] = Value::integer(m.vocab_size);
  t["model.d_model"] = Value::integer(m.d_model);
  t["model.n_layers"] = Value::integer(m.n_layers);
  t["model.n_heads"] = Value::integer(m.n_heads);
  t["model.n_kv_heads"] = Value::integer(m.n_kv_heads);
  t["model.head_dim"] = Value::integer(m.head_dim);
  t["model.max_seq_len"] = Value::integer(m.max_seq_len);
  t["model.norm_eps"] = Value::number(m.norm_eps);
  t["model.norm_placement"] = Value::string(to_string(m.norm_placement));
  t["model.embedding_norm"] = Value::boolean(m.embedding_norm);
  t["model.qk_norm"] = Value::boolean(m.qk_norm);
  t["model.tie_embeddings"] = Value::boolean(m.tie_embeddings);
  t["model.rope_theta"] = Value::number(m.rope_theta);
  t["model.gated_attention"] = Value::string(to_string(m.gated_attention));
}

// [optim], [schedule], [train] and [distributed]: how the run trains.
void add_training_knobs(const Spec& s, KnobTable& t) {
  t["optim.lr"] = Value::number(s.optim.lr);
  t["optim.beta1"] = Value::number(s.optim.beta1);
  t["optim.beta2"] = Value::number(s.optim.beta2);
  t["optim.eps"] = Value::number(s.optim.eps);
  t["optim.grad_clip"] = Value::number(s.optim.grad_clip);
  t["schedule.decay"] = Value::string(to_string(s.schedule.decay));
  t["schedule.min_lr_ratio"] = Value::number(s.schedule.min_lr_ratio);
  const TrainSpec& r = s.train;
  t["train.seq_len"] = Value::integer(r.seq_len);
  t["train.micro_batch"] = Value::integer(r.micro_batch);
  t["train.precision"] = Value::string(to_string(r.precision));
  t["train.eval_every"] = Value::integer(r.eval_every);
  t["train.eval_batches"] = Value::integer(r.eval_batches);
  t["train.checkpoint_every"] = Value::integer(r.checkpoint_every);
  t["train.log_every"] = Value::integer(r.log_every);
  const DistributedSpec& d = s.distributed;
  t["distributed.zero_stage"] = Value::integer(d.zero_stage);
  t["distributed.bucket_mb"] = Value::number(d.bucket_mb);
  t["distributed.expert_parallel"] = Value::integer(d.expert_parallel);
  t["distributed.expert_exchange_factor"] = Value::number(d.expert_exchange_factor);
}

// [metrics]: each metric's switch and cadence (the layer and class selections are plan.hpp tables).
void add_metric_knobs(const Spec& s, KnobTable& t) {
  for (const auto& [name, metric] : s.metrics.metrics) {
    t["metrics." + name + ".enabled"] = Value::boolean(metric.enabled);
    const std::string interval = "metrics." + name + ".interval";
    if (find_key(interval)) t[interval] = Value::integer(metric.interval);  // initial_loss has none
  }
  t["metrics.embedding_cosine.top_tokens"] = Value::integer(s.metrics.embedding_top_tokens);
}

}  // namespace

KnobTable spec_knob_values(const Spec& s) {
  KnobTable t;
  add_model_knobs(s, t);
  add_training_knobs(s, t);
  add_metric_knobs(s, t);
  return t;
}

// Every knob value comes from the typed spec and the plan, never from the string-keyed resolved
// map: a key reaches the templates the way it reaches the planner.
KnobTable knob_table(const Plan& plan, const PreparedData& data) {
  KnobTable t = spec_knob_values(plan.spec);
  const auto& s = plan.spec;
  t["plan.embedding_scale"] = Value::number(plan.embedding_scale);
  t["plan.attn_scale"] = Value::number(plan.attn_scale);
  t["plan.logit_scale"] = Value::number(plan.logit_scale);
  t["plan.warmup_steps"] = Value::integer(plan.schedule.warmup_steps);
  t["plan.total_steps"] = Value::integer(plan.schedule.total_steps);
  t["plan.grad_accum"] = Value::integer(plan.schedule.grad_accum);
  t["plan.train_data"] = Value::string(data.train);
  t["plan.val_data"] = Value::string(data.val);
  t["plan.vocab_file"] = Value::string(data.vocab_file);
  t["plan.spec_hash"] = Value::string(sha256_hex(resolved_toml(plan.spec)));
  t["plan.gcompile_version"] = Value::string(kVersion);
  add_moe_knobs(plan.spec, t);
  t["plan.distributed_none"] = Value::boolean(s.distributed.backend == "none");
  t["plan.distributed_nccl"] = Value::boolean(s.distributed.backend == "nccl");
  // The anchor task (runtime/anchor.hpp): the generated program rebuilds its evaluation sets.
  const bool anchor = s.data.format == DataFormat::anchor;
  t["plan.anchor_task"] = Value::boolean(anchor);
  t["plan.anchor_seed"] = Value::integer(anchor ? std::int64_t(s.data.anchor_seed) : 0);
  t["plan.anchor_held_first"] = Value::integer(anchor ? s.data.anchor_held_first : 4);
  t["plan.anchor_held_second"] = Value::integer(anchor ? s.data.anchor_held_second : 3);
  t["plan.anchor_eval_sequences"] = Value::integer(anchor ? s.data.anchor_eval_sequences : 1);
  return t;
}

namespace {

// The spec keys no template knob reads, each with the one place that consumes
// it. '*' stands for one key segment. A key that matches nothing here and no
// knob reads is a gcompile error at generation (emit.cpp), and a test walks
// the schema against this table and the templates' knobs.
struct Consumer {
  const char* pattern;
  const char* place;
};

constexpr Consumer kConsumers[] = {
    {"experiment.description", "README.md and manifest.json of the tree"},
    {"experiment.extends", "the spec loader, which merges the base spec (compiler/spec/load.cpp)"},
    {"model.arch", "the plan.moe knob (emit/knobs.cpp)"},
    {"model.d_ff", "the plan.dense_d_ff knob"},
    {"model.activation", "SwiGLU, the only activation (templates/cpu/swiglu.hpp)"},
    {"model.embedding_scale", "the plan.embedding_scale knob"},
    {"model.attn_scale", "the plan.attn_scale knob"},
    {"model.logit_scale", "the plan.logit_scale knob"},
    {"optim.betas", "the optim.beta1 and optim.beta2 knobs"},
    {"optim.weight_decay", "plan.hpp: each tensor's weight decay"},
    {"optim.no_decay", "plan.hpp: each tensor's weight decay"},
    {"optim.lr_mult.*", "plan.hpp: each tensor's learning-rate multiplier"},
    {"schedule.warmup_ratio", "the plan.warmup_steps knob"},
    {"schedule.warmup_steps", "the plan.warmup_steps knob"},
    {"train.steps", "the plan.total_steps knob"},
    {"train.tokens", "the plan.total_steps knob"},
    {"train.global_batch", "the plan.grad_accum knob"},
    {"init.*", "plan.hpp: each tensor's init distribution and std (compiler/plan/params.cpp)"},
    {"init.*.*", "plan.hpp: each tensor's init distribution and std (compiler/plan/params.cpp)"},
    {"metrics.*.layers", "plan.hpp: the metric's layer selection"},
    {"metrics.*.classes", "plan.hpp: the metric's tensor selection"},
    {"metrics.cosine_similarity.image_steps", "plan_init.cpp: kCosineImageSteps"},
    {"data.anchor.*", "data preparation (compiler/data) and the plan.anchor_* knobs"},
    {"data.*", "data preparation (compiler/data), whose shards the plan.train_data and plan.val_data knobs name"},
    {"moe.*", "the plan's MoE layer layout (compiler/plan) and the plan.moe_* knobs (emit/knobs.cpp)"},
    {"distributed.backend", "the plan.distributed_none and plan.distributed_nccl knobs"},
    {"preset.*", "the header of preset files (gcompile presets)"},
};

std::vector<std::string> segments(const std::string& key) {
  std::vector<std::string> out(1);
  for (char c : key) {
    if (c == '.') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

bool matches(const std::string& pattern, const std::string& key) {
  const auto p = segments(pattern), k = segments(key);
  if (p.size() != k.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] != "*" && p[i] != k[i]) return false;
  }
  return true;
}

}  // namespace

std::optional<std::string> table_consumer(const std::string& key) {
  for (const Consumer& c : kConsumers) {
    if (matches(c.pattern, key)) return std::string(c.place);
  }
  return std::nullopt;
}

}  // namespace gc
