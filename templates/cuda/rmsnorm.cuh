// RMSNorm on the GPU, the semantics of templates/cpu/rmsnorm.hpp (seed 000 eq. 2), one row of
// `dim` values at a time, with r = (mean(x²) + ε)^(-1/2) saved per row (rstd, fp32):
//
//   forward   y_j  = g_j · x_j · r
//   fused     h = a + b (rounded to T), then y = rmsnorm(h) from the rounded h
//   backward  dx_k = r · g_k · dy_k − (r³ / dim) · x_k · Σ_j g_j · dy_j · x_j
//             dg_j += Σ_rows dy_j · x_j · r
//
// The CPU sums x² in double; here the sum is fp32, and ε is added to mean(x²) unclamped, so
// ε = 1e-12 still matters when mean(x²) is tiny (both are compared at fp32's relative precision).
// QK-norm is the same kernels over head vectors: rows = N · heads, dim = head_dim, one gain
// g[head_dim] shared by all heads (rmsnorm_heads_* below).
//
// Layout of the work: forward and dx give one warp to a row (8 rows per 256-thread block,
// warp-stride over rows); the warp's butterfly sum gives every lane the same bits, so the
// results repeat run to run. dg is summed without atomics in two fixed-order stages:
//   stage 1  the rows are cut into `slices` fixed slices; block (column tile, slice) sums its
//            slice's rows for 32 columns into dg_scratch[slice][col]
//   stage 2  one thread per column adds the slices in order 0, 1, … into dg.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common.cuh"

namespace gcm::cuda {

inline constexpr int kRmsNormThreads = 256;  // 8 warps = 8 rows in flight per block

// dg stage 1: a block is 32 columns × 8 row lanes; a slice holds at least 64 rows, and there
// are at most 1024 slices (so the scratch holds at most 1024 · dim floats).
inline constexpr int kRmsNormDgColumns = 32;
inline constexpr int kRmsNormDgRowLanes = 8;
inline constexpr std::int64_t kRmsNormDgMinRowsPerSlice = 64;
inline constexpr std::int64_t kRmsNormDgMaxSlices = 1024;
inline constexpr int kRmsNormDgFinishThreads = 256;

// Number of row slices of the dg reduction: a function of rows only.
inline int rmsnorm_dg_slices(std::int64_t rows) {
  std::int64_t slices = (rows + kRmsNormDgMinRowsPerSlice - 1) / kRmsNormDgMinRowsPerSlice;
  if (slices < 1) slices = 1;
  if (slices > kRmsNormDgMaxSlices) slices = kRmsNormDgMaxSlices;
  return int(slices);
}

// Size (in floats) of the dg_scratch buffer rmsnorm_backward needs: slices(rows) · dim.
inline std::size_t rmsnorm_dg_scratch_floats(std::int64_t rows, int dim) {
  return std::size_t(rmsnorm_dg_slices(rows)) * std::size_t(dim < 0 ? 0 : dim);
}

// Blocks for one warp per row; the kernels stride by the number of warps launched.
inline unsigned rmsnorm_row_blocks(std::int64_t rows) { return blocks_for(rows * kWarp, kRmsNormThreads); }

// ---- forward ---------------------------------------------------------------------------------

// r = 1 / sqrt(Σx² / dim + ε), from the warp-wide Σx² (IEEE sqrt and division, no rsqrtf).
__device__ inline float rmsnorm_rstd(float sum_sq, int dim, float eps) {
  return 1.0f / sqrtf(sum_sq / float(dim) + eps);
}

// y = g ⊙ x · r. y may alias x (each lane reads its elements before writing them).
template <typename T>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* g, std::int64_t rows, int dim,
                                       float eps) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  // Warp-uniform loop: all 32 lanes take the same rows, so warp_sum sees the whole warp.
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    float sum_sq = 0.0f;
    for (int j = lane; j < dim; j += kWarp) {
      const float v = to_float(xr[j]);
      sum_sq += v * v;
    }
    const float r = rmsnorm_rstd(warp_sum(sum_sq), dim, eps);
    for (int j = lane; j < dim; j += kWarp) {
      yr[j] = from_float<T>(to_float(g[j]) * to_float(xr[j]) * r);
    }
    if (lane == 0) rstd[row] = r;
  }
}

// h = a + b rounded to T (written), y = rmsnorm(h) from the rounded h: exactly an add followed by
// rmsnorm_forward. h may alias a or b (in-place residual): every element is read and written by
// one lane, and the second pass reads back the lane's own writes of h.
template <typename T>
__global__ void add_rmsnorm_forward_kernel(T* h, T* y, float* rstd, const T* a, const T* b, const T* g,
                                           std::int64_t rows, int dim, float eps) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const std::int64_t base = row * dim;
    float sum_sq = 0.0f;
    for (int j = lane; j < dim; j += kWarp) {
      const T hv = from_float<T>(to_float(a[base + j]) + to_float(b[base + j]));
      h[base + j] = hv;
      const float v = to_float(hv);
      sum_sq += v * v;
    }
    const float r = rmsnorm_rstd(warp_sum(sum_sq), dim, eps);
    for (int j = lane; j < dim; j += kWarp) {
      y[base + j] = from_float<T>(to_float(g[j]) * to_float(h[base + j]) * r);
    }
    if (lane == 0) rstd[row] = r;
  }
}

// x [rows, dim], g [dim] → y [rows, dim], rstd [rows] (fp32, for the backward). y may alias x.
template <typename T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* g, std::int64_t rows, int dim, float eps) {
  if (rows <= 0 || dim <= 0) return;
  launch(rmsnorm_forward_kernel<T>, rmsnorm_row_blocks(rows), kRmsNormThreads, 0, y, rstd, x, g, rows, dim, eps);
}

// h = a + b (T), y = rmsnorm(h). h may alias a or b; y must not alias a, b or h.
template <typename T>
void add_rmsnorm_forward(T* h, T* y, float* rstd, const T* a, const T* b, const T* g, std::int64_t rows, int dim,
                         float eps) {
  if (rows <= 0 || dim <= 0) return;
  launch(add_rmsnorm_forward_kernel<T>, rmsnorm_row_blocks(rows), kRmsNormThreads, 0, h, y, rstd, a, b, g, rows, dim,
         eps);
}

// ---- backward --------------------------------------------------------------------------------

// dx = r·g⊙dy − (r³/dim)·x·Σ g⊙dy⊙x, overwritten or (kAccumulate) added to dx. Each element of
// dx is read (when accumulating) and written by the same lane, so dx may be the caller's
// running residual gradient.
template <bool kAccumulate, typename T>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* g, const float* rstd,
                                           std::int64_t rows, int dim) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const std::int64_t base = row * dim;
    const float r = rstd[row];
    float dot = 0.0f;  // Σ_j g_j dy_j x_j
    for (int j = lane; j < dim; j += kWarp) {
      dot += to_float(g[j]) * to_float(dy[base + j]) * to_float(x[base + j]);
    }
    dot = warp_sum(dot);
    const float c = r * r * r * dot / float(dim);
    for (int j = lane; j < dim; j += kWarp) {
      const float v = r * to_float(g[j]) * to_float(dy[base + j]) - c * to_float(x[base + j]);
      if constexpr (kAccumulate) {
        dx[base + j] = from_float<T>(to_float(dx[base + j]) + v);
      } else {
        dx[base + j] = from_float<T>(v);
      }
    }
  }
}

// dg stage 1. Block (tile, slice), threads (tx < 32 columns, ty < 8 row lanes): lane ty sums rows
// r0+ty, r0+ty+8, … of the slice for column tile·32+tx; the 8 lanes are then added in order
// ty = 0..7. Writes partial[slice][col] for every column < dim, also for an empty slice (0).
template <typename T>
__global__ void rmsnorm_dg_partial_kernel(float* partial, const T* dy, const T* x, const float* rstd,
                                          std::int64_t rows, int dim, std::int64_t rows_per_slice) {
  __shared__ float sums[kRmsNormDgRowLanes][kRmsNormDgColumns];
  const int col = int(blockIdx.x) * kRmsNormDgColumns + int(threadIdx.x);
  const std::int64_t slice = blockIdx.y;
  const std::int64_t r0 = slice * rows_per_slice;
  const std::int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
  float acc = 0.0f;
  if (col < dim) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRmsNormDgRowLanes) {
      const std::int64_t i = r * dim + col;
      acc += to_float(dy[i]) * to_float(x[i]) * rstd[r];
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();  // reached by every thread (no early return above)
  if (threadIdx.y == 0 && col < dim) {
    float total = 0.0f;
    for (int k = 0; k < kRmsNormDgRowLanes; ++k) total += sums[k][threadIdx.x];
    partial[slice * dim + col] = total;
  }
}

// dg stage 2: dg[j] += Σ_{s = 0, 1, …} partial[s][j]. (Templated on the block size so the
// header defines no non-template kernel.)
template <int kThreads>
__global__ void rmsnorm_dg_finish_kernel(float* dg, const float* partial, int slices, int dim) {
  const int j = int(blockIdx.x) * kThreads + int(threadIdx.x);
  if (j >= dim) return;
  float total = 0.0f;
  for (int s = 0; s < slices; ++s) total += partial[std::int64_t(s) * dim + j];
  dg[j] += total;
}

// dx [rows, dim] = ∂L/∂x (overwritten, or added when accumulate_dx; dx may then be the running
// residual gradient). dg [dim] (fp32) += Σ_rows dy ⊙ x · r. dg_scratch: device buffer of at least
// rmsnorm_dg_scratch_floats(rows, dim) floats. rstd from the forward. dx must not alias dy, x or g.
template <typename T>
void rmsnorm_backward(T* dx, float* dg, float* dg_scratch, const T* dy, const T* x, const T* g, const float* rstd,
                      std::int64_t rows, int dim, bool accumulate_dx) {
  if (rows <= 0 || dim <= 0) return;
  // dg first (reads dy and x only), then dx.
  const int slices = rmsnorm_dg_slices(rows);
  const std::int64_t rows_per_slice = (rows + slices - 1) / slices;
  const dim3 tiles(unsigned((dim + kRmsNormDgColumns - 1) / kRmsNormDgColumns), unsigned(slices));
  const dim3 lanes(kRmsNormDgColumns, kRmsNormDgRowLanes);
  launch(rmsnorm_dg_partial_kernel<T>, tiles, lanes, 0, dg_scratch, dy, x, rstd, rows, dim, rows_per_slice);
  const unsigned finish_blocks = unsigned((dim + kRmsNormDgFinishThreads - 1) / kRmsNormDgFinishThreads);
  launch(rmsnorm_dg_finish_kernel<kRmsNormDgFinishThreads>, finish_blocks, kRmsNormDgFinishThreads, 0, dg, dg_scratch,
         slices, dim);

  const unsigned blocks = rmsnorm_row_blocks(rows);
  if (accumulate_dx) {
    launch(rmsnorm_backward_dx_kernel<true, T>, blocks, kRmsNormThreads, 0, dx, dy, x, g, rstd, rows, dim);
  } else {
    launch(rmsnorm_backward_dx_kernel<false, T>, blocks, kRmsNormThreads, 0, dx, dy, x, g, rstd, rows, dim);
  }
}

// ---- QK-norm: x [N, heads, head_dim], one gain g[head_dim]; rstd [N · heads] ---------------------

template <typename T>
void rmsnorm_heads_forward(T* y, float* rstd, const T* x, const T* g, std::int64_t N, int heads, int head_dim,
                           float eps) {
  rmsnorm_forward(y, rstd, x, g, N * heads, head_dim, eps);
}

// dg_scratch: rmsnorm_dg_scratch_floats(N · heads, head_dim) floats.
template <typename T>
void rmsnorm_heads_backward(T* dx, float* dg, float* dg_scratch, const T* dy, const T* x, const T* g,
                            const float* rstd, std::int64_t N, int heads, int head_dim, bool accumulate_dx) {
  rmsnorm_backward(dx, dg, dg_scratch, dy, x, g, rstd, N * heads, head_dim, accumulate_dx);
}

}  // namespace gcm::cuda
