// `gcompile explain SPEC --world-size W` for a mixture-of-experts spec: the expert-parallel
// layout of distributed.expert_parallel = G (templates/model/expert_parallel.hpp,
// templates/engine/expert_groups.hpp): which experts each rank owns, what the all-to-all and
// the gradient reductions move per step, and the buffers the exchange adds per process.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "common/text.hpp"
#include "explain/explain.hpp"
#include "plan/plan.hpp"

namespace gc {

namespace {

bool is_expert_class(ParamClass c) {
  return c == ParamClass::expert_gate || c == ParamClass::expert_up || c == ParamClass::expert_down;
}

// Rank r of G owns ⌊E/G⌋ experts, the first E mod G one more (expert_block in the templates).
std::string block_sizes(std::int64_t E, std::int64_t G) {
  const std::int64_t base = E / G, extra = E % G;
  if (extra == 0) return std::to_string(base) + " on every rank of a group";
  const std::string first = extra == 1 ? "group rank 0" : "group ranks 0-" + std::to_string(extra - 1);
  return std::to_string(base + 1) + " on " + first + ", " + std::to_string(base) + " on the other " +
         std::to_string(G - extra);
}

// A rank's assignments per micro-batch (micro_batch x seq_len x top_k).
double assignments(const Spec& s) {
  return double(s.train.micro_batch) * double(s.train.seq_len) * double(s.moe.top_k);
}

// The rows one rank sends one group rank's experts under a capacity, 0 without one
// (expert_slot_rows in templates/model/expert_parallel.hpp).
double capacity_slot_rows(const Spec& s, std::int64_t G) {
  const std::int64_t capacity = moe_capacity(s);
  if (capacity <= 0) return 0.0;
  const double local = double((s.moe.n_experts + G - 1) / G);
  return std::min(assignments(s), double(s.train.micro_batch) * double(capacity) * local);
}

// The rows a rank's experts may receive (exchange_capacity_rows in templates/model/expert_parallel.hpp).
double exchange_rows(const Spec& s, std::int64_t G) {
  const double A = assignments(s);
  double C = A * double(G);
  if (moe_capacity(s) > 0) C = double(G) * capacity_slot_rows(s, G);
  if (const double factor = s.distributed.expert_exchange_factor; factor > 0.0) {
    C = std::min(C, std::ceil(factor * A));  // distributed.expert_exchange_factor
  }
  return std::max(A, C);
}

// A slotted route's rows per slot, or 0 when the host plans the route (slotted_route_rows in
// templates/model/expert_parallel.hpp).
double slot_rows(const Spec& s, std::int64_t G) {
  const double slot = capacity_slot_rows(s, G);
  return slot > 0.0 && double(G) * slot <= exchange_rows(s, G) ? slot : 0.0;
}

// The bytes attach_expert_exchange adds to one process (expert_parallel_buffer_bytes in
// templates/model/moe_block.hpp; the CPU backend holds fp32).
double exchange_buffer_bytes(const Plan& plan, std::int64_t G, std::int64_t moe_layers) {
  const auto& s = plan.spec;
  const double A = assignments(s), D = double(s.model.d_model), C = exchange_rows(s, G);
  const double F = double(s.moe.expert_d_ff);
  // + the two permutations (int32) and the owned experts' offsets (int64, E + 1).
  const double per_layer = (C * D + 3 * (C - A) * F) * 4.0 + 2 * C * 4.0 + double(s.moe.n_experts + 1) * 8.0;
  // + the group's offsets a slotted route all-gathers (int64, G · (E + 1)).
  const double scratch = (3 * C * D + 3 * (C - A) * F) * 4.0 + double(G) * double(s.moe.n_experts + 1) * 8.0;
  return double(moe_layers) * per_layer + scratch;
}

// The slots of gradients (and of the layout AdamW's moments are cut from) a rank of group rank 0
// holds under expert parallelism (StateLayout::of_expert_block in templates/model/state_layout.hpp):
// every tensor whole except the expert tensors, of which its block's experts only; each tensor
// aligned as in the flat array.
double expert_block_slots(const Plan& plan, std::int64_t G) {
  const std::int64_t E = plan.spec.moe.n_experts, block = E / G + (E % G > 0 ? 1 : 0);
  double slots = 0.0;
  for (const auto& p : plan.params) {
    const std::int64_t held = is_expert_class(p.cls) ? p.numel() / E * block : p.numel();
    slots += double((held + kTensorAlignElements - 1) / kTensorAlignElements * kTensorAlignElements);
  }
  return slots;
}

// Which bound sizes the exchange buffers (exchange_buffer_bytes' C), in words.
std::string exchange_bound(const Spec& s, std::int64_t G) {
  const double factor = s.distributed.expert_exchange_factor;
  std::string out = " (";
  if (moe_capacity(s) > 0) {
    out += "the capacity bound: " + std::to_string(G) + " x micro_batch x " + std::to_string(moe_capacity(s)) + " x " +
           std::to_string((s.moe.n_experts + G - 1) / G) + " rows per MoE layer, moe.capacity_factor";
    if (factor > 0.0) out += ", or ";
  } else if (!(factor > 0.0)) {
    out += "dropless worst case: " + std::to_string(G) + " x micro_batch x seq_len x top_k rows per MoE layer; "
           "distributed.expert_exchange_factor bounds it";
  }
  if (factor > 0.0) {
    out += format_double(factor) + " x micro_batch x seq_len x top_k rows per MoE layer, "
           "distributed.expert_exchange_factor: a step routed beyond it stops";
  }
  return out + ")";
}

}  // namespace

std::string explain_experts(const Plan& plan, int world_size) {
  const auto& s = plan.spec;
  if (s.model.arch != Arch::moe) return "";
  std::ostringstream o;
  const std::int64_t G = s.distributed.expert_parallel, E = s.moe.n_experts, W = world_size;
  if (G <= 1) {
    o << "Expert parallelism: none (distributed.expert_parallel = 1): every rank holds and computes all " << E
      << " experts of each MoE layer\n";
    return o.str();
  }
  o << "Expert parallelism: groups of " << G << " consecutive ranks (distributed.expert_parallel = " << G << ")";
  if (W % G != 0) {
    o << "\n  error: distributed.expert_parallel = " << G << " does not divide the world of " << W
      << " ranks; train would stop before training\n";
    return o.str();
  }
  o << ", " << W / G << " group" << (W / G == 1 ? "" : "s") << "\n";
  std::int64_t moe_layers = 0;
  for (const auto& l : plan.layers) moe_layers += l.kind == LayerKind::moe ? 1 : 0;
  double expert_params = 0, stored = double(plan.counts.stored);
  for (const auto& p : plan.params) expert_params += is_expert_class(p.cls) ? double(p.numel()) : 0.0;
  o << "  experts per rank: " << block_sizes(E, G) << " (of " << E << " per MoE layer, " << moe_layers
    << " MoE layers)\n";
  // Per token and MoE layer: k rows of d_model fp32 values in each of the 4 exchanges (dispatch
  // and combine in the forward, their mirrors in the backward); with balanced routing (G-1)/G of
  // them leave the rank.
  const double tokens = double(plan.schedule.grad_accum / W) * double(s.train.micro_batch) * double(s.train.seq_len);
  const double per_token_layer = 4.0 * double(s.moe.top_k) * double(s.model.d_model) * 4.0;
  const double leaving = double(G - 1) / double(G);
  // A slotted route sends every group rank a whole slot: G · S rows for the A routed ones.
  const double slot = slot_rows(s, G), padding = slot > 0.0 ? double(G) * slot / assignments(s) : 1.0;
  o << "  all-to-all per step: " << format_bytes(tokens * double(moe_layers) * per_token_layer * leaving * padding)
    << " sent per rank (" << format_bytes(per_token_layer) << " per token and MoE layer over 4 exchanges, "
    << "top_k x d_model x 4 bytes each way, " << G - 1 << "/" << G << " of it to other ranks when routing is balanced";
  if (slot > 0.0) o << "; slotted on GPUs: x" << format_double(std::round(padding * 100.0) / 100.0) << " for the padding of its slots";
  o << ")\n";
  const double block = expert_params / double(G);
  o << "  gradients per step: each rank's expert blocks (" << format_bytes(4.0 * block) << ") all-reduced over the "
    << W / G << (W / G == 1 ? " rank that owns" : " ranks that own") << " the same block";
  if (W / G == 1) o << " (nothing to send)";
  o << "; the other " << format_bytes(4.0 * (stored - expert_params)) << " over all " << W << "\n";
  o << "  memory per process (CPU backend; on GPUs the rows are bf16 under bf16): the exchange buffers +" << format_bytes(exchange_buffer_bytes(plan, G, moe_layers))
    << exchange_bound(s, G) << "\n";
  if (const double slot = slot_rows(s, G); slot > 0.0) {
    o << "  route: slotted, " << G << " slots of " << std::llround(slot) << " rows per MoE layer on GPUs (the capacity's "
      << "bound; the group's offsets all-gathered where the rows lie: no device -> host copy in a step); the CPU "
      << "backend plans it on the host, without padding, unless train --expert-route slotted\n";
  } else {
    o << "  route: planned on the host from each MoE layer's offsets (on GPUs one device -> host copy per MoE layer "
         "and micro-batch; moe.capacity_factor, without a tighter exchange factor, makes it slotted)\n";
  }
  // Each rank keeps the gradients of its own expert block (group rank 0's, the largest, here),
  // and the AdamW moments (on GPUs the fp32 masters too, apart from the working weights even under
  // fp32) of the block, or under ZeRO-1 of its shard over the W/G ranks owning the same block
  // (engine/zero.hpp), where GPUs pad the gradients to equal shards; the working weights are
  // the block's too (fp32 on the CPU backend, in the compute precision on GPUs).
  // planned_weight_bytes and planned_device_bytes in templates/train/trainer_metrics.hpp count the same.
  const double slots = expert_block_slots(plan, G);
  const std::int64_t owners = s.distributed.zero_stage == 1 ? W / G : 1;
  const double shard = std::ceil(slots / double(owners)), padded = owners == 1 ? slots : shard * double(owners);
  const bool bf16 = s.train.precision == Precision::bf16;
  const double cpu = 8.0 * slots + 8.0 * shard, gpu = (bf16 ? 2.0 : 4.0) * slots + 4.0 * padded + 12.0 * shard;
  o << "  model state per process: the weights and gradients are its expert block's ("
    << std::llround(100.0 * slots / stored) << "% of one process's slots), and so are the AdamW moments (and on "
       "GPUs the fp32 masters)";
  if (owners > 1) o << ", of which ZeRO-1 keeps 1/" << owners << " (over the " << owners << " ranks owning the same block)";
  o << ": CPU backend (fp32) " << format_bytes(cpu) << " (one process: " << format_bytes(16.0 * stored) << "); GPU ("
    << (bf16 ? "bf16" : "fp32") << ") " << format_bytes(gpu) << " (one GPU: " << format_bytes(stored * (bf16 ? 18.0 : 16.0))
    << ")\n";
  return o.str();
}

}  // namespace gc
