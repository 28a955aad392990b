// Spec -> Plan: layer layout, the parameter table with numeric init stds,
// optimizer groups, counts, FLOPs, memory and schedules.
#include "plan/plan.hpp"
#include "plan/metrics_scratch.hpp"

#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "core/truncated_normal.hpp"  // templates/core: the tree's own
#include "plan/params.hpp"
#include "spec/schema.hpp"

namespace gc {

std::int64_t ParamEntry::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

namespace {

std::vector<LayerPlan> plan_layers(const Spec& spec) {
  std::vector<LayerPlan> layers;
  const auto& m = spec.model;
  const auto& e = spec.moe;
  for (int l = 0; l < m.n_layers; ++l) {
    LayerPlan lp;
    lp.index = l;
    const bool moe = m.arch == Arch::moe && l >= e.n_dense_layers && (l - e.n_dense_layers) % e.layer_interval == 0;
    lp.kind = moe ? LayerKind::moe : LayerKind::dense;
    lp.d_ff = moe ? 0 : (m.arch == Arch::moe ? e.dense_d_ff : m.d_ff);
    layers.push_back(lp);
  }
  return layers;
}

expr::Bindings model_bindings(const Spec& spec, double width_mult) {
  const auto& m = spec.model;
  return {{"d_model", double(m.d_model)}, {"n_layers", double(m.n_layers)},   {"d_ff", double(m.d_ff)},
          {"head_dim", double(m.head_dim)}, {"n_heads", double(m.n_heads)}, {"n_kv_heads", double(m.n_kv_heads)},
          {"vocab", double(m.vocab_size)}, {"width_mult", width_mult}};
}

// Evaluates a formula, reporting failures at the formula's location.
std::optional<double> evaluate(const Formula& f, const expr::Bindings& b, const std::string& what, Diagnostics& diags) {
  std::string error;
  auto v = f.expr.eval(b, &error);
  if (!v) diags.error(f.loc, what + ": " + error);
  return v;
}

class InitResolver {
 public:
  InitResolver(const Spec& spec, const expr::Bindings& model_vars, Diagnostics& diags)
      : spec_(spec), model_vars_(model_vars), diags_(diags) {}

  // Fills distribution, std, cutoff, effective_std and rule of a weight.
  bool resolve(ParamEntry& p) {
    const auto& init = spec_.init;
    const ClassRule& own = rule(p.cls);
    const ClassRule* fallback = nullptr;
    if (auto fb = fallback_class(p.cls)) fallback = &rule(*fb);
    const bool own_rule = own.gamma || own.std;
    const ClassRule* source = own_rule ? &own : (fallback && (fallback->gamma || fallback->std) ? fallback : nullptr);
    const std::string source_class = source == &own ? class_name(p.cls)
                                     : source       ? class_name(*fallback_class(p.cls))
                                                    : "";

    const double gamma = source && source->gamma ? *source->gamma : init.gamma;
    expr::Bindings vars = model_vars_;
    vars["fan_in"] = double(p.fan_in);
    vars["fan_out"] = double(p.fan_out);
    vars["layer"] = double(std::max(p.layer, 0));
    vars["gamma"] = gamma;

    double std = 0.0;
    if (source && source->std) {
      auto v = evaluate(*source->std, vars, "in 'init." + source_class + ".std' for " + p.name, diags_);
      if (!v) return false;
      std = *v;
      p.rule = "std = " + source->std->expr.text();
      if (std <= 0.0) {
        diags_.error(source->std->loc, "'init." + source_class + ".std' evaluates to " + format_double(std) + " for " +
                                           p.name + "; a std must be > 0");
        return false;
      }
    } else {
      const std::int64_t fan = init.fan == FanMode::d_model ? spec_.model.d_model : p.fan_in;
      std = std::pow(double(fan), -gamma);
      p.rule = "γ = " + format_double(gamma) + ", " + (init.fan == FanMode::d_model ? "d_model" : "fan_in") + " = " +
               std::to_string(fan);
    }
    std *= depth_factor(p);

    p.distribution = own.distribution ? *own.distribution
                     : fallback && fallback->distribution ? *fallback->distribution
                                                          : init.distribution;
    p.cutoff = own.cutoff ? *own.cutoff : fallback && fallback->cutoff ? *fallback->cutoff : init.cutoff;
    if (p.distribution != Distribution::trunc_normal) p.cutoff = 0.0;
    p.std = std;
    p.effective_std =
        p.distribution == Distribution::trunc_normal ? std * tree::core::truncated_normal_std_factor(p.cutoff) : std;
    return true;
  }

 private:
  const ClassRule& rule(ParamClass c) const { return spec_.init.classes[static_cast<std::size_t>(c)]; }

  double depth_factor(ParamEntry& p) const {
    const auto& init = spec_.init;
    if (init.depth_scaling == DepthScaling::none) return 1.0;
    const auto& classes = init.depth_scaling_classes;
    if (std::find(classes.begin(), classes.end(), p.cls) == classes.end()) return 1.0;
    if (init.depth_scaling == DepthScaling::total) {
      p.rule += " × 1/sqrt(2·" + std::to_string(spec_.model.n_layers) + ")";
      return 1.0 / std::sqrt(2.0 * double(spec_.model.n_layers));
    }
    const int l = std::max(p.layer, 0);
    p.rule += " × 1/sqrt(2·" + std::to_string(l + 1) + ")";
    return 1.0 / std::sqrt(2.0 * double(l + 1));
  }

  const Spec& spec_;
  const expr::Bindings& model_vars_;
  Diagnostics& diags_;
};

bool resolve_optimizer(const Spec& spec, const expr::Bindings& model_vars, ParamEntry& p, Diagnostics& diags) {
  const auto& o = spec.optim;
  const bool exempt = std::find(o.no_decay.begin(), o.no_decay.end(), p.cls) != o.no_decay.end();
  p.weight_decay = exempt ? 0.0 : o.weight_decay;
  expr::Bindings vars = model_vars;
  vars["fan_in"] = double(p.fan_in);
  vars["fan_out"] = double(p.fan_out);
  vars["layer"] = double(std::max(p.layer, 0));
  vars["gamma"] = spec.init.gamma;
  const Formula& f = o.lr_mult[static_cast<std::size_t>(p.cls)];
  const std::string key = std::string("optim.lr_mult.") + class_name(p.cls);
  auto v = evaluate(f, vars, "in '" + key + "' for " + p.name, diags);
  if (!v) return false;
  if (*v < 0.0) {
    diags.error(f.loc, "'" + key + "' evaluates to " + format_double(*v) + " for " + p.name + "; it must be >= 0");
    return false;
  }
  p.lr_mult = *v;
  return true;
}

std::vector<OptimGroup> group_parameters(const std::vector<ParamEntry>& params) {
  std::vector<OptimGroup> groups;
  for (const auto& p : params) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const OptimGroup& g) {
      return g.lr_mult == p.lr_mult && g.weight_decay == p.weight_decay;
    });
    if (it == groups.end()) {
      groups.push_back({p.lr_mult, p.weight_decay, {}, 0, 0});
      it = groups.end() - 1;
    }
    if (std::find(it->classes.begin(), it->classes.end(), p.cls) == it->classes.end()) it->classes.push_back(p.cls);
    it->n_tensors += 1;
    it->n_params += p.numel();
  }
  return groups;
}

bool is_routed_expert(ParamClass c) {
  return c == ParamClass::expert_gate || c == ParamClass::expert_up || c == ParamClass::expert_down;
}

ParamCounts count_parameters(const Spec& spec, const std::vector<ParamEntry>& params) {
  ParamCounts c;
  const double active_fraction =
      spec.model.arch == Arch::moe ? double(spec.moe.top_k) / double(spec.moe.n_experts) : 1.0;
  std::int64_t inactive = 0;
  for (const auto& p : params) {
    const std::int64_t n = p.numel();
    c.total += n;
    c.stored += (n + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements;
    if (p.cls == ParamClass::embedding || p.cls == ParamClass::lm_head) c.embedding += n;
    if (p.cls == ParamClass::attn_gate) c.attn_gate += n;
    if (is_routed_expert(p.cls)) inactive += n - std::llround(double(n) * active_fraction);
  }
  c.non_embedding = c.total - c.embedding;
  c.active = c.total - inactive;
  c.active_non_embedding = c.active - c.embedding;
  return c;
}

FlopCounts count_flops(const Spec& spec, const std::vector<ParamEntry>& params, const SchedulePlan& sched) {
  FlopCounts f;
  const auto& m = spec.model;
  const double active_fraction = m.arch == Arch::moe ? double(spec.moe.top_k) / double(spec.moe.n_experts) : 1.0;
  for (const auto& p : params) {
    if (p.cls == ParamClass::norm || p.cls == ParamClass::embedding) continue;
    f.matmul_params += double(p.numel()) * (is_routed_expert(p.cls) ? active_fraction : 1.0);
  }
  if (m.tie_embeddings) f.matmul_params += double(m.vocab_size) * double(m.d_model);  // LM head matmul
  f.dense_per_token = 6.0 * f.matmul_params;
  f.attention_per_token = 12.0 * double(m.n_layers) * double(m.n_heads) * double(m.head_dim) * double(spec.train.seq_len);
  f.per_token = f.dense_per_token + f.attention_per_token;
  f.per_step = f.per_token * double(sched.tokens_per_step);
  return f;
}

}  // namespace

std::int64_t moe_capacity(const Spec& spec) {
  const MoeSpec& e = spec.moe;
  if (spec.model.arch != Arch::moe || !(e.capacity_factor > 0.0) || e.n_experts <= 0) return 0;
  const double assignments = double(spec.train.seq_len) * double(e.top_k) / double(e.n_experts);
  return std::max<std::int64_t>(1, std::int64_t(std::ceil(e.capacity_factor * assignments - 1e-9)));
}

std::int64_t head_chunk_rows(const Spec& spec) {
  const std::int64_t N = std::int64_t(spec.train.micro_batch) * spec.train.seq_len;
  const std::int64_t V = spec.model.vocab_size;
  if (N * V <= kHeadChunkElements) return N;
  const std::int64_t rows = kHeadChunkElements / V / 64 * 64;
  return std::min(N, std::max<std::int64_t>(64, rows));
}

namespace {

// Whether the model runs Q, K and V as one GEMM over [W_q; W_k; W_v] (model_impl.hpp,
// detail::qkv_stacked): W_q and W_k fill whole alignment blocks, so that the three tensors
// (stored one after the other) leave no gap between them.
bool qkv_stacked(const Spec& spec) {
  const ModelSpec& m = spec.model;
  const std::int64_t q = std::int64_t(m.n_heads) * m.head_dim * m.d_model;
  const std::int64_t kv = std::int64_t(m.n_kv_heads) * m.head_dim * m.d_model;
  return q % kTensorAlignElements == 0 && kv % kTensorAlignElements == 0;
}

// Bytes of the buffers BasicModel allocates besides parameters and gradients
// for one micro-batch of N = micro_batch·seq_len rows (model/model_impl.hpp's
// constructor); a tree test compares it with what the model allocates.
double estimate_model_buffer_bytes(const Spec& spec) {
  const ModelSpec& m = spec.model;
  const double act = spec.train.precision == Precision::bf16 ? 2.0 : 4.0, f32 = 4.0;
  const double N = double(spec.train.micro_batch) * double(spec.train.seq_len);
  const bool moe = m.arch == Arch::moe;
  const auto& e = spec.moe;
  const double D = double(m.d_model), F = double(moe ? e.dense_d_ff : m.d_ff), V = double(m.vocab_size);
  const double Q = double(m.n_heads * m.head_dim), KV = double(m.n_kv_heads * m.head_dim);
  const double H = double(m.n_heads), KVH = double(m.n_kv_heads);
  const double G = m.gated_attention == GatedAttention::none       ? 0.0
                   : m.gated_attention == GatedAttention::headwise ? H
                                                                   : Q;
  const bool sandwich = m.norm_placement == NormPlacement::sandwich;
  const bool qkv = qkv_stacked(spec);
  // Per layer: x a h2 b proj m; q qr o; k v kr; [qn kn]; [z og]; [pn mn]; dense: u w s. With the
  // Q/K/V projections stacked no layer keeps q and k: they pass through one shared [N, Q + 2·KV]
  // buffer, or under QK-norm each layer keeps its own stacked output in their place.
  double layer = 6 * D + 3 * Q + 3 * KV;
  if (qkv) layer += m.qk_norm ? KV : -(Q + KV);
  if (m.qk_norm) layer += Q + KV;
  if (G > 0) layer += G + Q;
  if (sandwich) layer += 2 * D;
  // rstd_a rstd_b, lse (one per head), [rstd_q rstd_k], [rstd_p rstd_m].
  double layer_stats = 2 + H + (m.qk_norm ? H + KVH : 0.0) + (sandwich ? 2.0 : 0.0);
  // MoE layers (model/moe_block.hpp), per row, k assignments each: xs ys (k·D),
  // eu ew es (k·Fe), [shared su sw ss]; fp32 router scores (E) and weights (k);
  // int32 expert, order, position (k each); [fp32 router lse (1) with moe.z_loss]. Scratch
  // once: dys dxs, des deu dew, [dsu dsw dss]; fp32 logits (E) and dweight (k).
  std::int64_t moe_layers = 0;
  for (int l = 0; l < m.n_layers; ++l) {
    moe_layers += moe && l >= e.n_dense_layers && (l - e.n_dense_layers) % e.layer_interval == 0;
  }
  const double dense_layers = double(m.n_layers - moe_layers);
  const double E = double(e.n_experts), k = double(e.top_k), Fe = double(e.expert_d_ff);
  const double S = double(e.n_shared_experts * e.shared_d_ff);
  const double moe_layer = 2 * k * D + 3 * k * Fe + 3 * S;
  const double moe_scratch = moe_layers > 0 ? 2 * k * D + 3 * k * Fe + 3 * S : 0.0;
  const double moe_stats = (double(moe_layers) + (moe_layers > 0 ? 1.0 : 0.0)) * (E + k) +
                           (e.z_loss > 0.0 ? double(moe_layers) : 0.0);
  const double moe_ints = double(moe_layers) * (moe_capacity(spec) > 0 ? 4 : 3) * k;  // + kept (capacity)
  double elems = double(m.n_layers) * layer + dense_layers * 3 * F + double(moe_layers) * moe_layer + moe_scratch;
  elems += 2 * D;      // embedding, embedding after its norm
  elems += 2 * D;  // final hidden, final norm
  if (qkv && !m.qk_norm) elems += Q + 2 * KV;  // the shared stacked projection
  // Backward scratch: dh dx dd; dq dqr do; dk dkr dv (stacked: dqkv in place of dq and dk); dz;
  // [dff_a dff_b dff_s].
  elems += 3 * D + 3 * Q + 3 * KV + (qkv ? KV : 0.0) + std::max(G, 1.0) + (dense_layers > 0 ? 3 * F : 0.0);
  double stats = double(m.n_layers) * layer_stats + (m.embedding_norm ? 1.0 : 0.0) + 3.0;  // rstd_f, losses, p_target
  stats += moe_stats;
  // The head's logits and their gradient: a chunk of rows each; the logit moments (2 doubles).
  const double head = 2.0 * double(head_chunk_rows(spec)) * V * act + 2 * 8.0;
  // Each MoE layer's routing state (allocate_moe_layer in templates/model/moe_block.hpp):
  // offsets, selected, the step's and the window's tallies, P (8 bytes each, E or E+1 entries),
  // per sequence counts and P (seq_aux_loss), dL/dp (per sequence or once), the dropped per
  // sequence (capacity), the bias (4 bytes); and one balancing-loss double per layer.
  double routing = 0.0;
  if (moe_layers > 0) {
    const double Gs = double(spec.train.micro_batch);
    double eights = (E + 1) + E + 2 * (E + 1) + E;
    if (e.seq_aux_loss > 0.0) eights += 2 * Gs * E;
    eights += (e.seq_aux_loss > 0.0 ? Gs : 1.0) * E;
    if (moe_capacity(spec) > 0) eights += Gs * E;
    routing = double(moe_layers) * (8 * eights + 4 * E) + 8.0 * double(m.n_layers);
  }
  return N * (elems * act + stats * f32 + moe_ints * 4.0) + head + routing;
}

// The CUDA backend's own scratch next to the model's buffers.
double estimate_backend_scratch_bytes(const Spec& spec) {
  const ModelSpec& m = spec.model;
  const double f32 = 4.0;
  const double N = double(spec.train.micro_batch) * double(spec.train.seq_len);
  const double D = double(m.d_model), H = double(m.n_heads);
  double bytes = 0.0;
  // Backend scratch: tokens, targets and the embedding index (5N + 1 int32),
  // the RMSNorm gain-gradient slices, D_i of the attention backward, RoPE tables.
  const auto dg_slices = [](double rows) { return std::clamp(std::ceil(rows / 64.0), 1.0, 1024.0); };
  bytes += (5 * N + 1) * 4.0;
  bytes += std::max(dg_slices(N) * D, dg_slices(N * H) * double(m.head_dim)) * f32;
  bytes += N * H * f32;
  bytes += double(spec.train.seq_len) * double(m.head_dim) * f32;  // cos and sin, seq_len × head_dim/2 each
  bytes += double(32 << 20);                                        // cuBLASLt workspace
  bytes += 2 * 256 * 8.0;  // the logit moments' per-slice partials (cuda/cross_entropy.cuh kMomentBlocks)
  if (m.arch == Arch::moe) {
    // MoE (the routing state is the model's): the dispatch's rows per expert (i64), per-row
    // Σ scores or lse² (f64); bf16: the router's logit gradient as a GEMM operand.
    const double E = double(spec.moe.n_experts);
    bytes += E * 8.0 + N * 8.0;
    if (spec.train.precision == Precision::bf16) bytes += N * E * 2.0;
  }
  return bytes;
}

// The CUDA engine's small device tables (AdamW's per-tensor table of 24 bytes a row, per-tensor
// Σ g² and its chunk partials in double, the loss accumulators (the evaluation's sum, the step's
// cross-entropy and balancing loss: 3 doubles), the step verdict of
// step_verdict.hpp: 48 bytes) and the largest scratch
// buffer runtime/cuda/blaslt.hpp allocates while it times algorithms for an accumulating GEMM
// (β = 1: a copy of the output, if at most 64 MiB). Accumulating outputs: the fp32 weight
// gradients (an expert stack's per expert; gate and up together) and the activation gradients dx
// (N × d_model).
double estimate_engine_scratch_bytes(const Spec& spec, const std::vector<ParamEntry>& params,
                                     const ParamCounts& counts) {
  const double tensors = double(params.size());
  double bytes = 24.0 * tensors + 8.0 * tensors + 8.0 * (double(counts.stored / 65536) + tensors + 1) + 24.0 + 48.0;
  bytes += 8.0 * (256 + 1);  // the replica check's fingerprint: block sums and total (cuda/fingerprint.cuh)
  constexpr double kTuneScratchLimit = double(std::int64_t(64) << 20);
  const double act = spec.train.precision == Precision::bf16 ? 2.0 : 4.0;
  double tune = 0.0;
  const auto consider = [&](double b) {
    if (b <= kTuneScratchLimit) tune = std::max(tune, b);
  };
  for (const auto& p : params) {
    if (p.shape.size() < 2) continue;
    const double per_matrix = double(p.shape[p.shape.size() - 2]) * double(p.shape.back());
    // Gate and up projections stored back to back are one stacked GEMM (model_impl.hpp).
    const bool stacked = p.cls == ParamClass::mlp_gate || p.cls == ParamClass::expert_gate ||
                         p.cls == ParamClass::shared_gate;
    consider(per_matrix * 4.0 * (stacked ? 2.0 : 1.0));
    // Q, K and V stacked: one weight-gradient GEMM over the three.
    if (p.cls == ParamClass::attn_q && qkv_stacked(spec)) {
      const double kv = double(spec.model.n_kv_heads) * double(spec.model.head_dim);
      consider((double(p.shape[0]) + 2.0 * kv) * double(p.shape.back()) * 4.0);
    }
  }
  consider(double(spec.train.micro_batch) * double(spec.train.seq_len) * double(spec.model.d_model) * act);
  return bytes + tune;
}

MemoryEstimate estimate_memory(const Spec& spec, const std::vector<ParamEntry>& params, const ParamCounts& counts) {
  MemoryEstimate mem;
  const double n = double(counts.stored);
  const bool bf16 = spec.train.precision == Precision::bf16;
  mem.weights = n * (bf16 ? 2.0 : 4.0);
  mem.master_weights = bf16 ? n * 4.0 : 0.0;
  mem.gradients = n * 4.0;
  mem.optimizer = n * 8.0;
  mem.total = mem.weights + mem.master_weights + mem.gradients + mem.optimizer;
  mem.model_buffers = estimate_model_buffer_bytes(spec);
  mem.activations = mem.model_buffers + estimate_backend_scratch_bytes(spec) +
                    estimate_engine_scratch_bytes(spec, params, counts) +
                    align_scratch(spec, head_chunk_rows(spec)).bytes(bf16 ? 2.0 : 4.0);
  mem.metrics_scratch = estimate_metrics_scratch_bytes(spec, params, 0, counts.stored);
  return mem;
}

std::optional<SchedulePlan> plan_schedule(const Spec& spec, Diagnostics& diags) {
  SchedulePlan s;
  const auto& t = spec.train;
  s.tokens_per_step = t.global_batch * t.seq_len;
  s.grad_accum = t.global_batch / t.micro_batch;
  s.total_steps = t.steps ? *t.steps : (*t.tokens + s.tokens_per_step - 1) / s.tokens_per_step;
  s.total_tokens = s.total_steps * s.tokens_per_step;
  if (spec.schedule.warmup_steps) {
    s.warmup_steps = *spec.schedule.warmup_steps;
    if (s.warmup_steps > s.total_steps) {
      diags.error(spec.where("schedule.warmup_steps"), "'schedule.warmup_steps' (" + std::to_string(s.warmup_steps) +
                                                           ") exceeds the " + std::to_string(s.total_steps) +
                                                           " training steps");
      return std::nullopt;
    }
  } else {
    s.warmup_steps = std::llround(*spec.schedule.warmup_ratio * double(s.total_steps));
  }
  return s;
}

std::vector<MetricPlan> plan_metrics(const Spec& spec) {
  std::vector<MetricPlan> out;
  for (const auto& name : metric_names()) {
    const auto it = spec.metrics.metrics.find(name);
    if (it == spec.metrics.metrics.end() || !it->second.enabled) continue;
    if (name == "moe_routing" && spec.model.arch != Arch::moe) continue;  // nothing to route
    MetricPlan mp;
    mp.name = name;
    mp.interval = it->second.interval;
    mp.classes = it->second.classes;
    mp.layers = it->second.layers;
    if (mp.layers.empty()) {
      for (std::int64_t l = 0; l < spec.model.n_layers; ++l) mp.layers.push_back(l);
    }
    out.push_back(std::move(mp));
  }
  return out;
}

// μP formulas divide by width_mult = d_model / init.base_width; without a
// base width it is 1 and the preset silently becomes standard parametrization.
void warn_unset_base_width(const Spec& spec, Diagnostics& diags) {
  if (spec.document.settings.count("init.base_width")) return;
  std::vector<std::pair<std::string, const Formula*>> formulas = {{"model.embedding_scale", &spec.model.embedding_scale},
                                                                   {"model.attn_scale", &spec.model.attn_scale},
                                                                   {"model.logit_scale", &spec.model.logit_scale}};
  for (std::size_t c = 0; c < kNumClasses; ++c) {
    formulas.push_back({std::string("optim.lr_mult.") + class_name(static_cast<ParamClass>(c)), &spec.optim.lr_mult[c]});
  }
  for (std::size_t c = 0; c < kNumWeightClasses; ++c) {
    const auto& rule = spec.init.classes[c];
    if (rule.std) formulas.push_back({std::string("init.") + class_name(static_cast<ParamClass>(c)) + ".std", &*rule.std});
  }
  for (const auto& [key, f] : formulas) {
    const auto vars = f->expr.variables();
    if (std::find(vars.begin(), vars.end(), "width_mult") == vars.end()) continue;
    diags.warning(f->loc, "'" + key + "' uses width_mult, but init.base_width is unset, so width_mult = 1; set "
                                      "init.base_width to the d_model of the base model the hyperparameters were "
                                      "tuned on");
    return;
  }
}

void warn_hazards(const Plan& plan, Diagnostics& diags) {
  warn_unset_base_width(plan.spec, diags);
  const auto& m = plan.spec.model;
  // Seed 003 §6.1 / App. D: with γ = 1 the embedding output has RMS ≈ 1/d; if
  // ε is negligible next to that, the first RMSNorm multiplies its input by
  // about d, so its Jacobian is about d and early updates are amplified.
  for (const auto& p : plan.params) {
    if (p.cls != ParamClass::embedding) continue;
    const double effective_gamma = -std::log(p.effective_std * plan.embedding_scale) / std::log(double(m.d_model));
    if (effective_gamma >= 1.0 - 1e-9 && m.norm_eps <= 1e-10 && !m.embedding_norm) {
      diags.warning(plan.spec.where("model.norm_eps"),
                    "small embedding init (γ ≈ " + format_double(std::round(effective_gamma * 100) / 100) +
                        ") with ε = " + format_double(m.norm_eps) +
                        " and no embedding norm: the first RMSNorm scales its input by about " +
                        format_count(std::pow(double(m.d_model), effective_gamma)) +
                        "; seed 003 (§6.1, App. D) needed model.embedding_norm and sandwich norm to avoid loss "
                        "spikes at scale");
    }
    break;
  }
}

}  // namespace

std::optional<Plan> make_plan(const Spec& spec, Diagnostics& diags) {
  const std::size_t errors_before = diags.error_count();
  Plan plan;
  plan.spec = spec;
  plan.layers = plan_layers(spec);
  plan.width_mult = double(spec.model.d_model) / spec.init.base_width;
  const expr::Bindings model_vars = model_bindings(spec, plan.width_mult);

  auto scale = [&](const Formula& f, const char* key) {
    auto v = evaluate(f, model_vars, std::string("in '") + key + "'", diags);
    if (v && *v <= 0.0) diags.error(f.loc, std::string("'") + key + "' evaluates to " + format_double(*v) + "; it must be > 0");
    return v.value_or(1.0);
  };
  plan.embedding_scale = scale(spec.model.embedding_scale, "model.embedding_scale");
  plan.attn_scale = scale(spec.model.attn_scale, "model.attn_scale");
  plan.logit_scale = scale(spec.model.logit_scale, "model.logit_scale");
  plan.head_chunk_rows = head_chunk_rows(spec);
  plan.align_scratch = align_scratch(spec, plan.head_chunk_rows);

  plan.params = list_parameters(spec, plan.layers);
  InitResolver init(spec, model_vars, diags);
  for (auto& p : plan.params) {
    if (p.cls == ParamClass::norm) {
      p.init_value = 1.0;
      p.rule = "constant 1";
    } else if (!init.resolve(p)) {
      break;  // one formula failure would repeat for every tensor of its class
    }
  }
  for (auto& p : plan.params) {
    if (!resolve_optimizer(spec, model_vars, p, diags)) break;
  }
  plan.optim_groups = group_parameters(plan.params);
  plan.counts = count_parameters(spec, plan.params);
  auto schedule = plan_schedule(spec, diags);
  if (schedule) plan.schedule = *schedule;
  plan.flops = count_flops(spec, plan.params, plan.schedule);
  plan.memory = estimate_memory(spec, plan.params, plan.counts);
  plan.metrics = plan_metrics(spec);
  if (diags.error_count() > errors_before) return std::nullopt;
  warn_hazards(plan, diags);
  return plan;
}

}  // namespace gc
