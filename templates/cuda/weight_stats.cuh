// The weight metrics on the device (metrics/weight_stats.hpp; the host reference is
// HostWeightStats over metrics/matrix_stats.hpp): the fp32 weights are read where they lie, and
// only numbers and block-averaged heatmaps (at most kHeatmapPixels² floats) reach the host.
//
//   ‖W‖_F²        cuda::sum_squares (adamw.cuh: fixed chunking, no atomics)
//   ‖W‖₂          metrics::lanczos_spectral_norm, the CPU's Lanczos loop, with its vector
//                 operations here: the Gram products W(Wᵀq) or Wᵀ(Wq) in double, classical
//                 Gram-Schmidt applied twice against the basis (CGS2: two matrix-vector
//                 products a pass instead of one dot and one update per basis vector), and the
//                 two scalars of a step (q·w, ‖w‖) copied back for the host's tridiagonal solve
//   row cosine    the chosen rows normalized (unit rows, fp32 as the CPU), C = U·Uᵀ by cuBLASLt in
//                 blocks of whole heatmap pixel rows; per row Σ c, Σ |c|, max |c| over j ≠ i, then
//                 a fixed-order sum; the heatmap's pixels averaged from each block on the device
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "cuda/adamw.cuh"
#include "cuda/common.cuh"
#include "metrics/device_scratch.hpp"
#include "metrics/heatmap.hpp"
#include "metrics/matrix_stats.hpp"
#include "metrics/weight_stats.hpp"
#include "plan.hpp"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

namespace detail {

inline constexpr int kVectorThreads = 256;

// y[r] = Σ_c W[r, c] x[c], one warp per row (double).
template <typename = void>
__global__ void matvec_rows_kernel(double* __restrict__ y, const float* __restrict__ W, const double* __restrict__ x,
                                   int rows, int cols) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t r = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (r >= rows) return;
  const float* w = W + r * cols;
  double s = 0.0;
  for (int c = lane; c < cols; c += kWarp) s += double(w[c]) * x[c];
  s = warp_sum(s);
  if (lane == 0) y[r] = s;
}

// y = Wᵀx in two passes, so that a tall matrix keeps the GPU busy: partial[k·cols + c] =
// Σ_{r in chunk k} W[r, c] x[r] (grid: column blocks × row chunks of kColumnChunkRows, one thread
// per column, rows in order: coalesced across the threads), then y[c] = Σ_k partial[k·cols + c]
// in chunk order.
template <typename = void>
__global__ void matvec_cols_partial_kernel(double* __restrict__ partial, const float* __restrict__ W,
                                           const double* __restrict__ x, int rows, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int r0 = int(blockIdx.y) * metrics::kColumnChunkRows;
  const int r1 = min(rows, r0 + metrics::kColumnChunkRows);
  double s = 0.0;
  for (int r = r0; r < r1; ++r) s += double(W[std::int64_t(r) * cols + c]) * x[r];
  partial[std::int64_t(blockIdx.y) * cols + c] = s;
}
template <typename = void>
__global__ void sum_column_chunks_kernel(double* __restrict__ y, const double* __restrict__ partial, int chunks,
                                         int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  double s = 0.0;
  for (int k = 0; k < chunks; ++k) s += partial[std::int64_t(k) * cols + c];
  y[c] = s;
}

// out[j] = basis_j · w for the `count` basis vectors of length n (block j; fixed order).
template <typename = void>
__global__ void basis_dots_kernel(double* __restrict__ out, const double* __restrict__ basis,
                                  const double* __restrict__ w, int n) {
  __shared__ double scratch[kWarp];
  const double* b = basis + std::int64_t(blockIdx.x) * n;
  double s = 0.0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += b[i] * w[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
}

// w[i] −= Σ_j coeff[j] · basis_j[i] (j in order).
template <typename = void>
__global__ void subtract_basis_kernel(double* __restrict__ w, const double* __restrict__ basis,
                                      const double* __restrict__ coeff, int count, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double s = 0.0;
  for (int j = 0; j < count; ++j) s += coeff[j] * basis[std::int64_t(j) * n + i];
  w[i] -= s;
}

template <typename = void>
__global__ void scale_kernel(double* __restrict__ q, const double* __restrict__ w, double inv, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) q[i] = w[i] * inv;
}

// unit[i, :] = W[rows[i], :] / ‖W[rows[i], :]‖₂ (a zero row stays zero), one warp per chosen row.
template <typename = void>
__global__ void unit_rows_kernel(float* __restrict__ unit, const float* __restrict__ W, const int* __restrict__ rows,
                                 int k, int cols) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t i = (blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp;
  if (i >= k) return;
  const float* w = W + std::int64_t(rows[i]) * cols;
  double sq = 0.0;
  for (int c = lane; c < cols; c += kWarp) sq += double(w[c]) * double(w[c]);
  sq = warp_sum(sq);
  const double norm = sqrt(sq), inv = norm > 0.0 ? 1.0 / norm : 0.0;
  for (int c = lane; c < cols; c += kWarp) unit[i * cols + c] = float(double(w[c]) * inv);
}

// C holds rows r0 … r0 + nb − 1 of the k×k cosine matrix. One warp per row i: stats[3i …] =
// Σ_{j≠i} c, Σ_{j≠i} |c|, max_{j≠i} |c|, with c clamped to [−1, 1] (seed 000 eq. 6).
template <typename = void>
__global__ void cosine_row_stats_kernel(double* __restrict__ stats, const float* __restrict__ C, int r0, int nb, int k) {
  const int lane = threadIdx.x % kWarp;
  const int b = int((blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x) / kWarp);
  if (b >= nb) return;
  const int i = r0 + b;
  double sum = 0.0, sum_abs = 0.0, max_abs = 0.0;
  for (int j = lane; j < k; j += kWarp) {
    if (j == i) continue;
    const double c = fmin(fmax(double(C[std::int64_t(b) * k + j]), -1.0), 1.0);
    sum += c;
    sum_abs += fabs(c);
    max_abs = fmax(max_abs, fabs(c));
  }
  sum = warp_sum(sum);
  sum_abs = warp_sum(sum_abs);
  for (int off = kWarp / 2; off > 0; off /= 2) max_abs = fmax(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, off));
  if (lane == 0) {
    stats[3 * std::int64_t(i)] = sum;
    stats[3 * std::int64_t(i) + 1] = sum_abs;
    stats[3 * std::int64_t(i) + 2] = max_abs;
  }
}

// Pixels of heatmap rows y0 … y1 − 1 (side × side for the k×k matrix; metrics/heatmap.hpp's
// bounds) from C's rows r0 = cell(y0) …: the mean of the cells, the diagonal counted as 1, as
// the palette level metrics/heatmap.hpp heatmap_levels gives the CPU's pixel (one byte).
template <typename = void>
__global__ void heatmap_pixels_kernel(std::uint8_t* __restrict__ levels, const float* __restrict__ C, int r0, int y0,
                                      int y1, int k, int side) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = y0 + p / side, x = p % side;
  if (y >= y1) return;
  const int ra = int(std::int64_t(y) * k / side), rb = int(std::int64_t(y + 1) * k / side);
  const int ca = int(std::int64_t(x) * k / side), cb = int(std::int64_t(x + 1) * k / side);
  double sum = 0.0;
  for (int r = ra; r < rb; ++r) {
    for (int c = ca; c < cb; ++c) {
      sum += r == c ? 1.0 : double(fminf(fmaxf(C[std::int64_t(r - r0) * k + c], -1.0f), 1.0f));
    }
  }
  double c = double(float(sum / double((rb - ra) * (cb - ca))));  // the CPU's float pixel
  c = isnan(c) ? 0.0 : fmin(fmax(c, -1.0), 1.0);
  levels[std::int64_t(y) * side + x] = std::uint8_t(lround((c + 1.0) * 0.5 * (metrics::kHeatmapLevels - 1)));
}

struct DoubleMaxOp {
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// out = {Σ_i stats[3i], Σ_i stats[3i+1], max_i stats[3i+2]}, one block, fixed order.
template <typename = void>
__global__ void cosine_totals_kernel(double* __restrict__ out, const double* __restrict__ stats, int k) {
  __shared__ double scratch[kWarp];
  double sum = 0.0, sum_abs = 0.0, max_abs = 0.0;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    sum += stats[3 * std::int64_t(i)];
    sum_abs += stats[3 * std::int64_t(i) + 1];
    max_abs = fmax(max_abs, stats[3 * std::int64_t(i) + 2]);
  }
  sum = block_sum(sum, scratch);
  sum_abs = block_sum(sum_abs, scratch);
  max_abs = block_reduce(max_abs, scratch, 0.0, DoubleMaxOp{});
  if (threadIdx.x == 0) {
    out[0] = sum;
    out[1] = sum_abs;
    out[2] = max_abs;
  }
}

inline unsigned blocks_of(std::int64_t n, int threads) { return unsigned(std::max<std::int64_t>(1, (n + threads - 1) / threads)); }

}  // namespace detail

// metrics/weight_stats.hpp over a device array of fp32 weights in kParams order (kOffsets):
// the master weights, or the fp32 parameters themselves.
class DeviceWeightStats final : public metrics::WeightStats {
 public:
  // Allocates what `sizes` says (metrics/device_scratch.hpp, which the memory plan counts).
  DeviceWeightStats(const metrics::WeightScratch& sizes, gc::rt::cuda::BlasLt& blas) : sizes_(sizes), blas_(blas) {
    if (std::size_t(sizes.norm_doubles()) < sum_squares_scratch_doubles(sizes.max_numel, 1)) {
      throw gc::rt::RuntimeError("metrics/device_scratch.hpp: the Σ x² scratch is smaller than cuda/adamw.cuh needs");
    }
    squares_.resize(std::size_t(sizes.norm_doubles()));
    basis_.resize(std::size_t(metrics::kLanczosSteps * sizes.gram()));
    q_.resize(std::size_t(sizes.gram()));
    w_.resize(std::size_t(sizes.gram()));
    tmp_.resize(std::size_t(sizes.middle()));
    column_partials_.resize(std::size_t(sizes.column_partials()));
    coeff_.resize(std::size_t(metrics::kLanczosSteps));
    scalars_.resize(4);
    row_stats_.resize(std::size_t(3 * sizes.k()));
    row_ids_.resize(std::size_t(sizes.k()));
    unit_.resize(std::size_t(std::max<std::int64_t>(sizes.max_unit, 1)));
    block_.resize(std::size_t(sizes.block_rows()) * std::size_t(sizes.k()));
    levels_.resize(std::size_t(sizes.side() * sizes.side()));
  }
  // The weights to measure next: a device array in kParams order, or a function that returns
  // tensor i whole on this device (ZeRO-1 under bf16 assembles it from the ranks' shards; every
  // rank then runs the same weight metrics in the same order).
  using Gather = std::function<const float*(int tensor)>;
  void bind(const float* weights) {
    weights_ = weights;
    gather_ = nullptr;
  }
  void bind(Gather gather) {
    weights_ = nullptr;
    gather_ = std::move(gather);
  }

  double frobenius_squared(int tensor) override {
    return sum_squares(whole(tensor), kParams[tensor].numel, squares_.data());
  }
  metrics::StableRank stable_rank(int tensor, int matrix) override {
    const ParamInfo& p = kParams[tensor];
    const int rows = metrics::slice_rows(p), cols = metrics::slice_cols(p);
    if (std::min(rows, cols) > sizes_.gram() || std::max(rows, cols) > sizes_.middle()) {
      throw gc::rt::RuntimeError("stable rank of " + std::string(p.name) +
                                 ": the matrix exceeds the metrics scratch planned on the device");
    }
    const float* W = slice(tensor, matrix);
    Lanczos ops(*this, W, rows, cols);
    const metrics::SpectralNorm s = metrics::lanczos_spectral_norm(ops, ops.size(), 1e-10, metrics::kLanczosSteps);
    return metrics::stable_rank_of(s, sum_squares(W, std::int64_t(rows) * cols, squares_.data()));
  }
  metrics::CosineStats row_cosine(int tensor, int matrix, const std::vector<int>& rows,
                                  std::vector<std::uint8_t>* levels) override;

 private:
  // The Gram operator of W on the device, for metrics::lanczos_spectral_norm.
  class Lanczos {
   public:
    Lanczos(DeviceWeightStats& s, const float* W, int rows, int cols)
        : s_(s), W_(W), rows_(rows), cols_(cols), row_gram_(rows < cols), n_(row_gram_ ? rows : cols) {}
    int size() const { return n_; }
    void begin() {
      std::vector<double> start(static_cast<std::size_t>(n_));
      metrics::detail::start_vector(start);
      s_.q_.upload(start.data(), start.size());
      count_ = 0;
    }
    void extend_basis() {
      GC_CUDA_CHECK(cudaMemcpyAsync(s_.basis_.data() + std::int64_t(count_) * n_, s_.q_.data(),
                                    std::size_t(n_) * sizeof(double), cudaMemcpyDeviceToDevice));
      ++count_;
    }
    double apply() {
      const int inner = row_gram_ ? cols_ : rows_;
      if (row_gram_) {  // tmp = Wᵀq (cols), w = W tmp (rows)
        transposed_times(s_.tmp_.data(), s_.q_.data());
        launch(detail::matvec_rows_kernel<>, detail::blocks_of(std::int64_t(rows_) * kWarp, detail::kVectorThreads),
               detail::kVectorThreads, 0, s_.w_.data(), W_, s_.tmp_.data(), rows_, cols_);
      } else {  // tmp = W q (rows), w = Wᵀ tmp (cols)
        launch(detail::matvec_rows_kernel<>, detail::blocks_of(std::int64_t(inner) * kWarp, detail::kVectorThreads),
               detail::kVectorThreads, 0, s_.tmp_.data(), W_, s_.q_.data(), rows_, cols_);
        transposed_times(s_.w_.data(), s_.tmp_.data());
      }
      return dot(s_.q_.data(), s_.w_.data());
    }
    void reorthogonalize() {
      for (int pass = 0; pass < 2; ++pass) {
        launch(detail::basis_dots_kernel<>, unsigned(count_), detail::kVectorThreads, 0, s_.coeff_.data(),
               s_.basis_.data(), s_.w_.data(), n_);
        launch(detail::subtract_basis_kernel<>, detail::blocks_of(n_, detail::kVectorThreads), detail::kVectorThreads, 0,
               s_.w_.data(), s_.basis_.data(), s_.coeff_.data(), count_, n_);
      }
    }
    double norm_w() { return std::sqrt(dot(s_.w_.data(), s_.w_.data())); }
    void advance(double norm) {
      launch(detail::scale_kernel<>, detail::blocks_of(n_, detail::kVectorThreads), detail::kVectorThreads, 0,
             s_.q_.data(), s_.w_.data(), 1.0 / norm, n_);
    }

   private:
    // y[cols] = Wᵀx[rows] (matvec_cols_partial_kernel, then the chunks added in order).
    void transposed_times(double* y, const double* x) {
      const int chunks = (rows_ + metrics::kColumnChunkRows - 1) / metrics::kColumnChunkRows;
      launch(detail::matvec_cols_partial_kernel<>,
             dim3(detail::blocks_of(cols_, detail::kVectorThreads), unsigned(chunks)), detail::kVectorThreads, 0,
             s_.column_partials_.data(), W_, x, rows_, cols_);
      launch(detail::sum_column_chunks_kernel<>, detail::blocks_of(cols_, detail::kVectorThreads),
             detail::kVectorThreads, 0, y, s_.column_partials_.data(), chunks, cols_);
    }
    // a · b over n, by basis_dots_kernel with a as its one "basis vector".
    double dot(const double* a, const double* b) {
      launch(detail::basis_dots_kernel<>, 1, detail::kVectorThreads, 0, s_.scalars_.data(), a, b, n_);
      double out = 0.0;
      gc::rt::cuda::copy_to_host(&out, s_.scalars_.data(), sizeof(double));
      return out;
    }
    DeviceWeightStats& s_;
    const float* W_;
    int rows_, cols_;
    bool row_gram_;
    int n_, count_ = 0;
  };

  const float* whole(int tensor) { return weights_ != nullptr ? weights_ + kOffsets.at[tensor] : gather_(tensor); }
  const float* slice(int tensor, int matrix) {
    const ParamInfo& p = kParams[tensor];
    return whole(tensor) + std::int64_t(matrix) * metrics::slice_rows(p) * metrics::slice_cols(p);
  }

  metrics::WeightScratch sizes_;
  gc::rt::cuda::BlasLt& blas_;
  const float* weights_ = nullptr;
  Gather gather_;
  gc::rt::cuda::DeviceBuffer<double> squares_, basis_, q_, w_, tmp_, column_partials_, coeff_, scalars_, row_stats_;
  gc::rt::cuda::DeviceBuffer<int> row_ids_;
  gc::rt::cuda::DeviceBuffer<float> unit_, block_;
  gc::rt::cuda::DeviceBuffer<std::uint8_t> levels_;
};

inline metrics::CosineStats DeviceWeightStats::row_cosine(int tensor, int matrix, const std::vector<int>& rows,
                                                          std::vector<std::uint8_t>* levels) {
  const int k = int(rows.size()), cols = metrics::slice_cols(kParams[tensor]);
  metrics::CosineStats out;
  out.rows_used = k;
  if (k < 2) return out;
  if (k > sizes_.max_cosine_rows || std::int64_t(k) * cols > sizes_.max_unit) {
    throw gc::rt::RuntimeError("row cosine of " + std::string(kParams[tensor].name) + ": " + std::to_string(k) +
                               " rows exceed the metrics scratch planned on the device");
  }
  row_ids_.upload(rows.data(), rows.size());
  launch(detail::unit_rows_kernel<>, detail::blocks_of(std::int64_t(k) * kWarp, detail::kVectorThreads),
         detail::kVectorThreads, 0, unit_.data(), slice(tensor, matrix), row_ids_.data(), k, cols);
  const int side = std::min(k, metrics::kHeatmapPixels);
  const int per_pixel = (k + side - 1) / side;
  const int pixel_rows = std::max(1, sizes_.block_rows() / per_pixel);
  for (int y0 = 0; y0 < side; y0 += pixel_rows) {
    const int y1 = std::min(side, y0 + pixel_rows);
    const int r0 = metrics::heatmap_cell_begin(y0, k, side), r1 = metrics::heatmap_cell_begin(y1, k, side);
    const int nb = r1 - r0;
    // C[r0 … r1) = U[r0 … r1) · Uᵀ (fp32, as core::blas::gemm on the host).
    blas_.gemm(false, true, nb, k, cols, 1.0f, unit_.data() + std::int64_t(r0) * cols, cols, unit_.data(), cols, 0.0f,
               block_.data(), k, gc::rt::cuda::BlasLt::Shape::varying_rows);
    launch(detail::cosine_row_stats_kernel<>, detail::blocks_of(std::int64_t(nb) * kWarp, detail::kVectorThreads),
           detail::kVectorThreads, 0, row_stats_.data(), block_.data(), r0, nb, k);
    if (levels) {
      launch(detail::heatmap_pixels_kernel<>, detail::blocks_of(std::int64_t(y1 - y0) * side, detail::kVectorThreads),
             detail::kVectorThreads, 0, levels_.data(), block_.data(), r0, y0, y1, k, side);
    }
  }
  launch(detail::cosine_totals_kernel<>, 1, detail::kVectorThreads, 0, scalars_.data(), row_stats_.data(), k);
  double totals[3];
  gc::rt::cuda::copy_to_host(totals, scalars_.data(), sizeof totals);
  const double pairs = double(k) * double(k - 1);
  out.mean = totals[0] / pairs;
  out.mean_abs = totals[1] / pairs;
  out.max_abs = totals[2];
  if (levels) {
    levels->resize(std::size_t(side) * side);
    gc::rt::cuda::copy_to_host(levels->data(), levels_.data(), levels->size());
  }
  return out;
}

}  // namespace gc::tree::cuda
