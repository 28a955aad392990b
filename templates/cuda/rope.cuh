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
//
// Specialized: hd and the number of heads are template arguments (RopeShape below holds the
// spec's head_dim, heads, kv heads and θ), so the pair index arithmetic divides by constants.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gcm::cuda {

// ---- the rotary embedding of this experiment (gcompile folds the spec's values in) ----------
struct RopeShape {
  static constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);      // q is rotated with these
  static constexpr int kKvHeads = gc::knob<int>("model.n_kv_heads", 2);  // k with these
  static constexpr double kTheta = gc::knob<double>("model.rope_theta", 10000.0);  // the host tables' base
};

inline constexpr int kRopeThreads = 256;

// kDirection = +1 rotates by +angle (forward), −1 by −angle (backward). Pair k (grid-stride)
// is dimension i = k mod half of head vector k / half = (b·seq_len + t)·kHeads + h.
template <int kDirection, int kHeadDim, int kHeads, typename T>
__global__ void rope_rotate_kernel(T* out, const T* in, const float* cos_t, const float* sin_t, int seq_len,
                                   std::int64_t pairs) {
  static_assert(kHeadDim > 0 && kHeadDim % 2 == 0, "RoPE needs an even head_dim");
  constexpr int kHalf = kHeadDim / 2;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < pairs; k += stride) {
    const std::int64_t head_vector = k / kHalf;
    const int i = int(k - head_vector * kHalf);
    const std::int64_t position = (head_vector / kHeads) % seq_len;
    const float c = cos_t[position * kHalf + i];
    const float s = kDirection > 0 ? sin_t[position * kHalf + i] : -sin_t[position * kHalf + i];
    const std::int64_t base = head_vector * kHeadDim;
    const float x1 = to_float(in[base + i]);
    const float x2 = to_float(in[base + i + kHalf]);
    out[base + i] = from_float<T>(x1 * c - x2 * s);
    out[base + i + kHalf] = from_float<T>(x2 * c + x1 * s);
  }
}

template <int kDirection, int kHeadDim, int kHeads, typename T>
void rope_rotate(T* out, const T* in, const float* cos_t, const float* sin_t, int B, int seq_len) {
  const std::int64_t pairs = std::int64_t(B) * seq_len * kHeads * (kHeadDim / 2);
  if (pairs <= 0) return;
  launch(rope_rotate_kernel<kDirection, kHeadDim, kHeads, T>, blocks_for(pairs, kRopeThreads), kRopeThreads, 0, out,
         in, cos_t, sin_t, seq_len, pairs);
}

// out = R(+angle) · x; x, out [B, seq_len, kHeads, kHeadDim]; out may alias x.
template <int kHeadDim, int kHeads, typename T>
void rope_forward(T* out, const T* x, const float* cos_t, const float* sin_t, int B, int seq_len) {
  rope_rotate<+1, kHeadDim, kHeads>(out, x, cos_t, sin_t, B, seq_len);
}

// dx = R(−angle) · dy; dx may alias dy.
template <int kHeadDim, int kHeads, typename T>
void rope_backward(T* dx, const T* dy, const float* cos_t, const float* sin_t, int B, int seq_len) {
  rope_rotate<-1, kHeadDim, kHeads>(dx, dy, cos_t, sin_t, B, seq_len);
}

}  // namespace gcm::cuda
