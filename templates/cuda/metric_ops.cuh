// The activation metrics on the device (metrics/activation_metrics.hpp add_batch drives them;
// cpu/metric_ops.hpp is the CPU reference). Each statistic is a sum over tokens of a per-token
// value: a first kernel writes one value (or a pair) per row into a scratch array, in double,
// from the model's bf16 or fp32 buffers; a second, one block, adds the rows in a fixed order
// (thread t takes rows t, t + blockDim, …, then the block tree of cuda/common.cuh). No atomics:
// the same batch gives the same bits every time. Only the totals (2-3 doubles, or one per head)
// are copied to the host, through gc::rt::cuda::copy_to_host, which counts them.
//
//   per row r of x[rows, cols]              Σ_c x, Σ_c x²                 moments, RMSNorm factor
//   per token t                              ‖h_t − e_t‖², ‖e_t‖²         residual flow
//   per query (b, h, i)                      exp(α q_i·k_1 − lse_i)       sink score (seed 000 eq. 5)
//   per query (b, h, i)                      lse_i − Σ_j≤i P_ij s_ij      attention entropy
//   per router row                           −Σ_e p ln p                  router entropy (MoE)
//
// Layouts are the backends' (cpu/attention.hpp): q [B, T, H, hd], k [B, T, KV, hd], lse [B, H, T].
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "config.hpp"
#include "cuda/common.cuh"
#include "metrics/activation_stats.hpp"
#include "metrics/device_scratch.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"
#include "vocabulary.hpp"

namespace gc::tree::cuda {

namespace detail {

inline constexpr int kRowWarps = 8;          // rows per block of the per-row kernels (one warp each)
inline constexpr int kReduceThreads = 256;   // the one block that adds the rows
inline constexpr int kEntropyQueries = 64;   // queries per block of the entropy kernel (one thread each)
inline constexpr int kEntropyKeys = 32;      // keys per shared-memory tile

// One warp per row: sums[2r] = Σ_c α·x, sums[2r+1] = Σ_c (α·x)².
template <typename T>
__global__ void row_moments_kernel(double* __restrict__ sums, const T* __restrict__ x, std::int64_t rows, int cols,
                                   double scale) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (row >= rows) return;  // the whole warp: its lanes share the row
  const T* r = x + row * cols;
  double s = 0.0, sq = 0.0;
  for (int c = lane; c < cols; c += kWarp) {
    const double v = scale * double(to_float(r[c]));
    s += v;
    sq += v * v;
  }
  s = warp_sum(s);
  sq = warp_sum(sq);
  if (lane == 0) {
    sums[2 * row] = s;
    sums[2 * row + 1] = sq;
  }
}

// One warp per token: sums[2t] = ‖h_t − e_t‖², sums[2t+1] = ‖e_t‖².
template <typename T>
__global__ void row_flow_kernel(double* __restrict__ sums, const T* __restrict__ h, const T* __restrict__ e,
                                std::int64_t rows, int cols) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (row >= rows) return;
  double diff = 0.0, base = 0.0;
  for (int c = lane; c < cols; c += kWarp) {
    const double ei = double(to_float(e[row * cols + c]));
    const double d = double(to_float(h[row * cols + c])) - ei;
    diff += d * d;
    base += ei * ei;
  }
  diff = warp_sum(diff);
  base = warp_sum(base);
  if (lane == 0) {
    sums[2 * row] = diff;
    sums[2 * row + 1] = base;
  }
}

// What reduce_rows_kernel makes of each row's pair (a, b).
enum class RowTotal {
  moments,      // out = {Σ a, Σ b}
  norm_factor,  // b = Σ x² of a row of `cols`: ms = b / cols; out = {Σ (ms + ε)^-½, Σ_{ms>0} ms^-½, #{ms > 0}}
  flow,         // a = ‖h − e‖², b = ‖e‖²: out = {Σ_{b>0} √(a / b), #{b > 0}}
};

template <RowTotal kTotal>
__global__ void reduce_rows_kernel(double* __restrict__ out, const double* __restrict__ sums, std::int64_t rows,
                                   int cols, double eps) {
  __shared__ double scratch[kWarp];
  double x = 0.0, y = 0.0, z = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const double a = sums[2 * r], b = sums[2 * r + 1];
    if constexpr (kTotal == RowTotal::moments) {
      x += a;
      y += b;
    } else if constexpr (kTotal == RowTotal::norm_factor) {
      const double ms = b / double(cols);
      x += 1.0 / sqrt(ms + eps);
      if (ms > 0.0) {
        y += 1.0 / sqrt(ms);
        z += 1.0;
      }
    } else {
      if (b > 0.0) {
        x += sqrt(a / b);
        z += 1.0;
      }
    }
  }
  x = block_sum(x, scratch);
  y = block_sum(y, scratch);
  z = block_sum(z, scratch);
  if (threadIdx.x == 0) {
    out[0] = x;
    out[1] = y;
    out[2] = z;
  }
}

// One warp per query row (b, i, h), numbered r = (b·T + i)·H + h: the attention weight on the
// first key, exp(α q_i·k_1 − lse_i), written to per_row[h·B·T + b·T + i] (head-major, so that
// each head's values are one run for reduce_heads_kernel).
template <typename T>
__global__ void sink_rows_kernel(double* __restrict__ per_row, const T* __restrict__ q, const T* __restrict__ k,
                                 const float* __restrict__ lse, int batch, int seq_len, int heads, int kv_heads,
                                 int head_dim, double scale) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t r = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  const std::int64_t total = std::int64_t(batch) * seq_len * heads;
  if (r >= total) return;
  const int h = int(r % heads), i = int((r / heads) % seq_len), b = int(r / (std::int64_t(heads) * seq_len));
  const int g = h / (heads / kv_heads);
  const T* qi = q + ((std::int64_t(b) * seq_len + i) * heads + h) * head_dim;
  const T* k0 = k + (std::int64_t(b) * seq_len * kv_heads + g) * head_dim;
  double dot = 0.0;
  for (int c = lane; c < head_dim; c += kWarp) dot += double(to_float(qi[c])) * double(to_float(k0[c]));
  dot = warp_sum(dot);
  if (lane == 0) {
    const double l = double(lse[(std::int64_t(b) * heads + h) * seq_len + i]);
    per_row[std::int64_t(h) * batch * seq_len + std::int64_t(b) * seq_len + i] = exp(scale * dot - l);
  }
}

// One thread per query i of head h in sequence b (grid: query tiles × H × B): its attention
// entropy lse_i − Σ_{j≤i} P_ij s_ij (P_ij = exp(s_ij − lse_i), s_ij = α q_i·k_j), with the keys
// read in tiles of kEntropyKeys rows through shared memory (kEntropyKeys × kHeadDim floats).
// Each dot product is fp32, the sum over keys double.
template <typename T, int kHeadDim>
__global__ void entropy_rows_kernel(double* __restrict__ per_row, const T* __restrict__ q, const T* __restrict__ k,
                                    const float* __restrict__ lse, int batch, int seq_len, int heads, int kv_heads,
                                    double scale) {
  constexpr int head_dim = kHeadDim;
  __shared__ float key_tile[kEntropyKeys * kHeadDim];
  const int h = blockIdx.y, b = blockIdx.z, g = h / (heads / kv_heads);
  const int first = blockIdx.x * kEntropyQueries;
  const int i = first + threadIdx.x;
  const int last = min(first + kEntropyQueries, seq_len) - 1;  // the block's last query reads keys 0 … last
  const T* qi = q + ((std::int64_t(b) * seq_len + min(i, seq_len - 1)) * heads + h) * head_dim;
  float qv[kHeadDim];  // the query, in registers for every key
#pragma unroll
  for (int c = 0; c < head_dim; ++c) qv[c] = to_float(qi[c]);
  const double lse_i = i < seq_len ? double(lse[(std::int64_t(b) * heads + h) * seq_len + i]) : 0.0;
  double expected = 0.0;  // Σ_j P_ij s_ij
  for (int j0 = 0; j0 <= last; j0 += kEntropyKeys) {
    for (int e = threadIdx.x; e < kEntropyKeys * head_dim; e += blockDim.x) {
      const int j = j0 + e / head_dim;
      key_tile[e] = j < seq_len ? to_float(k[((std::int64_t(b) * seq_len + j) * kv_heads + g) * head_dim + e % head_dim])
                                : 0.0f;
    }
    __syncthreads();
    for (int jj = 0; jj < kEntropyKeys && i < seq_len; ++jj) {
      const int j = j0 + jj;
      if (j > i) break;
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < head_dim; ++c) dot = fmaf(qv[c], key_tile[jj * head_dim + c], dot);
      const double s = scale * double(dot);
      expected += exp(s - lse_i) * s;
    }
    __syncthreads();
  }
  if (i < seq_len) per_row[std::int64_t(h) * batch * seq_len + std::int64_t(b) * seq_len + i] = lse_i - expected;
}

// Block h: out[h] = (Σ of head h's `count` values, in a fixed order) / count.
template <typename = void>
__global__ void reduce_heads_kernel(double* __restrict__ out, const double* __restrict__ per_row, std::int64_t count) {
  __shared__ double scratch[kWarp];
  const double* v = per_row + std::int64_t(blockIdx.x) * count;
  double s = 0.0;
  for (std::int64_t r = threadIdx.x; r < count; r += blockDim.x) s += v[r];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s / double(count);
}

// One warp per router row of `experts` scores: sums[2r] = −Σ_e p ln p with p = s / Σ s
// (metrics/activation_stats.hpp router_entropy), sums[2r+1] unused.
template <typename = void>
__global__ void router_entropy_rows_kernel(double* __restrict__ sums, const float* __restrict__ scores,
                                           std::int64_t rows, int experts) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t row = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (row >= rows) return;
  const float* s = scores + row * experts;
  double total = 0.0;
  for (int e = lane; e < experts; e += kWarp) total += double(s[e]);
  total = warp_sum(total);
  double h = 0.0;
  for (int e = lane; e < experts; e += kWarp) {
    const double p = double(s[e]) / total;
    if (p > 0.0) h -= p * log(p);
  }
  h = warp_sum(h);
  if (lane == 0) {
    sums[2 * row] = h;
    sums[2 * row + 1] = 0.0;
  }
}

inline unsigned row_blocks(std::int64_t rows) { return unsigned((rows + kRowWarps - 1) / kRowWarps); }

}  // namespace detail

// The CUDA backend's side of metrics/activation_metrics.hpp (the same member functions as
// cpu::MetricOps), with its scratch: prepare() sizes it for the model's N tokens before
// training (so a measurement allocates nothing on the device).
class MetricOps {
 public:
  // tokens: the model's rows per batch (N); heads: the attention heads (metrics/device_scratch.hpp).
  void prepare(std::int64_t tokens, int heads) {
    const metrics::ActivationScratch size = metrics::ActivationScratch::of(tokens, heads);
    if (std::int64_t(rows_.size()) < size.rows) rows_.resize(std::size_t(size.rows));
    if (std::int64_t(totals_.size()) < size.totals) totals_.resize(std::size_t(size.totals));
  }

  template <typename T>
  void sink_score(double* per_head, const T* q, const T* k, const float* lse, const AttentionDims& d, double scale) {
    const std::int64_t queries = std::int64_t(d.batch) * d.seq_len * d.heads;
    launch(detail::sink_rows_kernel<T>, detail::row_blocks(queries), detail::kRowWarps * kWarp, 0, rows_.data(), q,
           k, lse, d.batch, d.seq_len, d.heads, d.kv_heads, d.head_dim, scale);
    per_head_means(per_head, d);
  }
  template <typename T>
  void attention_entropy(double* per_head, const T* q, const T* k, const float* lse, const AttentionDims& d,
                         double scale) {
    const dim3 grid(unsigned((d.seq_len + detail::kEntropyQueries - 1) / detail::kEntropyQueries), unsigned(d.heads),
                    unsigned(d.batch));
    if (d.head_dim != kHeadDim) {
      throw gc::rt::RuntimeError("attention_entropy: head_dim " + std::to_string(d.head_dim) + " is not the tree's " +
                                 std::to_string(kHeadDim));
    }
    launch(detail::entropy_rows_kernel<T, kHeadDim>, grid, detail::kEntropyQueries, 0, rows_.data(), q, k, lse,
           d.batch, d.seq_len, d.heads, d.kv_heads, scale);
    per_head_means(per_head, d);
  }
  template <typename T>
  void add_moments(metrics::Moments& out, const T* x, std::int64_t n, double scale) {
    // As rows of `cols` values, as many rows as the scratch holds pairs (and a shorter last row).
    const std::int64_t capacity = std::int64_t(rows_.size()) / 2;
    const int cols = int((n + capacity - 1) / capacity);
    const std::int64_t rows = n / cols, tail = n - rows * cols;
    double t[3] = {0.0, 0.0, 0.0};
    row_totals<detail::RowTotal::moments>(t, x, rows, cols, 0.0, scale);
    out.sum += t[0];
    out.sum_sq += t[1];
    if (tail > 0) {
      row_totals<detail::RowTotal::moments>(t, x + rows * cols, 1, int(tail), 0.0, scale);
      out.sum += t[0];
      out.sum_sq += t[1];
    }
    out.count += n;
  }
  template <typename T>
  void add_norm_factor(metrics::NormFactor& out, const T* h, std::int64_t rows, int dim, double eps) {
    double t[3];
    row_totals<detail::RowTotal::norm_factor>(t, h, rows, dim, eps, 1.0);
    add_to(out.factor, t[0], rows);
    add_to(out.eps_free, t[1], std::int64_t(t[2]));
  }
  template <typename T>
  void add_residual_flow(metrics::Mean& out, const T* h_last, const T* e, std::int64_t rows, int dim) {
    launch(detail::row_flow_kernel<T>, detail::row_blocks(rows), detail::kRowWarps * kWarp, 0, rows_.data(), h_last, e,
           rows, dim);
    double t[3];
    reduce<detail::RowTotal::flow>(t, rows, dim, 0.0);
    add_to(out, t[0], std::int64_t(t[2]));
  }
  void read_doubles(double* out, const double* device, int n) {
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    gc::rt::cuda::copy_to_host(out, device, std::size_t(n) * sizeof(double));
  }
  // metrics/activation_stats.hpp router_entropy of scores[rows, experts] on the device.
  double router_entropy(const float* scores, std::int64_t rows, int experts) {
    if (rows <= 0) return 0.0;
    launch(detail::router_entropy_rows_kernel<>, detail::row_blocks(rows), detail::kRowWarps * kWarp, 0, rows_.data(),
           scores, rows, experts);
    double t[3];
    reduce<detail::RowTotal::moments>(t, rows, 1, 0.0);
    return t[0] / double(rows);
  }

 private:
  template <detail::RowTotal kTotal, typename T>
  void row_totals(double* t, const T* x, std::int64_t rows, int cols, double eps, double scale) {
    launch(detail::row_moments_kernel<T>, detail::row_blocks(rows), detail::kRowWarps * kWarp, 0, rows_.data(), x,
           rows, cols, scale);
    reduce<kTotal>(t, rows, cols, eps);
  }
  template <detail::RowTotal kTotal>
  void reduce(double* t, std::int64_t rows, int cols, double eps) {
    launch(detail::reduce_rows_kernel<kTotal>, 1, detail::kReduceThreads, 0, totals_.data(), rows_.data(), rows, cols,
           eps);
    read_doubles(t, totals_.data(), 3);
  }
  void per_head_means(double* per_head, const AttentionDims& d) {
    launch(detail::reduce_heads_kernel<>, unsigned(d.heads), detail::kReduceThreads, 0, totals_.data(), rows_.data(),
           std::int64_t(d.batch) * d.seq_len);
    read_doubles(per_head, totals_.data(), d.heads);
  }
  static void add_to(metrics::Mean& m, double sum, std::int64_t count) {
    m.sum += sum;
    m.count += count;
  }

  gc::rt::cuda::DeviceBuffer<double> rows_;    // one value or pair per row
  gc::rt::cuda::DeviceBuffer<double> totals_;  // the reduction's few numbers
};

}  // namespace gc::tree::cuda
