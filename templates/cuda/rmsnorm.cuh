// RMSNorm on the GPU, the semantics of templates/cpu/rmsnorm.hpp (seed 000 eq. 2), one row of
// S::kDim values at a time, with r = (mean(x²) + ε)^(-1/2) saved per row (rstd, fp32):
//
//   forward   y_j  = g_j · x_j · r
//   fused     h = a + b (rounded to T), then y = rmsnorm(h) from the rounded h
//   backward  dx_k = r · g_k · dy_k − (r³ / dim) · x_k · Σ_j g_j · dy_j · x_j
//             dg_j += Σ_rows dy_j · x_j · r
//
// Specialized: a norm shape S (ResidualNorm, QkNorm below, or a test's own) fixes the row width
// S::kDim and ε = S::kEps at compile time, so every loop has a constant trip count, rows are read
// in packs of up to 16 bytes (common.cuh WarpRow), 1/dim is a constant and ε is a literal in the
// kernel. Only the row count varies at run time.
//
// The CPU sums x² in double; here the sum is fp32, and ε is added to mean(x²) unclamped, so
// ε = 1e-12 still matters when mean(x²) is tiny (both are compared at fp32's relative precision).
// QK-norm is the same kernels over head vectors: rows = N · heads, S = QkNorm (dim = head_dim),
// one gain g[head_dim] shared by all heads. With the Q/K/V projections stacked, S =
// QkNormInStack reads x (and writes dx) at each token's heads inside the stacked rows (XRows).
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
#include <type_traits>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gc::tree::cuda {

// ---- the norms of this experiment (gcompile folds the spec's values into these knobs) -------

// Every d_model-wide norm: pre-attention/pre-MLP, sandwich, final and embedding norm.
struct ResidualNorm {
  static constexpr int kDim = gc::knob<int>("model.d_model", 64);
  static constexpr float kEps = gc::knob<float>("model.norm_eps", 1e-5f);
};

// QK-norm: each head vector of q and k, with one gain of head_dim.
struct QkNorm {
  static constexpr int kDim = gc::knob<int>("model.head_dim", 16);
  static constexpr float kEps = gc::knob<float>("model.norm_eps", 1e-5f);
};

// QK-norm over q's (kQueries) or k's heads inside the stacked Q/K/V projection (model_impl.hpp,
// kQkvStacked): x and dx are a token's heads within rows of (heads + 2·kv_heads)·head_dim
// elements; y, dy and rstd stay dense [N · heads(, head_dim)].
struct QkvStack {
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);
  static constexpr int kKvHeads = gc::knob<int>("model.n_kv_heads", 2);
};
template <bool kQueries>
struct QkNormInStack : QkNorm {
  static constexpr std::int64_t kGroupRows = kQueries ? QkvStack::kHeads : QkvStack::kKvHeads;
  static constexpr std::int64_t kGroupStride = std::int64_t(QkvStack::kHeads + 2 * QkvStack::kKvHeads) * QkNorm::kDim;
};

// Where row `row` of x (and dx) starts: S::kDim apart, or, for a shape with kGroupRows and
// kGroupStride (QkNormInStack, a test's own), in groups of kGroupRows rows kGroupStride apart.
template <class S, class = void>
struct XRows {
  __device__ static std::int64_t offset(std::int64_t row) { return row * S::kDim; }
};
template <class S>
struct XRows<S, std::void_t<decltype(S::kGroupRows)>> {
  __device__ static std::int64_t offset(std::int64_t row) {
    return (row / S::kGroupRows) * S::kGroupStride + (row % S::kGroupRows) * S::kDim;
  }
};

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

// Size (in floats) of the dg_scratch buffer rmsnorm_backward<S> needs: slices(rows) · S::kDim.
template <class S>
std::size_t rmsnorm_dg_scratch_floats(std::int64_t rows) {
  return std::size_t(rmsnorm_dg_slices(rows)) * std::size_t(S::kDim);
}

// Blocks for one warp per row; the kernels stride by the number of warps launched.
inline unsigned rmsnorm_row_blocks(std::int64_t rows) { return blocks_for(rows * kWarp, kRmsNormThreads); }

// ---- forward ---------------------------------------------------------------------------------

// r = 1 / sqrt(Σx² / dim + ε), from the warp-wide Σx² (IEEE sqrt and division, no rsqrtf).
template <class S>
__device__ inline float rmsnorm_rstd(float sum_sq) {
  return 1.0f / sqrtf(sum_sq / float(S::kDim) + S::kEps);
}

// Σ x² over the lane's packs of one row.
template <class S, typename T>
__device__ inline float lane_sum_sq(const T* row, int lane) {
  using Row = WarpRow<S::kDim, T>;
  float sum_sq = 0.0f;
#pragma unroll
  for (int step = 0; step < Row::kSteps; ++step) {
    if (!Row::in_row(lane, step)) continue;
    float v[Row::kVec];
    load_pack(v, row + Row::start(lane, step));
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e) sum_sq += v[e] * v[e];
  }
  return sum_sq;
}

// y = g ⊙ h · r over the lane's packs of one row.
template <class S, typename T>
__device__ inline void lane_scale_row(T* y, const T* h, const T* g, float r, int lane) {
  using Row = WarpRow<S::kDim, T>;
#pragma unroll
  for (int step = 0; step < Row::kSteps; ++step) {
    if (!Row::in_row(lane, step)) continue;
    const int j = Row::start(lane, step);
    float hv[Row::kVec], gv[Row::kVec], out[Row::kVec];
    load_pack(hv, h + j);
    load_pack(gv, g + j);
#pragma unroll
    for (int e = 0; e < Row::kVec; ++e) out[e] = gv[e] * hv[e] * r;
    store_pack(y + j, out);
  }
}

// y = g ⊙ x · r. y may alias x (each lane reads its elements before writing them).
template <class S, typename T>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* g, std::int64_t rows) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  // Warp-uniform loop: all 32 lanes take the same rows, so warp_sum sees the whole warp.
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const std::int64_t base = row * S::kDim, x_base = XRows<S>::offset(row);
    const float r = rmsnorm_rstd<S>(warp_sum(lane_sum_sq<S>(x + x_base, lane)));
    lane_scale_row<S>(y + base, x + x_base, g, r, lane);
    if (lane == 0) rstd[row] = r;
  }
}

// h = a + b rounded to T (written), y = rmsnorm(h) from the rounded h: exactly an add followed by
// rmsnorm_forward. h may alias a or b (in-place residual): every element is read and written by
// one lane, and the second pass reads back the lane's own writes of h.
template <class S, typename T>
__global__ void add_rmsnorm_forward_kernel(T* h, T* y, float* rstd, const T* a, const T* b, const T* g,
                                           std::int64_t rows) {
  using Row = WarpRow<S::kDim, T>;
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const std::int64_t base = row * S::kDim;
    float sum_sq = 0.0f;
#pragma unroll
    for (int step = 0; step < Row::kSteps; ++step) {
      if (!Row::in_row(lane, step)) continue;
      const std::int64_t j = base + Row::start(lane, step);
      float av[Row::kVec], bv[Row::kVec], hv[Row::kVec];
      load_pack(av, a + j);
      load_pack(bv, b + j);
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e) hv[e] = to_float(from_float<T>(av[e] + bv[e]));  // h as stored
      store_pack(h + j, hv);
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e) sum_sq += hv[e] * hv[e];
    }
    const float r = rmsnorm_rstd<S>(warp_sum(sum_sq));
    lane_scale_row<S>(y + base, h + base, g, r, lane);
    if (lane == 0) rstd[row] = r;
  }
}

// x [rows, S::kDim], g [S::kDim] → y [rows, S::kDim], rstd [rows] (fp32, for the backward). y may
// alias x.
template <class S, typename T>
void rmsnorm_forward(T* y, float* rstd, const T* x, const T* g, std::int64_t rows) {
  if (rows <= 0) return;
  constexpr int kVec = WarpRow<S::kDim, T>::kVec;
  check_pack_aligned<kVec, T>("rmsnorm_forward", y, x, g);
  launch(rmsnorm_forward_kernel<S, T>, rmsnorm_row_blocks(rows), kRmsNormThreads, 0, y, rstd, x, g, rows);
}

// h = a + b (T), y = rmsnorm(h). h may alias a or b; y must not alias a, b or h.
template <class S, typename T>
void add_rmsnorm_forward(T* h, T* y, float* rstd, const T* a, const T* b, const T* g, std::int64_t rows) {
  if (rows <= 0) return;
  constexpr int kVec = WarpRow<S::kDim, T>::kVec;
  check_pack_aligned<kVec, T>("add_rmsnorm_forward", h, y, a, b, g);
  launch(add_rmsnorm_forward_kernel<S, T>, rmsnorm_row_blocks(rows), kRmsNormThreads, 0, h, y, rstd, a, b, g, rows);
}

// ---- backward --------------------------------------------------------------------------------

// dx = r·g⊙dy − (r³/dim)·x·Σ g⊙dy⊙x, overwritten or (kAccumulate) added to dx. Each element of
// dx is read (when accumulating) and written by the same lane, so dx may be the caller's
// running residual gradient.
template <class S, bool kAccumulate, typename T>
__global__ void rmsnorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const T* g, const float* rstd,
                                           std::int64_t rows) {
  using Row = WarpRow<S::kDim, T>;
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t row = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; row < rows; row += warps) {
    const std::int64_t base = row * S::kDim, x_base = XRows<S>::offset(row);  // dx is laid out as x
    const float r = rstd[row];
    float dot = 0.0f;  // Σ_j g_j dy_j x_j
#pragma unroll
    for (int step = 0; step < Row::kSteps; ++step) {
      if (!Row::in_row(lane, step)) continue;
      const int j = Row::start(lane, step);
      float gv[Row::kVec], dyv[Row::kVec], xv[Row::kVec];
      load_pack(gv, g + j);
      load_pack(dyv, dy + base + j);
      load_pack(xv, x + x_base + j);
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e) dot += gv[e] * dyv[e] * xv[e];
    }
    dot = warp_sum(dot);
    const float c = r * r * r * dot / float(S::kDim);
#pragma unroll
    for (int step = 0; step < Row::kSteps; ++step) {
      if (!Row::in_row(lane, step)) continue;
      const int j = Row::start(lane, step);
      float gv[Row::kVec], dyv[Row::kVec], xv[Row::kVec], out[Row::kVec];
      load_pack(gv, g + j);
      load_pack(dyv, dy + base + j);
      load_pack(xv, x + x_base + j);
      if constexpr (kAccumulate) {
        load_pack(out, dx + x_base + j);
      } else {
#pragma unroll
        for (int e = 0; e < Row::kVec; ++e) out[e] = 0.0f;
      }
#pragma unroll
      for (int e = 0; e < Row::kVec; ++e) {
        const float v = r * gv[e] * dyv[e] - c * xv[e];
        out[e] = kAccumulate ? out[e] + v : v;
      }
      store_pack(dx + x_base + j, out);
    }
  }
}

// dg stage 1. Block (tile, slice), threads (tx < 32 columns, ty < 8 row lanes): lane ty sums rows
// r0+ty, r0+ty+8, … of the slice for column tile·32+tx; the 8 lanes are then added in order
// ty = 0..7. Writes partial[slice][col] for every column < dim, also for an empty slice (0).
template <class S, typename T>
__global__ void rmsnorm_dg_partial_kernel(float* partial, const T* dy, const T* x, const float* rstd,
                                          std::int64_t rows, std::int64_t rows_per_slice) {
  __shared__ float sums[kRmsNormDgRowLanes][kRmsNormDgColumns];
  const int col = int(blockIdx.x) * kRmsNormDgColumns + int(threadIdx.x);
  const std::int64_t slice = blockIdx.y;
  const std::int64_t r0 = slice * rows_per_slice;
  const std::int64_t r1 = r0 + rows_per_slice < rows ? r0 + rows_per_slice : rows;
  float acc = 0.0f;
  if (col < S::kDim) {
    for (std::int64_t r = r0 + threadIdx.y; r < r1; r += kRmsNormDgRowLanes) {
      acc += to_float(dy[r * S::kDim + col]) * to_float(x[XRows<S>::offset(r) + col]) * rstd[r];
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();  // reached by every thread (no early return above)
  if (threadIdx.y == 0 && col < S::kDim) {
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < kRmsNormDgRowLanes; ++k) total += sums[k][threadIdx.x];
    partial[slice * S::kDim + col] = total;
  }
}

// dg stage 2: dg[j] += Σ_{s = 0, 1, …} partial[s][j].
template <class S>
__global__ void rmsnorm_dg_finish_kernel(float* dg, const float* partial, int slices) {
  const int j = int(blockIdx.x) * kRmsNormDgFinishThreads + int(threadIdx.x);
  if (j >= S::kDim) return;
  float total = 0.0f;
  for (int s = 0; s < slices; ++s) total += partial[std::int64_t(s) * S::kDim + j];
  dg[j] += total;
}

// dx [rows, S::kDim] = ∂L/∂x (overwritten, or added when accumulate_dx; dx may then be the
// running residual gradient). dg [S::kDim] (fp32) += Σ_rows dy ⊙ x · r. dg_scratch: device
// buffer of at least rmsnorm_dg_scratch_floats<S>(rows) floats. rstd from the forward. dx must
// not alias dy, x or g.
template <class S, typename T>
void rmsnorm_backward(T* dx, float* dg, float* dg_scratch, const T* dy, const T* x, const T* g, const float* rstd,
                      std::int64_t rows, bool accumulate_dx) {
  if (rows <= 0) return;
  constexpr int kVec = WarpRow<S::kDim, T>::kVec;
  check_pack_aligned<kVec, T>("rmsnorm_backward", dx, dy, x, g);
  // dg first (reads dy and x only), then dx.
  const int slices = rmsnorm_dg_slices(rows);
  const std::int64_t rows_per_slice = (rows + slices - 1) / slices;
  const dim3 tiles(unsigned((S::kDim + kRmsNormDgColumns - 1) / kRmsNormDgColumns), unsigned(slices));
  const dim3 lanes(kRmsNormDgColumns, kRmsNormDgRowLanes);
  launch(rmsnorm_dg_partial_kernel<S, T>, tiles, lanes, 0, dg_scratch, dy, x, rstd, rows, rows_per_slice);
  constexpr unsigned kFinishBlocks = unsigned((S::kDim + kRmsNormDgFinishThreads - 1) / kRmsNormDgFinishThreads);
  launch(rmsnorm_dg_finish_kernel<S>, kFinishBlocks, kRmsNormDgFinishThreads, 0, dg, dg_scratch, slices);

  const unsigned blocks = rmsnorm_row_blocks(rows);
  if (accumulate_dx) {
    launch(rmsnorm_backward_dx_kernel<S, true, T>, blocks, kRmsNormThreads, 0, dx, dy, x, g, rstd, rows);
  } else {
    launch(rmsnorm_backward_dx_kernel<S, false, T>, blocks, kRmsNormThreads, 0, dx, dy, x, g, rstd, rows);
  }
}

}  // namespace gc::tree::cuda
