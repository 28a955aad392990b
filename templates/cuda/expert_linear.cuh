// The experts' projections on the CUDA backend (backend.cuh's grouped_linear_forward/backward):
// W stacked [E, out, in], expert e's rows offsets[e] .. offsets[e+1] of the row-major
// activations, the offsets on the device (written there by the dispatch: nothing is copied to the
// host, issue 39), `rows` a bound on offsets[E] that sizes the launch. In bf16, when the shapes
// allow, one grouped launch per projection and direction (cuda/grouped_gemm.cuh); otherwise, and
// in fp32 (the parity path), the plain kernels below, which read the offsets on the device too:
//
//   forward  y[r][o]    = Σ_i x[r][i] · W_e[o][i]          one thread per (r, o), e the row's expert
//   dx       dx[r][i] (+)= Σ_o dy[r][o] · W_e[o][i]        one thread per (r, i)
//   dW       dW_e[o][i] += Σ_{r of e} dy[r][o] · x[r][i]   one thread per (e, o, i), rows ascending
//
// fp32 accumulation in a fixed order (deterministic, no atomics); an expert without rows leaves
// its dW untouched. They are the reference-speed path: the shapes of the specs that train at
// scale take the grouped kernels. On Hopper a run may take the grouped kernels' warpgroup-MMA
// version instead (cuda/grouped_gemm_sm90.cuh; train --experts wgmma, wgmma_experts_chosen), with
// the same contract.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "config.hpp"
#include "core/kernel_rules.hpp"
#include "cuda/common.cuh"
#include "cuda/grouped_gemm.cuh"
#include "cuda/grouped_gemm_sm90.cuh"
#include "cuda/wgmma_choice.cuh"

namespace gc::tree::cuda {

// The expert that owns row r: the e with offsets[e] <= r < offsets[e+1] (binary search over E+1
// ascending offsets; r < offsets[E]).
__device__ __forceinline__ int expert_of_row(const std::int64_t* offsets, int experts, std::int64_t r) {
  int lo = 0, hi = experts;  // offsets[lo] <= r < offsets[hi]
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (offsets[mid] <= r) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <typename T>
__global__ void expert_rows_forward_kernel(T* y, const T* x, const T* W, const std::int64_t* offsets, int experts,
                                           std::int64_t rows, int in, int out) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x, live = offsets[experts];
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * out; i += stride) {
    const std::int64_t r = i / out;
    if (r >= live) return;  // i only grows
    const int o = int(i % out);
    const T* w = W + (std::int64_t(expert_of_row(offsets, experts, r)) * out + o) * in;
    const T* xr = x + r * in;
    float acc = 0.0f;
    for (int k = 0; k < in; ++k) acc += to_float(xr[k]) * to_float(w[k]);
    y[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void expert_rows_dx_kernel(T* dx, const T* dy, const T* W, const std::int64_t* offsets, int experts,
                                      std::int64_t rows, int in, int out, bool accumulate) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x, live = offsets[experts];
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * in; i += stride) {
    const std::int64_t r = i / in;
    if (r >= live) return;
    const int c = int(i % in);
    const T* w = W + std::int64_t(expert_of_row(offsets, experts, r)) * out * in + c;
    const T* g = dy + r * out;
    float acc = accumulate ? to_float(dx[i]) : 0.0f;
    for (int o = 0; o < out; ++o) acc += to_float(g[o]) * to_float(w[std::int64_t(o) * in]);
    dx[i] = from_float<T>(acc);
  }
}

template <typename T>
__global__ void expert_rows_dw_kernel(float* dW, const T* dy, const T* x, const std::int64_t* offsets, int experts,
                                      int in, int out) {
  const std::int64_t n = std::int64_t(experts) * out * in, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int e = int(i / (std::int64_t(out) * in));
    const int o = int(i / in % out), c = int(i % in);
    const std::int64_t begin = offsets[e], end = offsets[e + 1];
    if (begin == end) continue;
    float acc = 0.0f;
    for (std::int64_t r = begin; r < end; ++r) acc += to_float(dy[r * out + o]) * to_float(x[r * in + c]);
    dW[i] += acc;
  }
}

namespace detail {

// Calls f(IN, OUT) as compile-time constants when (in, out) is an expert projection the grouped
// kernels take (bf16, whole 64-column tiles); false otherwise.
template <typename T, typename F>
bool with_grouped_shape(int in, int out, F&& f) {
  if constexpr (kMoe && core::grouped_gemm_takes(std::is_same_v<T, bf16>, kDModel, kExpertDff)) {
    if (in == kDModel && out == kExpertDff) {
      f(std::integral_constant<int, kDModel>{}, std::integral_constant<int, kExpertDff>{});
      return true;
    }
    if (in == kExpertDff && out == kDModel) {
      f(std::integral_constant<int, kExpertDff>{}, std::integral_constant<int, kDModel>{});
      return true;
    }
  }
  (void)in;
  (void)out;
  (void)f;
  return false;
}

inline constexpr int kRowsThreads = 256;

}  // namespace detail

// The plain kernels' launches for `experts` experts (the tree's kExperts; a test's own).
template <typename T>
void expert_rows_forward(T* y, const T* x, const T* W, const std::int64_t* offsets, int experts, std::int64_t rows,
                         int in, int out) {
  if (rows <= 0) return;
  launch(expert_rows_forward_kernel<T>, blocks_for(rows * out, detail::kRowsThreads), detail::kRowsThreads, 0, y, x, W,
         offsets, experts, rows, in, out);
}

template <typename T>
void expert_rows_backward(T* dx, float* dW, const T* dy, const T* x, const T* W, const std::int64_t* offsets,
                          int experts, std::int64_t rows, int in, int out, bool accumulate_dx) {
  if (rows > 0) {
    launch(expert_rows_dx_kernel<T>, blocks_for(rows * in, detail::kRowsThreads), detail::kRowsThreads, 0, dx, dy, W,
           offsets, experts, rows, in, out, accumulate_dx);
  }
  launch(expert_rows_dw_kernel<T>, blocks_for(std::int64_t(experts) * out * in, detail::kRowsThreads),
         detail::kRowsThreads, 0, dW, dy, x, offsets, experts, in, out);
}

// Whether the tree's expert projections fit the wgmma grouped kernels (core/kernel_rules.hpp).
template <typename T>
inline constexpr bool kSm90Experts =
    kMoe && core::sm90_grouped_gemm_takes(std::is_same_v<T, bf16>, kDModel, kExpertDff);

// Whether this process runs the experts' projections on the wgmma grouped kernels, for the choice
// `want` (train --experts; cuda/wgmma_choice.cuh).
template <typename T>
bool wgmma_experts_chosen(core::TensorCoreKernels want) {
  std::string shape;
  if constexpr (!kMoe) {
    shape = "this tree has no experts";
  } else if constexpr (!kSm90Experts<T>) {
    shape = std::string("they take bf16 with d_model and expert_d_ff multiples of 128; this tree computes in ") +
            (std::is_same_v<T, bf16> ? "bf16" : "fp32") + " with d_model " + std::to_string(kDModel) +
            " and expert_d_ff " + std::to_string(kExpertDff);
  }
  return wgmma_chosen(want, "--experts", "expert GEMM", shape, core::kWgmmaExpertsByDefault);
}

// `experts` experts (all kExperts, or a rank's own block under expert parallelism); `wgmma`: on
// the warpgroup-MMA grouped kernels (as wgmma_experts_chosen decided).
template <typename T>
void expert_linear_forward(T* y, const T* x, const T* W, const std::int64_t* offsets, int experts, std::int64_t rows,
                           int in, int out, bool wgmma = false) {
  if (rows <= 0 || experts <= 0) return;
  if (detail::with_grouped_shape<T>(in, out, [&](auto in_c, auto out_c) {
        constexpr int IN = decltype(in_c)::value, OUT = decltype(out_c)::value;
        const std::int64_t tiles = grouped::max_row_tiles(rows, experts);
        if constexpr (kSm90Experts<T>) {
          if (wgmma) return grouped::sm90::forward<IN, OUT>(y, x, W, offsets, experts, tiles);
        }
        grouped::forward<IN, OUT>(y, x, W, offsets, experts, tiles);
      })) {
    return;
  }
  expert_rows_forward(y, x, W, offsets, experts, rows, in, out);
}

template <typename T>
void expert_linear_backward(T* dx, float* dW, const T* dy, const T* x, const T* W, const std::int64_t* offsets,
                            int experts, std::int64_t rows, int in, int out, bool accumulate_dx, bool wgmma = false) {
  if (experts <= 0) return;
  if (detail::with_grouped_shape<T>(in, out, [&](auto in_c, auto out_c) {
        constexpr int IN = decltype(in_c)::value, OUT = decltype(out_c)::value;
        const std::int64_t tiles = grouped::max_row_tiles(rows, experts);
        if constexpr (kSm90Experts<T>) {
          if (wgmma) {
            grouped::sm90::backward_dx<IN, OUT>(dx, dy, W, offsets, experts, tiles, accumulate_dx);
            return grouped::sm90::backward_dw<IN, OUT>(dW, dy, x, offsets, experts);
          }
        }
        grouped::backward<IN, OUT>(dx, dW, dy, x, W, offsets, experts, tiles, accumulate_dx);
      })) {
    return;
  }
  expert_rows_backward(dx, dW, dy, x, W, offsets, experts, rows, in, out, accumulate_dx);
}

}  // namespace gc::tree::cuda
