#include "common/version.hpp"
#include "emit/emit.hpp"

namespace gc {

KnobTable knob_table(const Plan& plan, const PreparedData& data) {
  KnobTable t;
  for (const auto& [key, value] : plan.spec.resolved) {
    if (value.kind != Value::Kind::list) t[key] = value;
  }
  const auto& s = plan.spec;
  t["optim.beta1"] = Value::number(s.optim.beta1);
  t["optim.beta2"] = Value::number(s.optim.beta2);
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
  return t;
}

bool consumed_by_tables(const std::string& key) {
  // Written into plan.hpp's parameter table (init, decay, lr multipliers), the
  // metrics schedule, the data configuration, or folded into plan.* knobs.
  static const char* const prefixes[] = {"init.", "metrics.", "data.", "distributed.", "optim.lr_mult.", "moe."};
  for (const char* p : prefixes) {
    if (key.rfind(p, 0) == 0) return true;
  }
  static const char* const keys[] = {
      "experiment.description",  // README.md and manifest.json
      "model.arch",              // selects which templates are emitted
      "model.activation",        // swiglu is the only activation
      "model.embedding_scale", "model.attn_scale", "model.logit_scale",  // -> plan.*_scale
      "optim.betas",                                                       // -> optim.beta1/beta2
      "optim.weight_decay", "optim.no_decay",                              // per-tensor decay in plan.hpp
      "schedule.warmup_ratio", "schedule.warmup_steps",                    // -> plan.warmup_steps
      "train.steps", "train.tokens",                                       // -> plan.total_steps
      "train.global_batch",                                                // -> plan.grad_accum
  };
  for (const char* k : keys) {
    if (key == k) return true;
  }
  return false;
}

}  // namespace gc
