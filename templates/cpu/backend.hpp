// The CPU backend as the model sees it: storage (std::vector) and the kernel
// calls of cpu/*.hpp behind one interface that the CUDA backend
// (cuda/backend.cuh) also implements. model/model_impl.hpp composes the layers
// once, against this interface, so the two backends share every line of the
// model's logic and differ only in their kernels.
//
// Types: Act holds activations and working weights, Grad parameter gradients,
// Stat per-row statistics (rstd, lse). On the CPU all three are T (float for
// training, double for the gradient check).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "core/moe_balance.hpp"
#include "core/moments.hpp"
#include "cpu/attention.hpp"
#include "cpu/cross_entropy.hpp"
#include "cpu/embedding.hpp"
#include "cpu/expert_slots.hpp"
#include "cpu/gate.hpp"
#include "cpu/linear.hpp"
#include "cpu/moe.hpp"
#include "cpu/rmsnorm.hpp"
#include "cpu/rope.hpp"
#include "cpu/swiglu.hpp"
#include "profile/step_profile.hpp"

namespace gc::tree::cpu {

template <typename T>
class Backend {
 public:
  using Act = T;
  using Grad = T;
  using Stat = T;
  template <typename U>
  using Buffer = std::vector<U>;

  // Where the model's ops report when `train --profile` times them (null: not profiling).
  profile::Recorder* profiler = nullptr;

  template <typename U>
  static void allocate(Buffer<U>& buf, std::int64_t n) {
    buf.assign(std::size_t(n), U(0));
  }
  template <typename U>
  static void zero(Buffer<U>& buf) {
    std::fill(buf.begin(), buf.end(), U(0));
  }
  // The host is where this backend's memory lies: plain copies.
  template <typename U>
  static void to_host(U* host, const U* src, std::int64_t n) {
    std::copy(src, src + n, host);
  }
  template <typename U>
  static void from_host(U* dst, const U* host, std::int64_t n) {
    std::copy(host, host + n, dst);
  }
  static void copy(T* dst, const T* src, std::int64_t n) { std::copy(src, src + n, dst); }
  static void add(T* out, const T* a, const T* b, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
  }

  void prepare(int batch, int seq_len) {
    batch_ = batch;
    seq_len_ = seq_len;
    cos_.resize(std::size_t(seq_len) * kHeadDim / 2);
    sin_.resize(cos_.size());
    rope_table(cos_.data(), sin_.data(), seq_len, kHeadDim, kRopeTheta);
  }
  // Tokens and targets stay where they are (host memory).
  const std::int32_t* stage_tokens(const std::int32_t* tokens, int) { return tokens; }
  const std::int32_t* stage_targets(const std::int32_t* targets, int N) {
    scored_ = gc::rt::count_scored(targets, N);
    return targets;
  }

  void linear_forward(T* y, const T* x, const T* W, int N, int in, int out) {
    cpu::linear_forward(y, x, W, nullptr, N, in, out);
  }
  // dx = dy·W (or +=); dW += dy^T·x.
  void linear_backward(T* dx, T* dW, const T* dy, const T* x, const T* W, int N, int in, int out,
                       bool accumulate_dx = false) {
    cpu::linear_backward(dx, dW, nullptr, dy, x, W, N, in, out, accumulate_dx);
  }
  void rmsnorm_forward(T* y, T* rstd, const T* x, const T* g, std::int64_t rows, int dim) {
    cpu::rmsnorm_forward(y, rstd, x, g, rows, dim, kNormEps);
  }
  // h = a + b, y = RMSNorm(h).
  void add_rmsnorm_forward(T* h, T* y, T* rstd, const T* a, const T* b, const T* g, std::int64_t rows, int dim) {
    add(h, a, b, rows * dim);
    cpu::rmsnorm_forward(y, rstd, h, g, rows, dim, kNormEps);
  }
  void rmsnorm_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd, std::int64_t rows, int dim,
                        bool accumulate_dx = false) {
    cpu::rmsnorm_backward(dx, dg, dy, x, g, rstd, rows, dim, accumulate_dx);
  }
  void rope_forward(T* out, const T* x, int heads) {
    cpu::rope_forward(out, x, cos_.data(), sin_.data(), batch_, seq_len_, heads, kHeadDim);
  }
  void rope_backward(T* dx, const T* dy, int heads) {
    cpu::rope_backward(dx, dy, cos_.data(), sin_.data(), batch_, seq_len_, heads, kHeadDim);
  }
  // The stacked Q/K/V projection's row split into RoPE(q), RoPE(k) and v, and the gradients
  // stacked back (cpu/rope.hpp).
  void qkv_rope_forward(T* qr, T* kr, T* v, const T* qkv) {
    cpu::qkv_rope_forward(qr, kr, v, qkv, cos_.data(), sin_.data(), batch_, seq_len_, kHeads, kKvHeads, kHeadDim);
  }
  void qkv_rope_backward(T* dqkv, const T* dqr, const T* dkr, const T* dv) {
    cpu::qkv_rope_backward(dqkv, dqr, dkr, dv, cos_.data(), sin_.data(), batch_, seq_len_, kHeads, kKvHeads, kHeadDim);
  }
  // The QK-norm path of the stacked projection: v out of its rows (and dv back in), and the norm
  // over q's (queries) or k's heads read (and their dx written) inside the rows.
  void qkv_v_forward(T* v, const T* qkv) {
    cpu::qkv_v_forward(v, qkv, std::int64_t(batch_) * seq_len_, kHeads, kKvHeads, kHeadDim);
  }
  void qkv_v_backward(T* dqkv, const T* dv) {
    cpu::qkv_v_backward(dqkv, dv, std::int64_t(batch_) * seq_len_, kHeads, kKvHeads, kHeadDim);
  }
  void stacked_heads_rmsnorm_forward(T* y, T* rstd, const T* x, const T* g, std::int64_t N, bool queries) {
    cpu::rmsnorm_heads_forward(y, rstd, x, g, N, queries ? kHeads : kKvHeads, kHeadDim, kNormEps, kStackedRow);
  }
  void stacked_heads_rmsnorm_backward(T* dx, T* dg, const T* dy, const T* x, const T* g, const T* rstd, std::int64_t N,
                                      bool queries) {
    cpu::rmsnorm_heads_backward(dx, dg, dy, x, g, rstd, N, queries ? kHeads : kKvHeads, kHeadDim, false, kStackedRow);
  }
  void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionDims& d, double scale) {
    cpu::attention_forward(out, lse, q, k, v, d, scale);
  }
  void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                          const T* v, const AttentionDims& d, double scale) {
    cpu::attention_backward(dq, dk, dv, dout, out, lse, q, k, v, d, scale);
  }
  template <GatedAttention kMode>
  void gate_forward(T* out, const T* attn, const T* z, std::int64_t N) {
    cpu::gate_forward<kMode>(out, attn, z, N, kHeads, kHeadDim);
  }
  // dattn may alias dout.
  template <GatedAttention kMode>
  void gate_backward(T* dattn, T* dz, const T* dout, const T* attn, const T* z, std::int64_t N) {
    cpu::gate_backward<kMode>(dattn, dz, dout, attn, z, N, kHeads, kHeadDim);
  }
  // --- mixture of experts (cpu/moe.hpp; the routing bookkeeping core/moe_balance.hpp). The
  // rows the experts compute are offsets[E], read here directly (the model passes N·k bounds).
  static constexpr MoeShape kMoeShape{kExperts, kTopK, kRouterScoring == RouterScoring::sigmoid, kNormTopkProb};
  void router_forward(T* logits, const T* b, const T* W, int N) { linear_forward(logits, b, W, N, kDModel, kExperts); }
  void router_backward(T* db, T* dW, const T* dlogits, const T* b, const T* W, int N) {
    linear_backward(db, dW, dlogits, b, W, N, kDModel, kExperts);
  }
  void moe_route_forward(T* scores, std::int32_t* expert, T* weight, const T* logits, const float* bias, int N) {
    cpu::moe_route_forward(scores, expert, weight, logits, bias, N, kMoeShape);
  }
  // moe.capacity_factor: kept (expert or -1) and the dropped count per sequence and expert. The
  // dropped assignments' position -1 is moe_dispatch's, which runs on `kept` next.
  void moe_apply_capacity(std::int32_t* kept, std::int32_t* /*position*/, std::int64_t* dropped,
                          const std::int32_t* expert, int N, int seq_len) {
    cpu::moe_apply_capacity(kept, dropped, expert, N, seq_len, kExperts, kTopK, kMoeCapacity);
  }
  void moe_dispatch(std::int32_t* order, std::int32_t* position, std::int64_t* offsets, const std::int32_t* expert,
                    int N) {
    cpu::moe_dispatch(order, position, offsets, expert, N, kExperts, kTopK);
  }
  // xs [rows, dim]: the rows each expert computes (N·k, fewer when assignments are dropped).
  void moe_gather(T* xs, const T* x, const std::int32_t* order, const std::int64_t* offsets, std::int64_t /*bound*/,
                  int dim) {
    cpu::moe_gather(xs, x, order, offsets[kExperts], dim, kTopK);
  }
  // dst[p] = src[rows[p]] for p < n (expert parallelism: received rows to expert-major and back).
  void gather_rows(T* dst, const T* src, const std::int32_t* rows, std::int64_t n, int dim) {
    cpu::moe_gather(dst, src, rows, n, dim, 1);
  }
  // A slotted exchange's pack, unpack and permutation (cpu/expert_slots.hpp).
  void expert_slots_pack(T* slots, const T* rows, const std::int64_t* offsets, int G, std::int64_t S, int dim) {
    cpu::expert_slots_pack(slots, rows, offsets, G, S, dim, kExperts);
  }
  void expert_slots_unpack(T* rows, const T* slots, const std::int64_t* offsets, int G, std::int64_t S, int dim) {
    cpu::expert_slots_unpack(rows, slots, offsets, G, S, dim, kExperts);
  }
  void expert_slots_route(std::int32_t* perm, std::int32_t* unperm, std::int64_t* local_offsets,
                          const std::int64_t* all_offsets, int G, std::int64_t S, int lo, int hi, std::int64_t C) {
    cpu::expert_slots_route(perm, unperm, local_offsets, all_offsets, G, S, {lo, hi}, C, kExperts);
  }
  void moe_combine(T* out, const T* ys, const T* weight, const std::int32_t* position, int N, int dim,
                   bool accumulate) {
    cpu::moe_combine(out, ys, weight, position, N, dim, kTopK, accumulate);
  }
  void moe_combine_backward(T* dys, T* dweight, const T* dout, const T* ys, const T* weight,
                            const std::int32_t* order, const std::int64_t* offsets, int N, std::int64_t /*bound*/,
                            int dim) {
    cpu::moe_combine_backward(dys, dweight, dout, ys, weight, order, offsets[kExperts], std::int64_t(N) * kTopK, dim,
                              kTopK);
  }
  void moe_scatter_add(T* dx, const T* dxs, const std::int32_t* position, int N, int dim) {
    cpu::moe_scatter_add(dx, dxs, position, N, dim, kTopK);
  }
  void moe_mean_probs(double* mean_prob, const T* scores, int N, int group_rows) {
    cpu::moe_mean_probs(mean_prob, scores, N, group_rows, kMoeShape);
  }
  void moe_group_counts(std::int64_t* counts, const std::int32_t* expert, int N, int group_rows) {
    cpu::moe_group_counts(counts, expert, N, group_rows, kExperts, kTopK);
  }
  void moe_router_lse(T* lse, const T* logits, int N, double* aux, double coef) {
    *aux += coef * cpu::moe_router_lse(lse, logits, N, kExperts) / double(N);
  }
  void moe_record_routing(const core::MoeBalance& b, const std::int64_t* offsets, const std::int64_t* dropped,
                          double* selected, double* step_tally, const double* mean_prob, const std::int64_t* seq_counts,
                          const double* seq_mean_prob, double* aux) {
    core::count_selected(b, offsets, dropped, selected, step_tally);
    core::add_balance_loss(b, selected, mean_prob, seq_counts, seq_mean_prob, aux);
  }
  void moe_balance_gradient(const core::MoeBalance& b, const double* selected, const std::int64_t* seq_counts,
                            double loss_scale, double* aux_grad) {
    core::balance_gradient(b, selected, seq_counts, loss_scale, aux_grad);
  }
  void moe_close_step(double* step_tally, double* window_tally, float* bias, double rate) {
    core::close_step(kExperts, step_tally, window_tally, bias, rate);
  }
  void moe_route_backward(T* dlogits, const T* dweight, const T* scores, const std::int32_t* expert, const T* weight,
                          const double* aux_grad, int aux_group_rows, const T* lse, double z_scale, int N) {
    cpu::moe_route_backward(dlogits, dweight, scores, expert, weight, aux_grad, aux_group_rows, lse, z_scale, N,
                            kMoeShape);
  }
  // Expert e < experts: y[rows of e] = x[rows of e] · W_eᵀ, W stacked [experts, out, in]. One
  // expert per OpenMP thread (each GEMM single-threaded inside: no nesting).
  void grouped_linear_forward(T* y, const T* x, const T* W, const std::int64_t* offsets, int experts,
                              std::int64_t /*bound*/, int in, int out) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < experts; ++e) {
      const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
      if (rows == 0) continue;
      cpu::linear_forward(y + begin * out, x + begin * in, W + std::int64_t(e) * out * in, nullptr, int(rows), in, out);
    }
  }
  // dx = dy·W_e per expert's rows (or +=); dW_e += dyᵀ·x.
  void grouped_linear_backward(T* dx, T* dW, const T* dy, const T* x, const T* W, const std::int64_t* offsets,
                               int experts, std::int64_t /*bound*/, int in, int out, bool accumulate_dx = false) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int e = 0; e < experts; ++e) {
      const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
      if (rows == 0) continue;
      const std::int64_t w = std::int64_t(e) * out * in;
      cpu::linear_backward(dx + begin * in, dW + w, nullptr, dy + begin * out, x + begin * in, W + w, int(rows), in,
                           out, accumulate_dx);
    }
  }

  void swiglu_forward(T* h, const T* a, const T* b, std::int64_t n) { cpu::swiglu_forward(h, a, b, n); }
  void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
    cpu::swiglu_backward(da, db, dh, a, b, n);
  }
  void swiglu_pair_forward(T* h, const T* ab, std::int64_t rows, int width) {
    cpu::swiglu_pair_forward(h, ab, rows, width);
  }
  void swiglu_pair_backward(T* dab, const T* dh, const T* ab, std::int64_t rows, int width) {
    cpu::swiglu_pair_backward(dab, dh, ab, rows, width);
  }
  void embedding_forward(T* out, const std::int32_t* tokens, const T* E, int N, int d, double scale) {
    cpu::embedding_forward(out, tokens, E, N, d, T(scale));
  }
  void embedding_backward(T* dE, const std::int32_t* tokens, const T* dout, int N, int d, double scale) {
    cpu::embedding_backward(dE, tokens, dout, N, d, T(scale));
  }
  // Per-row losses and p(target) of `rows` rows (a chunk of the staged batch).
  // The chunk's log-sum-exps are kept for its backward, which training runs right after on the
  // same logits (BasicModel::head_forward): the backward then skips recomputing them.
  void cross_entropy_forward(T* losses, T* p_target, const T* logits, const std::int32_t* targets, std::int64_t rows,
                             int V, double alpha) {
    if (chunk_lse_.size() < std::size_t(rows)) chunk_lse_.resize(std::size_t(rows));
    cpu::cross_entropy_rows(losses, p_target, logits, targets, rows, V, alpha, chunk_lse_.data());
    lse_of_ = {logits, targets, rows, alpha};
  }
  // The staged batch's mean loss: Σ losses (serial, in double) over its scored rows.
  // The mean cross-entropy plus the n balancing losses at aux (summed in layer order).
  double mean_loss(const T* losses, std::int64_t N, const double* aux, int n) const {
    double balancing = 0.0;
    for (int i = 0; i < n; ++i) balancing += aux[i];
    return cpu::mean_scored_loss(losses, N, scored_) + balancing;
  }
  // dlogits of `rows` rows of the staged batch (divided by its scored rows, not the chunk's).
  void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t rows, int V,
                              double alpha, double loss_scale) {
    const bool same = lse_of_.logits == logits && lse_of_.targets == targets && lse_of_.rows == rows &&
                      lse_of_.alpha == alpha;
    cpu::cross_entropy_backward(dlogits, logits, targets, rows, V, alpha, loss_scale, scored_,
                                same ? chunk_lse_.data() : nullptr);
    lse_of_ = {};
  }
  // acc[0] += Σ α·x, acc[1] += Σ (α·x)² (serial, in double: the same sums for any thread count).
  static void add_moments(double* acc, const T* x, std::int64_t n, double alpha) {
    core::add_scaled_moments(acc, x, n, alpha);
  }

 private:
  // Elements of a row of the stacked Q/K/V projection.
  static constexpr std::int64_t kStackedRow = std::int64_t(kHeads + 2 * kKvHeads) * kHeadDim;

  int batch_ = 0, seq_len_ = 0;
  std::int64_t scored_ = 0;  // scored rows of the staged batch
  struct LseKey {            // the logits chunk_lse_ belongs to (cross_entropy_forward's last call)
    const T* logits = nullptr;
    const std::int32_t* targets = nullptr;
    std::int64_t rows = -1;
    double alpha = 0.0;
  };
  std::vector<double> chunk_lse_;
  LseKey lse_of_;
  std::vector<T> cos_, sin_;
};

}  // namespace gc::tree::cpu
