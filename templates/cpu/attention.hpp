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
// Like FlashAttention, the backward pass recomputes P from lse one row at a time: pass 1 owns
// the query rows (dq), pass 2 owns the key rows of each kv head (dk, dv), so no element is ever
// written by two threads and no T×T matrix is stored. Dot products and sums run in double.
// Allocation: each thread holds one row of T doubles (forward) or two head vectors (backward).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.hpp"

namespace gcm::cpu {

struct AttentionDims {
  int batch;
  int seq_len;
  int heads;
  int kv_heads;
  int head_dim;

  int group() const { return heads / kv_heads; }
  std::int64_t q_offset(int b, int t, int h) const { return ((std::int64_t(b) * seq_len + t) * heads + h) * head_dim; }
  std::int64_t kv_offset(int b, int t, int g) const {
    return ((std::int64_t(b) * seq_len + t) * kv_heads + g) * head_dim;
  }
  std::int64_t lse_index(int b, int h, int t) const { return (std::int64_t(b) * heads + h) * seq_len + t; }

  // Query row r of the [batch, heads, seq_len] order: batch, head, position, and the kv head it reads.
  struct QueryRow {
    int b, h, i, g;
  };
  QueryRow query_row(std::int64_t r) const {
    const int h = int((r / seq_len) % heads);
    return {int(r / (std::int64_t(seq_len) * heads)), h, int(r % seq_len), h / group()};
  }
};

inline double default_attention_scale(int head_dim) { return 1.0 / std::sqrt(double(head_dim)); }

namespace detail {

template <typename A, typename Bv>
double dot(const A* a, const Bv* b, int n) {
  double s = 0.0;
  for (int i = 0; i < n; ++i) {
    s += double(a[i]) * double(b[i]);
  }
  return s;
}

}  // namespace detail

template <typename T>
void attention_forward(T* out, T* lse, const T* q, const T* k, const T* v, const AttentionDims& d, double scale) {
  const int hd = d.head_dim;
  const std::int64_t rows = std::int64_t(d.batch) * d.heads * d.seq_len;
#pragma omp parallel
  {
    double* p = thread_scratch<0>(std::size_t(d.seq_len));
    double* acc = thread_scratch<1>(std::size_t(hd));
#pragma omp for schedule(dynamic, 8)
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto [b, h, i, g] = d.query_row(r);
      const T* qi = q + d.q_offset(b, i, h);
      double max_s = -std::numeric_limits<double>::infinity();
      for (int j = 0; j <= i; ++j) {
        p[j] = scale * detail::dot(qi, k + d.kv_offset(b, j, g), hd);
        max_s = p[j] > max_s ? p[j] : max_s;
      }
      double sum = 0.0;
      for (int j = 0; j <= i; ++j) {
        p[j] = std::exp(p[j] - max_s);
        sum += p[j];
      }
      for (int c = 0; c < hd; ++c) {
        acc[c] = 0.0;
      }
      for (int j = 0; j <= i; ++j) {
        const T* vj = v + d.kv_offset(b, j, g);
        for (int c = 0; c < hd; ++c) {
          acc[c] += p[j] * double(vj[c]);
        }
      }
      T* oi = out + d.q_offset(b, i, h);
      for (int c = 0; c < hd; ++c) {
        oi[c] = T(acc[c] / sum);
      }
      lse[d.lse_index(b, h, i)] = T(max_s + std::log(sum));
    }
  }
}

// Pass 1: dq_i for every query row.
template <typename T>
void attention_backward_dq(T* dq, const T* dout, const T* out, const T* lse, const T* q, const T* k, const T* v,
                           const AttentionDims& d, double scale) {
  const int hd = d.head_dim;
  const std::int64_t rows = std::int64_t(d.batch) * d.heads * d.seq_len;
#pragma omp parallel
  {
    double* acc = thread_scratch<1>(std::size_t(hd));
#pragma omp for schedule(dynamic, 8)
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto [b, h, i, g] = d.query_row(r);
      const T* qi = q + d.q_offset(b, i, h);
      const T* doi = dout + d.q_offset(b, i, h);
      const double lse_i = double(lse[d.lse_index(b, h, i)]);
      const double D_i = detail::dot(doi, out + d.q_offset(b, i, h), hd);
      for (int c = 0; c < hd; ++c) {
        acc[c] = 0.0;
      }
      for (int j = 0; j <= i; ++j) {
        const T* kj = k + d.kv_offset(b, j, g);
        const double P = std::exp(scale * detail::dot(qi, kj, hd) - lse_i);
        const double dS = P * (detail::dot(doi, v + d.kv_offset(b, j, g), hd) - D_i);
        for (int c = 0; c < hd; ++c) {
          acc[c] += dS * double(kj[c]);
        }
      }
      T* dqi = dq + d.q_offset(b, i, h);
      for (int c = 0; c < hd; ++c) {
        dqi[c] = T(scale * acc[c]);
      }
    }
  }
}

// Pass 2: dk_j, dv_j for every key row of every kv head (sums over the group's query heads).
template <typename T>
void attention_backward_dkv(T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k, const T* v,
                            const AttentionDims& d, double scale) {
  const int hd = d.head_dim;
  const std::int64_t rows = std::int64_t(d.batch) * d.kv_heads * d.seq_len;
#pragma omp parallel
  {
    double* acc_k = thread_scratch<1>(std::size_t(hd));
    double* acc_v = thread_scratch<2>(std::size_t(hd));
#pragma omp for schedule(dynamic, 8)
    for (std::int64_t r = 0; r < rows; ++r) {
      const int j = int(r % d.seq_len);
      const int g = int((r / d.seq_len) % d.kv_heads);
      const int b = int(r / (std::int64_t(d.seq_len) * d.kv_heads));
      const T* kj = k + d.kv_offset(b, j, g);
      const T* vj = v + d.kv_offset(b, j, g);
      for (int c = 0; c < hd; ++c) {
        acc_k[c] = 0.0;
        acc_v[c] = 0.0;
      }
      for (int h = g * d.group(); h < (g + 1) * d.group(); ++h) {
        for (int i = j; i < d.seq_len; ++i) {
          const T* qi = q + d.q_offset(b, i, h);
          const T* doi = dout + d.q_offset(b, i, h);
          const T* oi = out + d.q_offset(b, i, h);
          const double P = std::exp(scale * detail::dot(qi, kj, hd) - double(lse[d.lse_index(b, h, i)]));
          double dP_minus_D = 0.0;  // dout_i · (v_j − out_i)
          for (int c = 0; c < hd; ++c) {
            dP_minus_D += double(doi[c]) * (double(vj[c]) - double(oi[c]));
          }
          const double dS = P * dP_minus_D;
          for (int c = 0; c < hd; ++c) {
            acc_v[c] += P * double(doi[c]);
            acc_k[c] += dS * double(qi[c]);
          }
        }
      }
      T* dkj = dk + d.kv_offset(b, j, g);
      T* dvj = dv + d.kv_offset(b, j, g);
      for (int c = 0; c < hd; ++c) {
        dkj[c] = T(scale * acc_k[c]);
        dvj[c] = T(acc_v[c]);
      }
    }
  }
}

// dq, dk, dv are overwritten. `out` and `lse` are the forward's outputs.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const T* lse, const T* q, const T* k,
                        const T* v, const AttentionDims& d, double scale) {
  attention_backward_dq(dq, dout, out, lse, q, k, v, d, scale);
  attention_backward_dkv(dk, dv, dout, out, lse, q, k, v, d, scale);
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

}  // namespace gcm::cpu
