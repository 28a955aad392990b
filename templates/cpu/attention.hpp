// Causal scaled-dot-product attention with grouped-query heads (GQA), plus the attention
// metrics that need only q, k and the saved log-sum-exp.
//
// Shapes: q, out [B, T, H, hd];  k, v [B, T, KV, hd];  lse [B, H, T].  Query head h reads kv
// head h / (H / KV). For query i of head h (keys j ≤ i, scale usually 1/sqrt(hd)):
//
//   forward   s_ij = scale · q_i·k_j,   lse_i = log Σ_j exp(s_ij),   P_ij = exp(s_ij − lse_i)
//             out_i = Σ_j P_ij · v_j
//   backward  dP_ij = dout_i·v_j,   D_i = dout_i·out_i = Σ_j P_ij dP_ij,   dS_ij = P_ij (dP_ij − D_i)
//             dq_i = scale Σ_j dS_ij k_j,   dk_j = scale Σ_{h,i} dS_ij q_i,   dv_j = Σ_{h,i} P_ij dout_i
//             (the dk/dv sums run over every query head h that shares the kv head)
//   sink score (seed 000 eq. 5)  S_h = (1/T) Σ_i P_i0 = (1/T) Σ_i exp(s_i0 − lse_i)
//   entropy                      H_i = −Σ_j P_ij log P_ij = lse_i − Σ_j P_ij s_ij
//
// Blocked, as GEMMs over the causal half: one task per (sequence, head) in the forward and per
// (sequence, kv head) in the backward, each on its own thread with single-threaded BLAS calls,
// so no element is written by two threads and the result does not depend on the thread count.
// Row blocks of kBlock queries multiply only the keys at or before their last row (the masked
// half is never computed). The forward keeps P in a per-thread T×T tile; the backward recomputes
// P once per head from the saved lse (S = scale·QKᵀ, P = exp(S − lse)), then dP = dO·Vᵀ,
// dS = P∘(dP − D), dQ = scale·dS·K, dK += scale·dSᵀ·Q and dV += Pᵀ·dO over the group's query
// heads in head order. GEMMs run in T; the softmax's max, its sum and D_i run in double.
// Allocation: each thread holds two T×T tiles of T (once sized, never again).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.hpp"
#include "core/blas.hpp"
#include "vocabulary.hpp"
#include "exp.hpp"
#include "linear.hpp"

namespace gc::tree::cpu {

inline double default_attention_scale(int head_dim) { return 1.0 / std::sqrt(double(head_dim)); }

namespace detail {

template <typename A, typename Bv>
double dot(const A* a, const Bv* b, int n) {  // in double, in index order
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += double(a[i]) * double(b[i]);
  }
  return s;
}

inline constexpr int kAttentionBlock = 64;  // query rows per GEMM block

// Rows [r0, r1) of S = scale · Q Kᵀ, columns [0, r1) (the causal half, by row block) into the
// tile s (row stride T). q and k point at row 0 of one head (strides ldq, ldk).
template <typename T>
void causal_scores(T* s, const T* q, int ldq, const T* k, int ldk, int T_len, int hd, double scale) {
  for (int r0 = 0; r0 < T_len; r0 += kAttentionBlock) {
    const int r1 = std::min(T_len, r0 + kAttentionBlock);
    core::blas::gemm_serial(false, true, r1 - r0, r1, hd, T(scale), q + std::int64_t(r0) * ldq, ldq, k, ldk, T(0),
                      s + std::int64_t(r0) * T_len, T_len);
  }
}

// Row i of the tile becomes exp(S_ij − shift) for j ≤ i (the loop vectorizes) and 0 after.
template <typename T>
void exp_row(T* p, int i, int T_len, double shift) {
  for (int j = 0; j <= i; ++j) p[j] = T(exp_fixed(double(p[j]) - shift));
  for (int j = i + 1; j < T_len; ++j) p[j] = T(0);
}

// Row i of the tile becomes the softmax P_i (max-subtracted; the sum in double, in order);
// returns the row's log-sum-exp.
template <typename T>
double softmax_row(T* p, int i, int T_len) {
  double max_s = -std::numeric_limits<double>::infinity();
  for (int j = 0; j <= i; ++j) max_s = double(p[j]) > max_s ? double(p[j]) : max_s;
  exp_row(p, i, T_len, max_s);
  double sum = 0.0;
  for (int j = 0; j <= i; ++j) sum += double(p[j]);
  const T inv = T(1.0 / sum);
  for (int j = 0; j <= i; ++j) p[j] *= inv;
  return max_s + std::log(sum);
}

}  // namespace detail

template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionDims& d, double scale) {
  const int hd = d.head_dim, T_len = d.seq_len, ldq = d.heads * hd, ldk = d.kv_heads * hd;
  const int tasks = d.batch * d.heads;
#pragma omp parallel
  {
    T* p = thread_scratch_of<T, 0>(std::size_t(T_len) * T_len);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / d.heads, h = task % d.heads, g = h / d.group();
      const T* qh = q + d.q_offset(b, 0, h);
      const T* kg = k + d.kv_offset(b, 0, g);
      detail::causal_scores(p, qh, ldq, kg, ldk, T_len, hd, scale);
      for (int i = 0; i < T_len; ++i) {
        lse[d.lse_index(b, h, i)] = T(detail::softmax_row(p + std::int64_t(i) * T_len, i, T_len));
      }
      // out[r0:r1] = P[r0:r1, 0:r1] · V[0:r1]
      for (int r0 = 0; r0 < T_len; r0 += detail::kAttentionBlock) {
        const int r1 = std::min(T_len, r0 + detail::kAttentionBlock);
        core::blas::gemm_serial(false, false, r1 - r0, hd, r1, T(1), p + std::int64_t(r0) * T_len, T_len,
                          v + d.kv_offset(b, 0, g), ldk, T(0), out + d.q_offset(b, r0, h), ldq);
      }
    }
  }
}

// dq, dk, dv are overwritten. `out` and `lse` are the forward's outputs.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, const AttentionDims& d, double scale) {
  const int hd = d.head_dim, T_len = d.seq_len, ldq = d.heads * hd, ldk = d.kv_heads * hd;
  const int tasks = d.batch * d.kv_heads;
  constexpr int B = detail::kAttentionBlock;
#pragma omp parallel
  {
    T* p = thread_scratch_of<T, 0>(std::size_t(T_len) * T_len);
    T* ds = thread_scratch_of<T, 1>(std::size_t(T_len) * T_len);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < tasks; ++task) {
      const int b = task / d.kv_heads, g = task % d.kv_heads;
      const T* kg = k + d.kv_offset(b, 0, g);
      const T* vg = v + d.kv_offset(b, 0, g);
      T* dkg = dk + d.kv_offset(b, 0, g);
      T* dvg = dv + d.kv_offset(b, 0, g);
      for (int h = g * d.group(); h < (g + 1) * d.group(); ++h) {
        const T* qh = q + d.q_offset(b, 0, h);
        const T* doh = dout + d.q_offset(b, 0, h);
        const T first = h == g * d.group() ? T(0) : T(1);  // beta: the group's first head overwrites dk, dv
        detail::causal_scores(p, qh, ldq, kg, ldk, T_len, hd, scale);
        // dP = dO · Vᵀ over the causal half, into ds
        for (int r0 = 0; r0 < T_len; r0 += B) {
          const int r1 = std::min(T_len, r0 + B);
          core::blas::gemm_serial(false, true, r1 - r0, r1, hd, T(1), doh + std::int64_t(r0) * ldq, ldq, vg, ldk, T(0),
                            ds + std::int64_t(r0) * T_len, T_len);
        }
        for (int i = 0; i < T_len; ++i) {
          T* pi = p + std::int64_t(i) * T_len;
          T* dsi = ds + std::int64_t(i) * T_len;
          detail::exp_row(pi, i, T_len, double(lse[d.lse_index(b, h, i)]));  // P_i from the saved lse
          const double D_i = detail::dot(doh + std::int64_t(i) * ldq, out + d.q_offset(b, i, h), hd);
          for (int j = 0; j <= i; ++j) dsi[j] = T(double(pi[j]) * (double(dsi[j]) - D_i));
          for (int j = i + 1; j < T_len; ++j) dsi[j] = T(0);
        }
        // dQ[r0:r1] = scale · dS[r0:r1, 0:r1] · K[0:r1]
        for (int r0 = 0; r0 < T_len; r0 += B) {
          const int r1 = std::min(T_len, r0 + B);
          core::blas::gemm_serial(false, false, r1 - r0, hd, r1, T(scale), ds + std::int64_t(r0) * T_len, T_len, kg, ldk,
                            T(0), dq + d.q_offset(b, r0, h), ldq);
        }
        // dK[c0:c1] (+)= scale · dS[c0:T, c0:c1]ᵀ · Q[c0:T];  dV[c0:c1] (+)= P[c0:T, c0:c1]ᵀ · dO[c0:T]
        for (int c0 = 0; c0 < T_len; c0 += B) {
          const int c1 = std::min(T_len, c0 + B);
          const std::int64_t tile = std::int64_t(c0) * T_len + c0;
          core::blas::gemm_serial(true, false, c1 - c0, hd, T_len - c0, T(scale), ds + tile, T_len,
                            qh + std::int64_t(c0) * ldq, ldq, first, dkg + std::int64_t(c0) * ldk, ldk);
          core::blas::gemm_serial(true, false, c1 - c0, hd, T_len - c0, T(1), p + tile, T_len, doh + std::int64_t(c0) * ldq,
                            ldq, first, dvg + std::int64_t(c0) * ldk, ldk);
        }
      }
    }
  }
}

// Seed 000 eq. 5: per-head sink score averaged over the batch's sequences. sink[H].
// Query 0 attends only to key 0, so its term is 1.
template <typename T>
void sink_score(double* sink, const T* q, const T* k, const T* lse, const AttentionDims& d, double scale) {
#pragma omp parallel for
  for (int h = 0; h < d.heads; ++h) {
    const int g = h / d.group();
    double total = 0.0;
    for (int b = 0; b < d.batch; ++b) {
      const T* k0 = k + d.kv_offset(b, 0, g);
      for (int i = 0; i < d.seq_len; ++i) {
        const double s = scale * detail::dot(q + d.q_offset(b, i, h), k0, d.head_dim);
        total += std::exp(s - double(lse[d.lse_index(b, h, i)]));
      }
    }
    sink[h] = total / (double(d.batch) * d.seq_len);
  }
}

// Mean entropy (nats) of each head's attention rows, over queries and sequences. entropy[H].
template <typename T>
void attention_entropy(double* entropy, const T* q, const T* k, const T* lse, const AttentionDims& d, double scale) {
#pragma omp parallel for
  for (int h = 0; h < d.heads; ++h) {
    const int g = h / d.group();
    double total = 0.0;
    for (int b = 0; b < d.batch; ++b) {
      for (int i = 0; i < d.seq_len; ++i) {
        const T* qi = q + d.q_offset(b, i, h);
        const double lse_i = double(lse[d.lse_index(b, h, i)]);
        double expected_s = 0.0;  // Σ_j P_ij s_ij
        for (int j = 0; j <= i; ++j) {
          const double s = scale * detail::dot(qi, k + d.kv_offset(b, j, g), d.head_dim);
          expected_s += std::exp(s - lse_i) * s;
        }
        total += lse_i - expected_s;
      }
    }
    entropy[h] = total / (double(d.batch) * d.seq_len);
  }
}

}  // namespace gc::tree::cpu
