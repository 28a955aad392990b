// Rotary position embedding on the GPU, the semantics of templates/cpu/rope.hpp (Hugging Face's
// rotate_half pairing): within a head vector of even size hd, dimension i < hd/2 is rotated
// together with i + hd/2 by the angle of position p:
//
//   forward   y_i        = x_i · cos − x_{i+hd/2} · sin
//             y_{i+hd/2} = x_{i+hd/2} · cos + x_i · sin
//   backward  the transpose, i.e. the rotation by −angle:
//             dx_i        = dy_i · cos + dy_{i+hd/2} · sin
//             dx_{i+hd/2} = dy_{i+hd/2} · cos − dy_i · sin
//
// Layout: x [B, seq_len, heads, hd]; the tables cos_t/sin_t are fp32 [seq_len, hd/2], computed on
// the host by gcm::cpu::rope_table<float> and uploaded once. One thread per pair (i, i+hd/2): it
// reads both values before writing either, so out may alias x (in place).
#pragma once

#include <cstdint>

#include "common.cuh"

namespace gcm::cuda {

inline constexpr int kRopeThreads = 256;

// kDirection = +1 rotates by +angle (forward), −1 by −angle (backward). Pair k (grid-stride)
// is dimension i = k mod half of head vector k / half = (b·seq_len + t)·heads + h.
template <int kDirection, typename T>
__global__ void rope_rotate_kernel(T* out, const T* in, const float* cos_t, const float* sin_t, int seq_len,
                                   int heads, int half, std::int64_t pairs) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs; k += stride) {
    const std::int64_t head_vector = k / half;
    const int i = int(k - head_vector * half);
    const std::int64_t position = (head_vector / heads) % seq_len;
    const float c = cos_t[position * half + i];
    const float s = kDirection > 0 ? sin_t[position * half + i] : -sin_t[position * half + i];
    const std::int64_t base = head_vector * (2 * std::int64_t(half));
    const float x1 = to_float(in[base + i]);
    const float x2 = to_float(in[base + i + half]);
    out[base + i] = from_float<T>(x1 * c - x2 * s);
    out[base + i + half] = from_float<T>(x2 * c + x1 * s);
  }
}

template <int kDirection, typename T>
void rope_rotate(T* out, const T* in, const float* cos_t, const float* sin_t, int B, int seq_len, int heads,
                 int head_dim) {
  const int half = head_dim / 2;
  const std::int64_t pairs = std::int64_t(B) * seq_len * heads * half;
  if (pairs <= 0) return;
  launch(rope_rotate_kernel<kDirection, T>, blocks_for(pairs, kRopeThreads), kRopeThreads, 0, out, in, cos_t, sin_t,
         seq_len, heads, half, pairs);
}

// out = R(+angle) · x; x, out [B, seq_len, heads, head_dim] (head_dim even); out may alias x.
template <typename T>
void rope_forward(T* out, const T* x, const float* cos_t, const float* sin_t, int B, int seq_len, int heads,
                  int head_dim) {
  rope_rotate<+1>(out, x, cos_t, sin_t, B, seq_len, heads, head_dim);
}

// dx = R(−angle) · dy; dx may alias dy.
template <typename T>
void rope_backward(T* dx, const T* dy, const float* cos_t, const float* sin_t, int B, int seq_len, int heads,
                   int head_dim) {
  rope_rotate<-1>(dx, dy, cos_t, sin_t, B, seq_len, heads, head_dim);
}

}  // namespace gcm::cuda
