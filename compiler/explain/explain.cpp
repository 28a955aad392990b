#include "explain/explain.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "common/text.hpp"
#include "common/version.hpp"
#include "plan/cuda_kernels.hpp"
#include "plan/metrics_scratch.hpp"
#include "spec/schema.hpp"

namespace gc {

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s;
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "×" : "") + std::to_string(shape[i]);
  return s;
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// "0-3,5,7-11"
std::string ranges(const std::vector<int>& xs) {
  if (xs.empty() || xs.front() < 0) return "-";
  std::string out;
  for (std::size_t i = 0; i < xs.size();) {
    std::size_t j = i;
    while (j + 1 < xs.size() && xs[j + 1] == xs[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(xs[i]);
    if (j > i) out += "-" + std::to_string(xs[j]);
    i = j + 1;
  }
  return out;
}

// The name without "model.layers.N." so rows can group across layers.
std::string local_name(const ParamEntry& p) {
  const std::string prefix = "model.layers." + std::to_string(p.layer) + ".";
  if (p.layer >= 0 && p.name.rfind(prefix, 0) == 0) return p.name.substr(prefix.size());
  return p.name;
}

struct Row {
  std::string tensor;
  const ParamEntry* first = nullptr;
  std::vector<int> layers;
  double std_min = 0.0, std_max = 0.0;
  std::int64_t params = 0;
  std::string rule;
};

std::vector<Row> group_rows(const Plan& plan) {
  std::vector<Row> rows;
  for (const auto& p : plan.params) {
    const std::string name = local_name(p);
    auto it = std::find_if(rows.begin(), rows.end(), [&](const Row& r) {
      const ParamEntry& q = *r.first;
      return r.tensor == name && q.shape == p.shape && q.distribution == p.distribution && q.cutoff == p.cutoff &&
             q.lr_mult == p.lr_mult && q.weight_decay == p.weight_decay && (q.layer < 0) == (p.layer < 0);
    });
    if (it == rows.end()) {
      rows.push_back({name, &p, {}, p.std, p.std, 0, p.rule});
      it = rows.end() - 1;
    }
    it->layers.push_back(p.layer);
    it->std_min = std::min(it->std_min, p.std);
    it->std_max = std::max(it->std_max, p.std);
    it->params += p.numel();
    if (it->rule != p.rule) it->rule = "varies by layer";
  }
  return rows;
}

std::string pad(std::string s, std::size_t width) {
  // Pads by display width (UTF-8 continuation bytes take no column).
  std::size_t cols = 0;
  for (unsigned char c : s) cols += (c & 0xC0) != 0x80;
  if (cols < width) s.append(width - cols, ' ');
  return s;
}

std::string join_classes(const std::vector<ParamClass>& classes) {
  std::vector<std::string> names;
  for (auto c : classes) names.push_back(class_name(c));
  return join(names, ", ");
}

void model_section(std::ostringstream& o, const Plan& plan) {
  const auto& s = plan.spec;
  const auto& m = s.model;
  o << "Model\n";
  o << "  " << (m.arch == Arch::moe ? "MoE" : "dense") << " decoder: " << m.n_layers << " layers, d_model " << m.d_model
    << ", " << m.n_heads << " heads × " << m.head_dim << " (kv heads " << m.n_kv_heads << "), vocab " << m.vocab_size
    << "\n";
  o << "  RMSNorm ε " << format_double(m.norm_eps) << ", "
    << to_string(m.norm_placement) << "-norm"
    << (m.embedding_norm ? ", embedding norm" : "") << (m.qk_norm ? ", QK-norm" : "") << "; RoPE θ "
    << format_double(m.rope_theta) << "; max_seq_len " << m.max_seq_len << "\n";
  o << "  gated attention: " << to_string(m.gated_attention)
    << "; embeddings: " << (m.tie_embeddings ? "tied" : "untied") << "; scales: embedding ×"
    << format_double(plan.embedding_scale) << ", attention " << sci(plan.attn_scale) << ", logits ×"
    << format_double(plan.logit_scale) << "\n";
  if (m.arch == Arch::moe) {
    const auto& e = s.moe;
    o << "  MoE: " << e.n_experts << " routed experts (top-" << e.top_k << ", d_ff " << e.expert_d_ff << "), "
      << e.n_shared_experts << " shared (d_ff " << e.shared_d_ff << "); " << e.n_dense_layers
      << (e.n_dense_layers == 1 ? " dense layer" : " dense layers") << " of d_ff " << e.dense_d_ff << "\n";
    const std::int64_t capacity = moe_capacity(s);
    o << "  routing: " << (capacity > 0 ? "at most " + std::to_string(capacity) +
                                               " assignments per expert and sequence (moe.capacity_factor = " +
                                               format_double(e.capacity_factor) + "), the rest dropped"
                                         : std::string("dropless"));
    if (e.seq_aux_loss > 0.0) o << "; sequence-wise balancing loss × " << format_double(e.seq_aux_loss);
    if (e.z_loss > 0.0) o << "; router z-loss × " << format_double(e.z_loss);
    o << "\n";
  }
  std::vector<int> dense, moe;
  for (const auto& l : plan.layers) (l.kind == LayerKind::moe ? moe : dense).push_back(l.index);
  o << "  layers: dense " << (dense.empty() ? "none" : ranges(dense));
  if (m.arch == Arch::moe) o << "; MoE " << (moe.empty() ? "none" : ranges(moe));
  o << "\n\n";
}

void counts_section(std::ostringstream& o, const Plan& plan) {
  const auto& c = plan.counts;
  auto line = [&](const char* label, std::int64_t n) {
    o << "  " << pad(label, 22) << pad(format_count(double(n)), 10) << n << "\n";
  };
  o << "Parameters\n";
  line("total", c.total);
  line("embedding", c.embedding);
  line("non-embedding", c.non_embedding);
  if (plan.spec.model.gated_attention != GatedAttention::none) line("gated attention", c.attn_gate);
  if (plan.spec.model.arch == Arch::moe) {
    line("active per token", c.active);
    line("active non-embedding", c.active_non_embedding);
  }
  o << "  (embedding = token embedding + untied LM head; non-embedding includes norm gains)\n\n";
}

void table_section(std::ostringstream& o, const Plan& plan) {
  o << "Parameter table (rows group layers whose tensor has the same shape and rule; σ = init std)\n";
  o << "  " << pad("layers", 8) << pad("tensor", 36) << pad("class", 12) << pad("shape", 16) << pad("fan_in", 8)
    << pad("init", 18) << pad("σ", 20) << pad("lr×", 6) << pad("wd", 6) << "rule\n";
  for (const auto& r : group_rows(plan)) {
    const ParamEntry& p = *r.first;
    std::string init = p.cls == ParamClass::norm ? "ones" : to_string(p.distribution);
    if (p.distribution == Distribution::trunc_normal && p.cls != ParamClass::norm) init += " ±" + format_double(p.cutoff) + "σ";
    std::string sigma = p.cls == ParamClass::norm ? "-"
                        : r.std_min == r.std_max ? sci(r.std_min)
                                                 : sci(r.std_max) + " … " + sci(r.std_min);
    o << "  " << pad(ranges(r.layers), 8) << pad(r.tensor, 36) << pad(class_name(p.cls), 12)
      << pad(shape_text(p.shape), 16) << pad(std::to_string(p.fan_in), 8) << pad(init, 18) << pad(sigma, 20)
      << pad(format_double(p.lr_mult), 6) << pad(format_double(p.weight_decay), 6) << r.rule << "\n";
  }
  o << "\n";
}

void optimizer_section(std::ostringstream& o, const Plan& plan) {
  const auto& op = plan.spec.optim;
  o << "Optimizer: AdamW, lr " << format_double(op.lr) << ", betas (" << format_double(op.beta1) << ", "
    << format_double(op.beta2) << "), eps " << format_double(op.eps) << ", decoupled weight decay "
    << format_double(op.weight_decay) << ", grad clip "
    << (op.grad_clip > 0 ? format_double(op.grad_clip) : std::string("off")) << "\n";
  for (const auto& g : plan.optim_groups) {
    o << "  lr× " << pad(format_double(g.lr_mult), 8) << "wd " << pad(format_double(g.weight_decay), 8)
      << pad(format_count(double(g.n_params)), 10) << pad(std::to_string(g.n_tensors) + " tensors", 14)
      << join_classes(g.classes) << "\n";
  }
  o << "\n";
}

void schedule_section(std::ostringstream& o, const Plan& plan) {
  const auto& s = plan.schedule;
  const auto& t = plan.spec.train;
  const char* decay = to_string(plan.spec.schedule.decay);
  o << "Training: " << s.total_steps << " steps × " << t.global_batch << " sequences × " << t.seq_len << " tokens = "
    << format_count(double(s.total_tokens)) << " tokens; micro-batch " << t.micro_batch << " ("
    << (s.grad_accum == 1 ? std::string("no gradient accumulation")
                          : std::to_string(s.grad_accum) + " accumulation steps")
    << "); " << to_string(t.precision) << "\n";
  o << "  schedule: " << s.warmup_steps << " warm-up steps, then " << decay << " to "
    << format_double(plan.spec.schedule.min_lr_ratio) << " × lr\n";
  const auto& f = plan.flops;
  o << "Compute: " << sci(f.per_token) << " FLOP/token = 6·" << format_count(f.matmul_params) << " (matmul weights) + "
    << sci(f.attention_per_token) << " (attention, 12·L·H·d_h·T); " << sci(f.per_step) << " FLOP/step; "
    << sci(f.per_step * double(s.total_steps)) << " FLOP in all\n";
  const auto& m = plan.memory;
  o << "Memory (model state, one device): weights " << format_bytes(m.weights);
  if (m.master_weights > 0) o << ", fp32 masters " << format_bytes(m.master_weights);
  o << ", gradients " << format_bytes(m.gradients) << ", AdamW moments " << format_bytes(m.optimizer) << " = "
    << format_bytes(m.total) << "\n";
  o << "Memory (CUDA backend, one GPU): model state + activations and scratch for a micro-batch of "
    << plan.spec.train.micro_batch << "×" << plan.spec.train.seq_len << " tokens " << format_bytes(m.activations)
    << " + metrics on the device " << format_bytes(m.metrics_scratch) << " = " << format_bytes(m.device_total())
    << "\n\n";
}

// The CUDA kernels this spec gets (plan/cuda_kernels.hpp): for every GPU architecture the tree is
// built for, and the Hopper kernels a run may pick (train --attention, --experts).
void kernels_section(std::ostringstream& o, const Plan& plan) {
  o << "Kernels (CUDA backend, sm_80 and newer)\n";
  for (const KernelChoice& k : cuda_kernels(plan.spec)) {
    o << "  " << pad(k.op, 13) << k.kernel << "\n" << std::string(15, ' ') << "(" << k.why << ")\n";
  }
  o << "\n";
}

void metrics_section(std::ostringstream& o, const Plan& plan) {
  o << "Metrics";
  if (plan.metrics.empty()) o << ": none";
  o << "\n";
  for (const auto& mp : plan.metrics) {
    o << "  " << pad(mp.name, 20)
      << (mp.name == "initial_loss" ? std::string("at step 0") : "every " + std::to_string(mp.interval) + " steps");
    if (!mp.classes.empty()) o << "; classes " << join_classes(mp.classes);
    if (find_key("metrics." + mp.name + ".layers")) {
      std::vector<int> ls(mp.layers.begin(), mp.layers.end());
      o << "; layers " << ranges(ls);
    }
    o << "\n";
  }
}

}  // namespace

std::string explain_world(const Plan& plan, int world_size) {
  std::ostringstream o;
  const std::int64_t micro = plan.schedule.grad_accum;
  o << "Data parallelism over " << world_size << " ranks (mpirun -np " << world_size << "):\n";
  if (micro % world_size != 0) {
    o << "  error: the " << micro << " micro-batches of a step do not divide among " << world_size
      << " ranks; train would stop before training\n";
    return o.str();
  }
  o << "  " << micro / world_size << " of the step's " << micro << " micro-batches per rank; the global batch is unchanged\n";
  const auto& m = plan.memory;
  const bool zero1 = plan.spec.distributed.zero_stage == 1 && world_size > 1;
  // ZeRO-1 cuts the flat array into consecutive shards of ⌈stored / N⌉ elements (engine/zero.hpp);
  // rank 0 holds a full one. On GPUs the fp32 masters are sharded too, and NCCL's equal blocks
  // pad the working weights and gradients to N shards (engine/cuda_engine.cu).
  const std::int64_t stored = plan.counts.stored;
  const double shard = zero1 ? double((stored + world_size - 1) / world_size) : double(stored);
  const double padded = zero1 ? shard * world_size : double(stored);
  const double weight_bytes = m.weights / double(stored), moments = 8.0 * shard;
  const bool expert_blocks = plan.spec.model.arch == Arch::moe && plan.spec.distributed.expert_parallel > 1;
  const std::string cut = zero1 ? "ZeRO-1: 1/" + std::to_string(world_size) : std::string("replicated");
  const std::string how = expert_blocks ? " (" + cut + " without expert parallelism; with it: below)"
                          : zero1       ? " (" + cut + ")"
                                        : " (replicated; zero_stage = 1 shards them)";
  const double gpu_weights = weight_bytes * padded, gpu_grads = 4.0 * padded;
  const double gpu_masters = m.master_weights > 0 ? 4.0 * shard : 0.0;
  const double gpu_state = gpu_weights + gpu_masters + gpu_grads + moments;
  // The metrics' device scratch, whose update-ratio copy covers rank 0's shard.
  // Under bf16 a ZeRO-1 rank assembles one tensor's masters at a time for the weight metrics.
  const double metrics = estimate_metrics_scratch_bytes(plan.spec, plan.params, 0, std::int64_t(shard)) +
                         (zero1 && m.master_weights > 0 ? estimate_master_gather_bytes(plan.spec, plan.params) : 0.0);
  o << "  per GPU (NCCL): weights " << format_bytes(gpu_weights);
  if (gpu_masters > 0) o << ", fp32 masters " << format_bytes(gpu_masters);
  o << ", gradients " << format_bytes(gpu_grads) << ", AdamW moments " << format_bytes(moments) << how << " = "
    << format_bytes(gpu_state) << "; with activations " << format_bytes(gpu_state + m.activations + metrics) << "\n";
  // The CPU backend holds everything in fp32 and shards the moments only.
  const double cpu_state = 8.0 * double(stored) + moments;
  o << "  per process (CPU backend, MPI): fp32 weights and gradients " << format_bytes(8.0 * double(stored))
    << ", AdamW moments " << format_bytes(moments) << how << " = " << format_bytes(cpu_state) << "\n";
  o << explain_experts(plan, world_size);
  return o.str();
}

std::string explain_text(const Plan& plan) {
  std::ostringstream o;
  const auto& s = plan.spec;
  o << "Experiment " << s.experiment.name << " (" << s.file << "), seed " << s.experiment.seed << "\n";
  if (s.document.chain.size() > 1) {
    std::vector<std::string> bases(s.document.chain.begin() + 1, s.document.chain.end());
    o << "  merged from: " << join(bases, ", ") << "\n";
  }
  o << "\n";
  model_section(o, plan);
  counts_section(o, plan);
  table_section(o, plan);
  optimizer_section(o, plan);
  schedule_section(o, plan);
  kernels_section(o, plan);
  metrics_section(o, plan);
  return o.str();
}

nlohmann::ordered_json explain_json(const Plan& plan) {
  using json = nlohmann::ordered_json;
  const auto& s = plan.spec;
  json j;
  j["gcompile_version"] = kVersion;
  j["experiment"] = {{"name", s.experiment.name}, {"file", s.file}, {"seed", s.experiment.seed},
                     {"description", s.experiment.description}, {"chain", s.document.chain}};
  json layers = json::array();
  for (const auto& l : plan.layers) {
    layers.push_back({{"index", l.index}, {"kind", l.kind == LayerKind::moe ? "moe" : "dense"}, {"d_ff", l.d_ff}});
  }
  j["layers"] = layers;
  json params = json::array();
  for (const auto& p : plan.params) {
    json e = {{"name", p.name},         {"class", class_name(p.cls)}, {"layer", p.layer},   {"shape", p.shape},
              {"numel", p.numel()},     {"fan_in", p.fan_in},         {"fan_out", p.fan_out}};
    if (p.cls == ParamClass::norm) {
      e["init"] = {{"kind", "constant"}, {"value", p.init_value}};
    } else {
      e["init"] = {{"kind", to_string(p.distribution)}, {"std", p.std}, {"effective_std", p.effective_std},
                   {"rule", p.rule}};
      if (p.distribution == Distribution::trunc_normal) e["init"]["cutoff"] = p.cutoff;
    }
    e["lr_mult"] = p.lr_mult;
    e["weight_decay"] = p.weight_decay;
    params.push_back(std::move(e));
  }
  j["params"] = params;
  json groups = json::array();
  for (const auto& g : plan.optim_groups) {
    std::vector<std::string> names;
    for (auto c : g.classes) names.push_back(class_name(c));
    groups.push_back({{"lr_mult", g.lr_mult}, {"weight_decay", g.weight_decay}, {"classes", names},
                      {"tensors", g.n_tensors}, {"params", g.n_params}});
  }
  j["optimizer_groups"] = groups;
  const auto& c = plan.counts;
  j["counts"] = {{"total", c.total},         {"embedding", c.embedding}, {"non_embedding", c.non_embedding},
                 {"attn_gate", c.attn_gate}, {"active", c.active},       {"active_non_embedding", c.active_non_embedding}};
  const auto& f = plan.flops;
  j["flops"] = {{"matmul_params", f.matmul_params}, {"dense_per_token", f.dense_per_token},
                {"attention_per_token", f.attention_per_token}, {"per_token", f.per_token}, {"per_step", f.per_step}};
  const auto& m = plan.memory;
  j["memory_bytes"] = {{"weights", m.weights}, {"master_weights", m.master_weights}, {"gradients", m.gradients},
                       {"activations", m.activations}, {"metrics_scratch", m.metrics_scratch},
                       {"device_total", m.device_total()},
                       {"optimizer", m.optimizer}, {"total", m.total}};
  const auto& sc = plan.schedule;
  j["schedule"] = {{"total_steps", sc.total_steps}, {"warmup_steps", sc.warmup_steps}, {"grad_accum", sc.grad_accum},
                   {"tokens_per_step", sc.tokens_per_step}, {"total_tokens", sc.total_tokens}};
  j["scales"] = {{"width_mult", plan.width_mult}, {"embedding", plan.embedding_scale}, {"attention", plan.attn_scale},
                 {"logits", plan.logit_scale}};
  json metrics = json::array();
  for (const auto& mp : plan.metrics) {
    std::vector<std::string> names;
    for (auto cl : mp.classes) names.push_back(class_name(cl));
    metrics.push_back({{"name", mp.name}, {"interval", mp.interval}, {"classes", names}, {"layers", mp.layers}});
  }
  j["metrics"] = metrics;
  json kernels = json::array();
  for (const KernelChoice& k : cuda_kernels(s)) kernels.push_back({{"op", k.op}, {"kernel", k.kernel}, {"why", k.why}});
  j["cuda_kernels"] = kernels;
  return j;
}

}  // namespace gc
