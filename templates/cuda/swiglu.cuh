// SwiGLU activation on the GPU, the semantics of templates/cpu/swiglu.hpp (Shazeer 2020): with
// a = x·W_gate and b = x·W_up,
//
//   h = silu(a) ⊙ b,            silu(a) = a · σ(a)
//   backward  da = dh ⊙ b ⊙ σ(a) · (1 + a · (1 − σ(a)))      (= dh ⊙ b ⊙ silu'(a))
//             db = dh ⊙ silu(a)
//
// Elementwise over n = N · d_ff values, one thread per element (grid-stride), fp32 math. Each
// thread reads all its inputs before writing, so da and db may alias dh (and h may alias a or b).
#pragma once

#include <cstdint>

#include "common.cuh"

namespace gcm::cuda {

inline constexpr int kSwigluThreads = 256;

// σ(a) = 1 / (1 + e^(−a)); for a → −∞, e^(−a) = inf and σ = 0 (no NaN).
__device__ inline float swiglu_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

template <typename T>
__global__ void swiglu_forward_kernel(T* h, const T* a, const T* b, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float ai = to_float(a[i]);
    const float bi = to_float(b[i]);
    h[i] = from_float<T>(ai * swiglu_sigmoid(ai) * bi);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float ai = to_float(a[i]);
    const float bi = to_float(b[i]);
    const float grad = to_float(dh[i]);
    const float sig = swiglu_sigmoid(ai);
    da[i] = from_float<T>(grad * bi * sig * (1.0f + ai * (1.0f - sig)));
    db[i] = from_float<T>(grad * ai * sig);
  }
}

// h [n] = silu(a) ⊙ b.
template <typename T>
void swiglu_forward(T* h, const T* a, const T* b, std::int64_t n) {
  if (n <= 0) return;
  launch(swiglu_forward_kernel<T>, blocks_for(n, kSwigluThreads), kSwigluThreads, 0, h, a, b, n);
}

// da, db [n] overwritten; either may alias dh.
template <typename T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
  if (n <= 0) return;
  launch(swiglu_backward_kernel<T>, blocks_for(n, kSwigluThreads), kSwigluThreads, 0, da, db, dh, a, b, n);
}

}  // namespace gcm::cuda
