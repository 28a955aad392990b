// The Backend contract: every type and call that BasicModel (model/model.hpp,
// model_impl.hpp, moe_block.hpp) needs from a backend, in one place, written
// as a backend that does nothing. cpu::Backend<T> (cpu/backend.hpp) and
// cuda::Backend<T> (cuda/backend.cuh) implement it; each call is one kernel
// or one GEMM there. The test tests/model/backend_contract_test.cpp builds
// the whole model against ContractBackend, whose three element types differ
// (Act float, Grad double, Stat long double), so a model call that passes the
// wrong kind of buffer, or a call missing here, does not compile. The test
// sees the branches of the templates' default config (plan.hpp's dense
// model); the feature branches (QK-norm, gates, sandwich norm, MoE) are
// compiled against both real backends by the coverage trees of tests/cuda/specs.
//
// Element types: Act holds activations and working weights (bf16 or fp32 on a
// GPU), Grad parameter gradients (fp32 on a GPU), Stat per-row statistics and
// the router's fp32 arrays (rstd, lse, per-row losses, router logits, scores
// and weights). On the CPU all three are the model's T. Shapes are those of
// the CPU kernels (cpu/*.hpp); N = batch · sequence rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "core/moe_balance.hpp"
#include "profile/step_profile.hpp"
#include "vocabulary.hpp"

namespace gc::tree {

struct ContractBackend {
  using Act = float;
  using Grad = double;
  using Stat = long double;
  template <typename U>
  using Buffer = std::vector<U>;  // data(), size(), empty(); storage the backend's own

  // The step profile's recorder the model's ops report to (null: not profiling).
  profile::Recorder* profiler = nullptr;

  // Storage (static): n zeroed elements; zero; element-wise copy and sum of activations.
  template <typename U>
  static void allocate(Buffer<U>& buf, std::int64_t n) {
    buf.assign(std::size_t(n), U(0));
  }
  template <typename U>
  static void zero(Buffer<U>& buf) {
    std::fill(buf.begin(), buf.end(), U(0));
  }
  // n values between the backend's memory and the host (reads the routing records, checkpoints
  // and aux_loss() make; on a GPU a read waits for it).
  template <typename U>
  static void to_host(U*, const U*, std::int64_t) {}
  template <typename U>
  static void from_host(U*, const U*, std::int64_t) {}
  static void copy(Act*, const Act*, std::int64_t) {}
  static void add(Act*, const Act*, const Act*, std::int64_t) {}
  // acc[0] += Σ α·x, acc[1] += Σ (α·x)², in double, in a fixed order (the logit_std metric).
  static void add_moments(double*, const Act*, std::int64_t, double) {}

  // A batch: sizes the per-batch tables (RoPE); the tokens and targets where the kernels read them.
  void prepare(int /*batch*/, int /*seq_len*/) {}
  const std::int32_t* stage_tokens(const std::int32_t* tokens, int /*N*/) { return tokens; }
  const std::int32_t* stage_targets(const std::int32_t* targets, int /*N*/) { return targets; }

  // y[N, out] = x[N, in] · Wᵀ; backward dx = dy·W (or +=), dW += dyᵀ·x.
  void linear_forward(Act*, const Act*, const Act*, int, int, int) { ++calls.linear; }
  void linear_backward(Act*, Grad*, const Act*, const Act*, const Act*, int, int, int, bool = false) {}
  // RMSNorm with gain g over rows of `dim` (ε = model.norm_eps); add_: h = a + b first.
  void rmsnorm_forward(Act*, Stat*, const Act*, const Act*, std::int64_t, int) {}
  void add_rmsnorm_forward(Act*, Act*, Stat*, const Act*, const Act*, const Act*, std::int64_t, int) {}
  void rmsnorm_backward(Act*, Grad*, const Act*, const Act*, const Act*, const Stat*, std::int64_t, int,
                        bool = false) {}
  // RoPE of `heads` heads per row; the stacked [q; k; v] projection split with RoPE (or v alone).
  void rope_forward(Act*, const Act*, int) {}
  void rope_backward(Act*, const Act*, int) {}
  void qkv_rope_forward(Act*, Act*, Act*, const Act*) {}
  void qkv_rope_backward(Act*, const Act*, const Act*, const Act*) {}
  void qkv_v_forward(Act*, const Act*) {}
  void qkv_v_backward(Act*, const Act*) {}
  // QK-norm over the heads inside the stacked projection's rows (queries or keys).
  void stacked_heads_rmsnorm_forward(Act*, Stat*, const Act*, const Act*, std::int64_t, bool) {}
  void stacked_heads_rmsnorm_backward(Act*, Grad*, const Act*, const Act*, const Act*, const Stat*, std::int64_t,
                                      bool) {}
  // Causal GQA attention: out and the log-sum-exp lse; backward from the saved lse.
  void attention_forward(Act*, Stat*, const Act*, const Act*, const Act*, const AttentionDims&, double) {
    ++calls.attention_forward;
  }
  void attention_backward(Act*, Act*, Act*, const Act*, const Act*, const Stat*, const Act*, const Act*, const Act*,
                          const AttentionDims&, double) {
    ++calls.attention_backward;
  }
  // Gated attention (model.gated_attention, never none here).
  template <GatedAttention kMode>
  void gate_forward(Act*, const Act*, const Act*, std::int64_t) {}
  template <GatedAttention kMode>
  void gate_backward(Act*, Act*, const Act*, const Act*, const Act*, std::int64_t) {}

  // Mixture of experts: router GEMM, top-k routing, a stable counting sort by expert, gather,
  // grouped GEMMs over the experts' rows, combine, and back. Every array here is in the
  // backend's memory, the routing state included (offsets E+1, the bias, the tallies, the
  // balancing losses: core/moe_balance.hpp), so no call waits for the device. Row counts are
  // bounds (N·k assignments): with moe.capacity_factor the rows kept are offsets[E], read where
  // they lie.
  void router_forward(Stat*, const Act*, const Act*, int) {}
  void router_backward(Act*, Grad*, const Stat*, const Act*, const Act*, int) {}
  void moe_route_forward(Stat*, std::int32_t*, Stat*, const Stat*, const float*, int) {}
  // moe.capacity_factor: the assignments kept (expert or -1), the dropped per sequence and
  // expert; position may be set to -1 where dropped here (CUDA) or by moe_dispatch (CPU), which
  // always runs next on the kept experts.
  void moe_apply_capacity(std::int32_t*, std::int32_t*, std::int64_t*, const std::int32_t*, int, int) {}
  void moe_dispatch(std::int32_t*, std::int32_t*, std::int64_t*, const std::int32_t*, int) {}
  void moe_gather(Act*, const Act*, const std::int32_t*, const std::int64_t*, std::int64_t, int) {}
  void moe_combine(Act*, const Act*, const Stat*, const std::int32_t*, int, int, bool) {}
  void moe_combine_backward(Act*, Stat*, const Act*, const Act*, const Stat*, const std::int32_t*,
                            const std::int64_t*, int, std::int64_t, int) {}
  void moe_scatter_add(Act*, const Act*, const std::int32_t*, int, int) {}
  // The balancing losses' P per group of rows and assignments per group; the router's
  // log-sum-exp per row, with *aux += coef · Σ lse² / N (the z-loss).
  void moe_mean_probs(double*, const Stat*, int, int) {}
  void moe_group_counts(std::int64_t*, const std::int32_t*, int, int) {}
  void moe_router_lse(Stat*, const Stat*, int, double*, double) {}
  // core/moe_balance.hpp where the routing lives: count_selected then add_balance_loss; the
  // balancing losses' dL/dp; a step's tally into the window (and aux_free's bias update).
  void moe_record_routing(const core::MoeBalance&, const std::int64_t*, const std::int64_t*, double*, double*,
                          const double*, const std::int64_t*, const double*, double*) {}
  void moe_balance_gradient(const core::MoeBalance&, const double*, const std::int64_t*, double, double*) {}
  void moe_close_step(double*, double*, float*, double) {}
  void moe_route_backward(Stat*, const Stat*, const Stat*, const std::int32_t*, const Stat*, const double*, int,
                          const Stat*, double, int) {}
  // The experts' projections over `experts` experts (W and dW stacked [experts, out, in], their
  // rows' offsets experts + 1 entries): all of them, or a rank's own block under expert parallelism.
  void grouped_linear_forward(Act*, const Act*, const Act*, const std::int64_t*, int, std::int64_t, int, int) {}
  // Expert parallelism (model/expert_parallel.hpp): rows picked by index (the host-planned
  // indices reach the backend through from_host).
  void gather_rows(Act*, const Act*, const std::int32_t*, std::int64_t, int) {}
  // A slotted expert exchange (model/expert_parallel.hpp; core/expert_slots.hpp): pack a rank's
  // rows into G slots, unpack them, and build the permutation and owned offsets on the backend.
  void expert_slots_pack(Act*, const Act*, const std::int64_t*, int, std::int64_t, int) {}
  void expert_slots_unpack(Act*, const Act*, const std::int64_t*, int, std::int64_t, int) {}
  void expert_slots_route(std::int32_t*, std::int32_t*, std::int64_t*, const std::int64_t*, int, std::int64_t, int, int,
                          std::int64_t) {}
  void grouped_linear_backward(Act*, Grad*, const Act*, const Act*, const Act*, const std::int64_t*, int, std::int64_t,
                               int, int, bool = false) {}

  // SwiGLU h = silu(a) ⊙ b, on separate inputs or on one stacked [a | b] row.
  void swiglu_forward(Act*, const Act*, const Act*, std::int64_t) {}
  void swiglu_backward(Act*, Act*, const Act*, const Act*, const Act*, std::int64_t) {}
  void swiglu_pair_forward(Act*, const Act*, std::int64_t, int) {}
  void swiglu_pair_backward(Act*, const Act*, const Act*, std::int64_t, int) {}

  // Embedding lookup (scaled) and its scatter-add backward.
  void embedding_forward(Act*, const std::int32_t*, const Act*, int, int, double) {}
  void embedding_backward(Grad*, const std::int32_t*, const Act*, int, int, double) {}
  // Cross-entropy of `rows` rows of the staged batch (logits scaled by α): per-row losses and
  // p(target); the staged batch's mean over its scored rows; dlogits (divided by those rows).
  void cross_entropy_forward(Stat*, Stat*, const Act*, const std::int32_t*, std::int64_t, int, double) {}
  // The mean plus the n balancing losses at aux (null: none), or 0 while the loss is deferred.
  double mean_loss(const Stat*, std::int64_t, const double*, int) { return 0.0; }
  void cross_entropy_backward(Act*, const Act*, const std::int32_t*, std::int64_t, int, double, double) {}

  // What the contract test counts.
  struct Calls {
    int linear = 0, attention_forward = 0, attention_backward = 0;
  } calls;
};

}  // namespace gc::tree
