// Builds a typed Spec from a loaded SpecDocument: applies defaults and
// derived defaults, parses formulas, and checks everything that involves more
// than one key. Every problem is reported; nothing stops at the first error.
#include <algorithm>
#include <filesystem>

#include "common/text.hpp"
#include "runtime/anchor.hpp"
#include "spec/schema.hpp"
#include "spec/spec.hpp"

namespace gc {

namespace {

// Reads settings with schema defaults, recording every value it hands out so
// the resolved spec lists exactly what the planner used.
class Reader {
 public:
  Reader(const SpecDocument& doc, Diagnostics& diags) : doc_(doc), diags_(diags) {}

  const Setting* explicit_setting(const std::string& path) const {
    auto it = doc_.settings.find(path);
    return it == doc_.settings.end() ? nullptr : &it->second;
  }
  bool has(const std::string& path) const { return explicit_setting(path) != nullptr; }
  bool is_invalid(const std::string& path) const { return doc_.invalid_keys.count(path) > 0; }
  bool incomplete() const { return doc_.incomplete; }

  // The explicit value or the schema default; nullptr if neither (reported
  // as missing when `required_here`).
  const Value* value(const std::string& path, bool required_here = false) {
    if (const Setting* s = explicit_setting(path)) return record(path, s->value);
    const KeySpec* k = find_key(path);
    if (k && k->default_value) return record(path, *k->default_value);
    if (required_here) report_missing(path);
    return nullptr;
  }

  std::int64_t integer(const std::string& path, std::int64_t fallback = 0, bool required_here = false) {
    const Value* v = value(path, required_here);
    return v ? v->i : fallback;
  }
  double number(const std::string& path, double fallback = 0.0, bool required_here = false) {
    const Value* v = value(path, required_here);
    return v ? v->as_double() : fallback;
  }
  bool boolean(const std::string& path) {
    const Value* v = value(path);
    return v && v->b;
  }
  std::string str(const std::string& path, bool required_here = false) {
    const Value* v = value(path, required_here);
    return v ? v->s : std::string();
  }

  template <typename E>
  E choice(const std::string& path, const std::vector<std::pair<const char*, E>>& options) {
    const std::string s = str(path);
    for (const auto& [name, e] : options) {
      if (s == name) return e;
    }
    return options.front().second;
  }

  std::vector<ParamClass> classes(const std::string& path) {
    std::vector<ParamClass> out;
    if (const Value* v = value(path)) {
      for (const auto& item : v->items) {
        if (auto c = class_from_name(item.s)) out.push_back(*c);
      }
    }
    return out;
  }

  std::vector<std::int64_t> integers(const std::string& path) {
    std::vector<std::int64_t> out;
    if (const Value* v = value(path)) {
      for (const auto& item : v->items) out.push_back(item.i);
    }
    return out;
  }

  // Records a derived default (so the resolved spec shows it).
  void derive(const std::string& path, Value v) { resolved_[path] = std::move(v); }

  // A formula: a number, or an expression over the scope's variables. The
  // error column points into the string at the offending character.
  std::optional<Formula> formula(const std::string& path) {
    const Value* v = value(path);
    if (!v) return std::nullopt;
    const KeySpec* k = find_key(path);
    Formula f;
    f.loc = v->loc;
    if (v->kind == Value::Kind::number) {
      f.expr = expr::Expr::constant(v->d);
      return f;
    }
    expr::Error err;
    auto e = expr::Expr::parse(v->s, formula_variables(k->scope), &err);
    if (!e) {
      diags_.error(locate_in_string(doc_, v->loc, err.offset), "in '" + path + "': " + err.message);
      return std::nullopt;
    }
    f.expr = std::move(*e);
    return f;
  }

  SourceLoc loc(const std::string& path) const {
    if (const Setting* s = explicit_setting(path)) return s->value.loc;
    return section_loc(path);
  }
  SourceLoc key_loc(const std::string& path) const {
    if (const Setting* s = explicit_setting(path)) return s->key_loc;
    return section_loc(path);
  }

  void report_missing(const std::string& path) {
    if (doc_.invalid_keys.count(path) || doc_.incomplete) return;  // reported already
    const auto dot = path.rfind('.');
    const std::string section = path.substr(0, dot);
    diags_.error(section_loc(path),
                 "missing required key '" + path.substr(dot + 1) + "' in [" + section + "]");
  }

  std::map<std::string, Value> take_resolved() { return std::move(resolved_); }
  Diagnostics& diags() { return diags_; }

 private:
  const Value* record(const std::string& path, const Value& v) {
    resolved_[path] = v;
    return &resolved_[path];
  }

  SourceLoc section_loc(const std::string& path) const {
    const std::string section = path.substr(0, path.rfind('.'));
    auto it = doc_.sections.find(section);
    if (it != doc_.sections.end()) return it->second;
    return {doc_.root_file, 0, 0};
  }

  const SpecDocument& doc_;
  Diagnostics& diags_;
  std::map<std::string, Value> resolved_;
};

void check_text(Reader& r, const std::string& path, bool allow_newline, std::size_t max_len) {
  const Setting* s = r.explicit_setting(path);
  if (!s) return;
  const std::string& text = s->value.s;
  const std::size_t bad = find_unsafe_text(text, allow_newline);
  if (bad != std::string::npos) {
    r.diags().error(s->value.loc, "'" + path + "' contains a control character or invalid UTF-8 at byte " +
                                      std::to_string(bad + 1));
  } else if (text.size() > max_len) {
    r.diags().error(s->value.loc, "'" + path + "' is longer than " + std::to_string(max_len) + " bytes");
  }
}

void build_experiment(Reader& r, Spec& spec) {
  spec.experiment.name = r.str("experiment.name", true);
  if (const Setting* s = r.explicit_setting("experiment.name")) {
    const std::string problem = check_safe_name(s->value.s);
    if (!problem.empty()) r.diags().error(s->value.loc, "'experiment.name' " + problem);
  }
  spec.experiment.description = r.str("experiment.description");
  check_text(r, "experiment.description", true, 4096);
  spec.experiment.seed = r.integer("experiment.seed");
}

void build_model(Reader& r, Spec& spec) {
  auto& m = spec.model;
  m.arch = r.choice<Arch>("model.arch", {{"dense", Arch::dense}, {"moe", Arch::moe}});
  m.vocab_size = r.integer("model.vocab_size", 0, true);
  m.d_model = r.integer("model.d_model", 0, true);
  m.n_layers = r.integer("model.n_layers", 0, true);
  m.n_heads = r.integer("model.n_heads", 0, true);
  m.n_kv_heads = r.has("model.n_kv_heads") ? r.integer("model.n_kv_heads") : m.n_heads;
  r.derive("model.n_kv_heads", Value::integer(m.n_kv_heads));
  if (m.n_heads > 0 && m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0) {
    r.diags().error(r.loc("model.n_kv_heads"), "'model.n_heads' (" + std::to_string(m.n_heads) +
                                                   ") must be divisible by 'model.n_kv_heads' (" +
                                                   std::to_string(m.n_kv_heads) + ")");
  }
  if (r.has("model.head_dim")) {
    m.head_dim = r.integer("model.head_dim");
  } else if (m.n_heads > 0 && m.d_model > 0) {
    if (m.d_model % m.n_heads != 0) {
      r.diags().error(r.loc("model.n_heads"), "'model.d_model' (" + std::to_string(m.d_model) +
                                                  ") is not divisible by 'model.n_heads' (" +
                                                  std::to_string(m.n_heads) + "); set 'model.head_dim'");
    }
    m.head_dim = m.d_model / m.n_heads;
  }
  r.derive("model.head_dim", Value::integer(m.head_dim));
  const bool dense_layers_need_dff = m.arch == Arch::dense;
  m.d_ff = r.integer("model.d_ff", 0, dense_layers_need_dff);
  r.str("model.activation");
  m.norm_eps = r.number("model.norm_eps");
  m.norm_placement =
      r.choice<NormPlacement>("model.norm_placement", {{"pre", NormPlacement::pre}, {"sandwich", NormPlacement::sandwich}});
  m.embedding_norm = r.boolean("model.embedding_norm");
  m.qk_norm = r.boolean("model.qk_norm");
  m.tie_embeddings = r.boolean("model.tie_embeddings");
  m.rope_theta = r.number("model.rope_theta");
  m.gated_attention = r.choice<GatedAttention>(
      "model.gated_attention",
      {{"none", GatedAttention::none}, {"headwise", GatedAttention::headwise}, {"elementwise", GatedAttention::elementwise}});
  for (auto [path, field] : {std::pair{"model.embedding_scale", &m.embedding_scale},
                             std::pair{"model.attn_scale", &m.attn_scale}, std::pair{"model.logit_scale", &m.logit_scale}}) {
    if (auto f = r.formula(path)) *field = std::move(*f);
  }
}

void build_moe(Reader& r, Spec& spec) {
  auto& e = spec.moe;
  const bool moe = spec.model.arch == Arch::moe;
  e.n_dense_layers = r.integer("moe.n_dense_layers");
  e.layer_interval = r.integer("moe.layer_interval");
  e.n_experts = r.integer("moe.n_experts", 0, moe);
  e.top_k = r.integer("moe.top_k", 0, moe);
  e.n_shared_experts = r.integer("moe.n_shared_experts");
  e.expert_d_ff = r.integer("moe.expert_d_ff", 0, moe);
  e.shared_d_ff = r.has("moe.shared_d_ff") ? r.integer("moe.shared_d_ff") : e.expert_d_ff;
  e.dense_d_ff = r.has("moe.dense_d_ff") ? r.integer("moe.dense_d_ff") : spec.model.d_ff;
  e.router_scoring =
      r.choice<RouterScoring>("moe.router_scoring", {{"softmax", RouterScoring::softmax}, {"sigmoid", RouterScoring::sigmoid}});
  e.load_balance = r.choice<LoadBalance>(
      "moe.load_balance", {{"none", LoadBalance::none}, {"aux_loss", LoadBalance::aux_loss}, {"aux_free", LoadBalance::aux_free}});
  e.load_balance_coef = r.number("moe.load_balance_coef");
  e.norm_topk_prob = r.boolean("moe.norm_topk_prob");
  e.z_loss = r.number("moe.z_loss");
  e.seq_aux_loss = r.number("moe.seq_aux_loss");
  e.capacity_factor = r.number("moe.capacity_factor");
  if (!moe) return;
  r.derive("moe.shared_d_ff", Value::integer(e.shared_d_ff));
  r.derive("moe.dense_d_ff", Value::integer(e.dense_d_ff));
  const auto& m = spec.model;
  if (e.top_k > 0 && e.n_experts > 0 && e.top_k > e.n_experts) {
    r.diags().error(r.loc("moe.top_k"), "'moe.top_k' (" + std::to_string(e.top_k) + ") must not exceed 'moe.n_experts' (" +
                                            std::to_string(e.n_experts) + ")");
  }
  if (m.n_layers > 0 && e.n_dense_layers >= m.n_layers) {
    r.diags().error(r.loc("moe.n_dense_layers"), "'moe.n_dense_layers' (" + std::to_string(e.n_dense_layers) +
                                                     ") leaves no MoE layer among " + std::to_string(m.n_layers) +
                                                     " layers");
  }
  if (e.z_loss > 0.0 && e.router_scoring == RouterScoring::sigmoid) {
    r.diags().error(r.loc("moe.z_loss"), "'moe.z_loss' penalizes the log-partition of a softmax router; with "
                                         "'moe.router_scoring' = \"sigmoid\" there is none (set z_loss = 0 or "
                                         "router_scoring = \"softmax\")");
  }
  if (e.n_dense_layers > 0 && e.dense_d_ff == 0) {
    r.diags().error(r.loc("moe.n_dense_layers"), "the " + std::to_string(e.n_dense_layers) +
                                                     " dense layer(s) need a width: set 'moe.dense_d_ff' or 'model.d_ff'");
  }
}

Distribution distribution_of(const std::string& s) {
  if (s == "trunc_normal") return Distribution::trunc_normal;
  if (s == "uniform") return Distribution::uniform;
  return Distribution::normal;
}

void warn_large_gamma(Reader& r, const std::string& path, double gamma) {
  if (gamma > 1.25) {
    r.diags().warning(r.loc(path), "'" + path + "' = " + format_double(gamma) +
                                       " is above 1.25: seed 000 §2.4 finds the loss gets worse beyond γ = 1, "
                                       "where the network starts close to an identity map");
  }
}

void build_init(Reader& r, Spec& spec) {
  auto& in = spec.init;
  in.preset = r.str("init.preset");
  in.gamma = r.number("init.gamma");
  in.gamma_loc = r.loc("init.gamma");
  warn_large_gamma(r, "init.gamma", in.gamma);
  in.fan = r.str("init.fan") == "d_model" ? FanMode::d_model : FanMode::fan_in;
  in.distribution = distribution_of(r.str("init.distribution"));
  in.cutoff = r.number("init.cutoff");
  in.depth_scaling = r.choice<DepthScaling>(
      "init.depth_scaling", {{"none", DepthScaling::none}, {"total", DepthScaling::total}, {"per_layer", DepthScaling::per_layer}});
  in.depth_scaling_classes = r.classes("init.depth_scaling_classes");
  in.base_width = r.has("init.base_width") ? r.number("init.base_width") : static_cast<double>(spec.model.d_model);
  r.derive("init.base_width", Value::number(in.base_width));
  for (std::size_t c = 0; c < kNumWeightClasses; ++c) {
    const std::string p = std::string("init.") + class_name(static_cast<ParamClass>(c)) + ".";
    ClassRule& rule = in.classes[c];
    if (r.has(p + "gamma")) {
      rule.gamma = r.number(p + "gamma");
      rule.gamma_loc = r.loc(p + "gamma");
      warn_large_gamma(r, p + "gamma", *rule.gamma);
    }
    if (r.has(p + "std")) rule.std = r.formula(p + "std");
    if (r.has(p + "distribution")) rule.distribution = distribution_of(r.str(p + "distribution"));
    if (r.has(p + "cutoff")) rule.cutoff = r.number(p + "cutoff");
  }
}

void build_optim(Reader& r, Spec& spec) {
  auto& o = spec.optim;
  o.lr = r.number("optim.lr", 0.0, true);
  if (const Value* betas = r.value("optim.betas"); betas && betas->items.size() == 2) {
    o.beta1 = betas->items[0].d;
    o.beta2 = betas->items[1].d;
  }
  o.eps = r.number("optim.eps");
  o.weight_decay = r.number("optim.weight_decay");
  o.no_decay = r.classes("optim.no_decay");
  o.grad_clip = r.number("optim.grad_clip");
  for (std::size_t c = 0; c < kNumClasses; ++c) {
    const auto cls = static_cast<ParamClass>(c);
    const std::string key = std::string("optim.lr_mult.") + class_name(cls);
    // Expert and shared-expert classes follow their mlp class unless set.
    const auto fallback = fallback_class(cls);
    const std::string fallback_key = fallback ? std::string("optim.lr_mult.") + class_name(*fallback) : "";
    const std::string source = (!r.has(key) && fallback && r.has(fallback_key)) ? fallback_key : key;
    if (auto f = r.formula(source)) {
      o.lr_mult[c] = std::move(*f);
      if (source != key) r.derive(key, *r.value(source));
    }
  }
}

void build_schedule_and_train(Reader& r, Spec& spec) {
  auto& s = spec.schedule;
  if (r.has("schedule.warmup_steps")) {
    s.warmup_steps = r.integer("schedule.warmup_steps");
  } else {
    s.warmup_ratio = r.number("schedule.warmup_ratio");
  }
  s.decay = r.choice<Decay>("schedule.decay", {{"cosine", Decay::cosine}, {"linear", Decay::linear}, {"constant", Decay::constant}});
  s.min_lr_ratio = r.number("schedule.min_lr_ratio");

  auto& t = spec.train;
  t.seq_len = r.integer("train.seq_len", 0, true);
  t.global_batch = r.integer("train.global_batch", 0, true);
  t.micro_batch = r.has("train.micro_batch") ? r.integer("train.micro_batch") : t.global_batch;
  r.derive("train.micro_batch", Value::integer(t.micro_batch));
  if (t.micro_batch > 0 && t.global_batch > 0 && t.global_batch % t.micro_batch != 0) {
    r.diags().error(r.loc("train.micro_batch"), "'train.global_batch' (" + std::to_string(t.global_batch) +
                                                    ") must be divisible by 'train.micro_batch' (" +
                                                    std::to_string(t.micro_batch) + ")");
  }
  if (r.has("train.steps")) t.steps = r.integer("train.steps");
  if (r.has("train.tokens")) t.tokens = r.integer("train.tokens");
  const bool length_reported = r.is_invalid("train.steps") || r.is_invalid("train.tokens") || r.incomplete();
  if (!t.steps && !t.tokens && !length_reported) {
    r.diags().error(r.key_loc("train.steps"), "missing training length: set 'steps' or 'tokens' in [train]");
  }
  t.precision = r.choice<Precision>("train.precision", {{"bf16", Precision::bf16}, {"fp32", Precision::fp32}});
  t.eval_every = r.integer("train.eval_every");
  t.eval_batches = r.integer("train.eval_batches");
  t.checkpoint_every = r.integer("train.checkpoint_every");
  t.log_every = r.integer("train.log_every");

  auto& m = spec.model;
  m.max_seq_len = r.has("model.max_seq_len") ? r.integer("model.max_seq_len") : t.seq_len;
  r.derive("model.max_seq_len", Value::integer(m.max_seq_len));
  if (t.seq_len > 0 && m.max_seq_len > 0 && t.seq_len > m.max_seq_len) {
    r.diags().error(r.loc("train.seq_len"), "'train.seq_len' (" + std::to_string(t.seq_len) +
                                                ") exceeds 'model.max_seq_len' (" + std::to_string(m.max_seq_len) + ")");
  }
}

void check_path(Reader& r, const std::string& path) {
  check_text(r, path, false, 4096);
  if (const Setting* s = r.explicit_setting(path); s && s->value.s.empty()) {
    r.diags().error(s->value.loc, "'" + path + "' must not be empty");
  }
}

// data.format = "anchor": the task fixes the sequence (9 inputs, one target) and the
// smallest vocabulary; [data.anchor] keys belong to that format only.
void build_anchor(Reader& r, Spec& spec) {
  auto& d = spec.data;
  if (d.format != DataFormat::anchor) {
    for (const char* key : {"data.anchor.seed", "data.anchor.train_sequences", "data.anchor.eval_sequences",
                            "data.anchor.held_out"}) {
      if (const Setting* s = r.explicit_setting(key)) {
        r.diags().error(s->key_loc, std::string("'") + key + "' applies to data.format = \"anchor\" only");
      }
    }
    return;
  }
  d.anchor_seed = std::uint64_t(r.has("data.anchor.seed") ? r.integer("data.anchor.seed") : spec.experiment.seed);
  r.derive("data.anchor.seed", Value::integer(std::int64_t(d.anchor_seed)));
  d.anchor_train_sequences = r.integer("data.anchor.train_sequences");
  d.anchor_eval_sequences = r.integer("data.anchor.eval_sequences");
  if (const Value* held = r.value("data.anchor.held_out"); held && held->items.size() == 2) {
    d.anchor_held_first = int(held->items[0].i);
    d.anchor_held_second = int(held->items[1].i);
  }
  const gc::rt::anchor::Task task{d.anchor_seed, d.anchor_held_first, d.anchor_held_second};
  if (const std::string problem = task.check(); !problem.empty()) {
    r.diags().error(r.loc("data.anchor.held_out"), "'data.anchor.held_out': " + problem);
    return;
  }
  if (spec.train.seq_len != 0 && spec.train.seq_len != gc::rt::anchor::kInputs) {
    r.diags().error(r.loc("train.seq_len"), "data.format = \"anchor\" reads sequences of " +
                                                std::to_string(gc::rt::anchor::kInputs) +
                                                " input tokens: set 'train.seq_len' = " +
                                                std::to_string(gc::rt::anchor::kInputs) + " (got " +
                                                std::to_string(spec.train.seq_len) + ")");
  }
  if (spec.model.vocab_size != 0 && spec.model.vocab_size < task.min_vocab()) {
    r.diags().error(r.loc("model.vocab_size"), "data.format = \"anchor\" needs 'model.vocab_size' >= " +
                                                   std::to_string(task.min_vocab()) +
                                                   " (items 20-99 and every target; got " +
                                                   std::to_string(spec.model.vocab_size) + ")");
  }
}

void build_data(Reader& r, Spec& spec) {
  auto& d = spec.data;
  d.format = r.choice<DataFormat>("data.format", {{"synthetic", DataFormat::synthetic},
                                                  {"llmc", DataFormat::llmc},
                                                  {"text", DataFormat::text},
                                                  {"anchor", DataFormat::anchor}});
  r.str("data.format", true);
  const bool files = r.has("data.format") && d.format != DataFormat::synthetic && d.format != DataFormat::anchor;
  d.train = r.str("data.train", files);
  d.val = r.str("data.val", files && d.format == DataFormat::llmc);
  d.val_fraction = r.number("data.val_fraction");
  d.tokenizer = r.str("data.tokenizer");
  d.tokenizer_type = r.str("data.tokenizer_type");
  d.cache_dir = r.str("data.cache_dir");
  d.synthetic_task = r.str("data.synthetic_task");
  if (const Value* ext = r.value("data.text_extensions")) {
    for (const auto& item : ext->items) {
      d.text_extensions.push_back(item.s);
      const bool ok = item.s.size() >= 2 && item.s[0] == '.' && item.s.find('/') == std::string::npos &&
                      find_unsafe_text(item.s, false) == std::string::npos;
      if (!ok) r.diags().error(item.loc, "'data.text_extensions' items must look like \".txt\" (got " + item.to_toml() + ")");
    }
  }
  for (const char* p : {"data.train", "data.val", "data.tokenizer", "data.cache_dir"}) check_path(r, p);
  build_anchor(r, spec);
}

void build_metrics(Reader& r, Spec& spec) {
  for (const auto& name : metric_names()) {
    const std::string p = "metrics." + name + ".";
    MetricSpec m;
    m.enabled = r.boolean(p + "enabled");
    m.interval = find_key(p + "interval") ? r.integer(p + "interval") : 1;
    if (find_key(p + "classes")) m.classes = r.classes(p + "classes");
    if (find_key(p + "layers")) {
      m.layers = r.integers(p + "layers");
      if (const Setting* s = r.explicit_setting(p + "layers")) {
        for (const auto& item : s->value.items) {
          if (spec.model.n_layers > 0 && item.i >= spec.model.n_layers) {
            r.diags().error(item.loc, "'" + p + "layers' names layer " + std::to_string(item.i) +
                                          ", but the model has layers 0.." + std::to_string(spec.model.n_layers - 1));
          }
        }
      }
    }
    spec.metrics.metrics[name] = std::move(m);
  }
  spec.metrics.embedding_top_tokens = r.integer("metrics.embedding_cosine.top_tokens");
  spec.metrics.cosine_image_steps = r.integers("metrics.cosine_similarity.image_steps");
}

void build_distributed(Reader& r, Spec& spec) {
  spec.distributed.backend = r.str("distributed.backend");
  spec.distributed.zero_stage = r.integer("distributed.zero_stage");
  spec.distributed.bucket_mb = r.number("distributed.bucket_mb");
  spec.distributed.expert_parallel = r.integer("distributed.expert_parallel");
  spec.distributed.expert_exchange_factor = r.number("distributed.expert_exchange_factor");
  const double factor = spec.distributed.expert_exchange_factor;
  if (factor > 0.0 && factor < 1.0) {
    r.diags().error(r.loc("distributed.expert_exchange_factor"),
                    "'distributed.expert_exchange_factor' = " + format_double(factor) +
                        " would not hold a rank's own assignments: use 0 (the dropless worst case) or at least 1");
  }
  const std::int64_t ep = spec.distributed.expert_parallel;
  if (ep > 1 && spec.model.arch != Arch::moe) {
    r.diags().error(r.loc("distributed.expert_parallel"),
                    "'distributed.expert_parallel' = " + std::to_string(ep) +
                        " needs a mixture-of-experts model (model.arch = \"moe\"); a dense model has no experts to "
                        "shard (leave it at 1)");
  } else if (ep > 1 && spec.moe.n_experts > 0 && ep > spec.moe.n_experts) {
    r.diags().error(r.loc("distributed.expert_parallel"),
                    "'distributed.expert_parallel' (" + std::to_string(ep) + ") must not exceed 'moe.n_experts' (" +
                        std::to_string(spec.moe.n_experts) + "): every rank of a group owns at least one expert");
  }
}

void warn_ignored_moe_keys(const SpecDocument& doc, const Spec& spec, Diagnostics& diags) {
  if (spec.model.arch == Arch::moe) return;
  const std::pair<const std::string, Setting>* first = nullptr;  // one warning, at the first moe key written
  for (const auto& entry : doc.settings) {
    if (entry.first.rfind("moe.", 0) != 0) continue;
    const SourceLoc& l = entry.second.key_loc;
    if (!first || std::pair(l.line, l.col) < std::pair(first->second.key_loc.line, first->second.key_loc.col)) {
      first = &entry;
    }
  }
  if (first) diags.warning(first->second.key_loc, "'" + first->first + "' has no effect: 'model.arch' is \"dense\"");
}

std::optional<Spec> build(std::optional<SpecDocument> doc, Diagnostics& diags) {
  if (!doc) return std::nullopt;
  Spec spec;
  spec.file = doc->root_file;
  Reader r(*doc, diags);
  build_experiment(r, spec);
  build_model(r, spec);
  build_moe(r, spec);
  build_init(r, spec);
  build_optim(r, spec);
  build_schedule_and_train(r, spec);
  build_data(r, spec);
  build_metrics(r, spec);
  build_distributed(r, spec);
  warn_ignored_moe_keys(*doc, spec, diags);
  spec.resolved = r.take_resolved();
  if (spec.model.arch != Arch::moe) {
    for (auto it = spec.resolved.begin(); it != spec.resolved.end();) {
      it = it->first.rfind("moe.", 0) == 0 ? spec.resolved.erase(it) : std::next(it);
    }
  }
  if (spec.data.format != DataFormat::anchor) {  // the task's keys (and spec hashes) only where it is used
    for (auto it = spec.resolved.begin(); it != spec.resolved.end();) {
      it = it->first.rfind("data.anchor.", 0) == 0 ? spec.resolved.erase(it) : std::next(it);
    }
  }
  spec.document = std::move(*doc);
  if (diags.has_errors()) return std::nullopt;
  return spec;
}

}  // namespace

SourceLoc Spec::where(const std::string& path) const {
  auto it = document.settings.find(path);
  if (it != document.settings.end()) return it->second.value.loc;
  return {file, 0, 0};
}

SourceLoc Spec::where_key(const std::string& path) const {
  auto it = document.settings.find(path);
  if (it != document.settings.end()) return it->second.key_loc;
  return {file, 0, 0};
}

std::optional<Spec> load_spec(const std::string& path, Diagnostics& diags) {
  return build(load_document(path, diags), diags);
}

std::optional<Spec> load_spec_text(const std::string& text, const std::string& label, const std::string& base_dir,
                                   Diagnostics& diags) {
  return build(load_document_text(text, label, base_dir, diags), diags);
}

std::string resolved_toml(const Spec& spec) {
  // Sections in schema order (a TOML table may be opened only once), keys in
  // schema order within each.
  std::vector<std::string> order;
  std::map<std::string, std::string> bodies;
  for (const auto& k : schema()) {
    auto it = spec.resolved.find(k.path);
    if (it == spec.resolved.end()) continue;
    const auto dot = k.path.rfind('.');
    const std::string section = k.path.substr(0, dot);
    if (!bodies.count(section)) order.push_back(section);
    bodies[section] += k.path.substr(dot + 1) + " = " + it->second.to_toml() + "\n";
  }
  std::string out;
  for (const auto& section : order) out += (out.empty() ? "[" : "\n[") + section + "]\n" + bodies[section];
  return out;
}

}  // namespace gc
