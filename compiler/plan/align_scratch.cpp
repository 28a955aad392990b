#include "plan/align_scratch.hpp"

#include <algorithm>
#include <vector>

#include "core/kernel_rules.hpp"

namespace gc {
namespace {

// templates/core/kernel_rules.hpp: the tree's own rules
using gc::tree::core::width_is_aligned;

struct Projection {
  std::int64_t rows, in, out;
};

// AlignedLinear::act_elems and grad_elems of one call.
AlignScratch need(const Projection& p) {
  if (p.in <= 0 || p.out <= 0 || (width_is_aligned(p.in) && width_is_aligned(p.out))) return {};
  AlignScratch s;
  s.act_elems = gc::tree::core::aligned_act_elems(p.rows, p.in, p.out);
  s.grad_elems = gc::tree::core::aligned_grad_elems(p.in, p.out);
  return s;
}

}  // namespace

AlignScratch align_scratch(const Spec& spec, std::int64_t head_rows) {
  if (spec.train.precision != Precision::bf16) return {};
  const ModelSpec& m = spec.model;
  const std::int64_t N = std::int64_t(spec.train.micro_batch) * spec.train.seq_len, D = m.d_model;
  const std::int64_t q = std::int64_t(m.n_heads) * m.head_dim, kv = std::int64_t(m.n_kv_heads) * m.head_dim;
  std::vector<Projection> calls = {{N, D, q + 2 * kv}, {N, D, q}, {N, D, kv}, {N, q, D}, {head_rows, D, m.vocab_size}};
  if (m.gated_attention == GatedAttention::headwise) calls.push_back({N, D, m.n_heads});
  if (m.gated_attention == GatedAttention::elementwise) calls.push_back({N, D, q});
  // The router's backward (Backend::router_backward: linear_backward, out = n_experts).
  if (m.arch == Arch::moe) calls.push_back({N, D, spec.moe.n_experts});
  const std::int64_t F = m.arch == Arch::moe ? spec.moe.dense_d_ff : m.d_ff;
  const std::int64_t S = m.arch == Arch::moe ? spec.moe.n_shared_experts * spec.moe.shared_d_ff : 0;
  for (const std::int64_t f : {F, S}) {
    if (f <= 0) continue;
    calls.push_back({N, D, 2 * f});  // gate and up stacked
    calls.push_back({N, D, f});
    calls.push_back({N, f, D});
  }
  AlignScratch most;
  for (const Projection& p : calls) {
    const AlignScratch s = need(p);
    most.act_elems = std::max(most.act_elems, s.act_elems);
    most.grad_elems = std::max(most.grad_elems, s.grad_elems);
  }
  return most;
}

}  // namespace gc
