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
// the host by gc::tree::rope_table<float> and uploaded once. One thread per kVec consecutive pairs
// (i .. i+kVec−1 with their partners i+hd/2 ..), read and written in packs of up to 16 bytes of T
// (the widest that divides hd/2); it reads all its values before writing any, so out may alias
// x (in place).
//
// Specialized: hd and the number of heads are template arguments (RopeShape below holds the
// spec's head_dim, heads, kv heads and θ), so the pair index arithmetic divides by constants.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gc::tree::cuda {

// ---- the rotary embedding of this experiment (gcompile folds the spec's values in) ----------
struct RopeShape {
  static constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);      // q is rotated with these
  static constexpr int kKvHeads = gc::knob<int>("model.n_kv_heads", 2);  // k with these
  static constexpr double kTheta = gc::knob<double>("model.rope_theta", 10000.0);  // the host tables' base
};

inline constexpr int kRopeThreads = 256;

// Pairs each thread rotates (consecutive dimensions, one pack of T per half).
template <int kHeadDim, typename T>
inline constexpr int kRopeVec = row_pack<T>(kHeadDim / 2);

// kDirection = +1 rotates by +angle (forward), −1 by −angle (backward). Pack k (grid-stride)
// holds dimensions i .. i+kVec−1, i = kVec·(k mod half/kVec), of head vector
// k / (half/kVec) = (b·seq_len + t)·kHeads + h.
template <int kDirection, int kHeadDim, int kHeads, typename T>
__global__ void rope_rotate_kernel(T* out, const T* in, const float* cos_t, const float* sin_t, int seq_len,
                                   std::int64_t packs) {
  static_assert(kHeadDim > 0 && kHeadDim % 2 == 0, "RoPE needs an even head_dim");
  constexpr int kHalf = kHeadDim / 2, kVec = kRopeVec<kHeadDim, T>, kPacksPerHalf = kHalf / kVec;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < packs; k += stride) {
    const std::int64_t head_vector = k / kPacksPerHalf;
    const int i = int(k - head_vector * kPacksPerHalf) * kVec;
    const std::int64_t position = (head_vector / kHeads) % seq_len;
    const std::int64_t base = head_vector * kHeadDim;
    float c[kVec], s[kVec], x1[kVec], x2[kVec], y1[kVec], y2[kVec];
    load_pack<kVec>(c, cos_t + position * kHalf + i);
    load_pack<kVec>(s, sin_t + position * kHalf + i);
    load_pack<kVec>(x1, in + base + i);
    load_pack<kVec>(x2, in + base + i + kHalf);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float sn = kDirection > 0 ? s[e] : -s[e];
      y1[e] = x1[e] * c[e] - x2[e] * sn;
      y2[e] = x2[e] * c[e] + x1[e] * sn;
    }
    store_pack<kVec>(out + base + i, y1);
    store_pack<kVec>(out + base + i + kHalf, y2);
  }
}

template <int kDirection, int kHeadDim, int kHeads, typename T>
void rope_rotate(T* out, const T* in, const float* cos_t, const float* sin_t, int B, int seq_len) {
  constexpr int kVec = kRopeVec<kHeadDim, T>;
  const std::int64_t packs = std::int64_t(B) * seq_len * kHeads * (kHeadDim / 2 / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("rope", out, in);
  check_pack_aligned<kVec, float>("rope tables", cos_t, sin_t);
  launch(rope_rotate_kernel<kDirection, kHeadDim, kHeads, T>, blocks_for(packs, kRopeThreads), kRopeThreads, 0, out,
         in, cos_t, sin_t, seq_len, packs);
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

// ---- the stacked Q/K/V projection ----------------------------------------------------------
// One GEMM writes each token's row as kHeads + 2·kKvHeads head vectors (q's, k's, v's:
// model_impl.hpp, detail::kQkvStacked). The forward splits a row into RoPE(q), RoPE(k) and v; the
// backward stacks R(−angle)·dqr, R(−angle)·dkr and dv back into a row, so the input gradient is
// one GEMM as well. Head vector j of token n lies at (n·(kHeads + 2·kKvHeads) + j)·hd in the
// stacked buffer and in q (j < kHeads), k or v at its own row's place; v is copied unrotated.
// Pack k (grid-stride) covers dimensions i .. i+kVec−1 (and their partners at + hd/2) of head
// vector k / (hd/2/kVec), as in rope_rotate_kernel.
template <int kHeadDim, int kHeads, int kKvHeads>
struct QkvRow {
  static constexpr int kHeadVectors = kHeads + 2 * kKvHeads;
  // The offset of stacked head vector `stacked` (= n·kHeadVectors + j) in its own buffer, and
  // which buffer: 0 q, 1 k, 2 v.
  __device__ static std::int64_t split_offset(std::int64_t stacked, int* part) {
    const std::int64_t n = stacked / kHeadVectors;
    const int j = int(stacked - n * kHeadVectors);
    *part = j < kHeads ? 0 : j < kHeads + kKvHeads ? 1 : 2;
    const int within = *part == 0 ? j : *part == 1 ? j - kHeads : j - kHeads - kKvHeads;
    return (n * (*part == 0 ? kHeads : kKvHeads) + within) * std::int64_t(kHeadDim);
  }
};

// kDirection = +1: stacked → (qr, kr, v); −1: (dqr, dkr, dv) → stacked.
template <int kDirection, int kHeadDim, int kHeads, int kKvHeads, typename T>
__global__ void qkv_rope_kernel(T* stacked, T* q, T* k, T* v, const float* cos_t, const float* sin_t, int seq_len,
                                std::int64_t packs) {
  static_assert(kHeadDim > 0 && kHeadDim % 2 == 0, "RoPE needs an even head_dim");
  using Row = QkvRow<kHeadDim, kHeads, kKvHeads>;
  constexpr int kHalf = kHeadDim / 2, kVec = kRopeVec<kHeadDim, T>, kPacksPerHalf = kHalf / kVec;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t head_vector = p / kPacksPerHalf;
    const int i = int(p - head_vector * kPacksPerHalf) * kVec;
    int part = 0;
    const std::int64_t own = Row::split_offset(head_vector, &part);
    T* separate = (part == 0 ? q : part == 1 ? k : v) + own + i;
    T* packed = stacked + head_vector * kHeadDim + i;
    const T* in = kDirection > 0 ? packed : separate;
    T* out = kDirection > 0 ? separate : packed;
    float x1[kVec], x2[kVec], y1[kVec], y2[kVec];
    load_pack<kVec>(x1, in);
    load_pack<kVec>(x2, in + kHalf);
    if (part == 2) {  // v: copied
      store_pack<kVec>(out, x1);
      store_pack<kVec>(out + kHalf, x2);
      continue;
    }
    const std::int64_t position = (head_vector / Row::kHeadVectors) % seq_len;
    float c[kVec], s[kVec];
    load_pack<kVec>(c, cos_t + position * kHalf + i);
    load_pack<kVec>(s, sin_t + position * kHalf + i);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float sn = kDirection > 0 ? s[e] : -s[e];
      y1[e] = x1[e] * c[e] - x2[e] * sn;
      y2[e] = x2[e] * c[e] + x1[e] * sn;
    }
    store_pack<kVec>(out, y1);
    store_pack<kVec>(out + kHalf, y2);
  }
}

template <int kDirection, int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_rope(T* stacked, T* q, T* k, T* v, const float* cos_t, const float* sin_t, int B, int seq_len) {
  constexpr int kVec = kRopeVec<kHeadDim, T>;
  const std::int64_t packs =
      std::int64_t(B) * seq_len * QkvRow<kHeadDim, kHeads, kKvHeads>::kHeadVectors * (kHeadDim / 2 / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("qkv rope", stacked, q);
  check_pack_aligned<kVec, T>("qkv rope", k, v);
  check_pack_aligned<kVec, float>("rope tables", cos_t, sin_t);
  launch(qkv_rope_kernel<kDirection, kHeadDim, kHeads, kKvHeads, T>, blocks_for(packs, kRopeThreads), kRopeThreads,
         0, stacked, q, k, v, cos_t, sin_t, seq_len, packs);
}

// qr = R(+angle)·q, kr = R(+angle)·k, v = v of the stacked [B, seq_len, kHeads + 2·kKvHeads, hd].
template <int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_rope_forward(T* qr, T* kr, T* v, const T* qkv, const float* cos_t, const float* sin_t, int B, int seq_len) {
  // The kernel only reads `stacked` in this direction.
  qkv_rope<+1, kHeadDim, kHeads, kKvHeads>(const_cast<T*>(qkv), qr, kr, v, cos_t, sin_t, B, seq_len);
}

// dqkv = the stacked [R(−angle)·dqr | R(−angle)·dkr | dv] of each token.
template <int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_rope_backward(T* dqkv, const T* dqr, const T* dkr, const T* dv, const float* cos_t, const float* sin_t, int B,
                       int seq_len) {
  // The kernel only reads q, k and v in this direction.
  qkv_rope<-1, kHeadDim, kHeads, kKvHeads>(dqkv, const_cast<T*>(dqr), const_cast<T*>(dkr), const_cast<T*>(dv), cos_t,
                                           sin_t, B, seq_len);
}

// Only v: copied out of the stacked rows (kDirection = +1) or dv into them (−1), for the
// QK-norm path, whose q and k go through the norm first. Pack p holds elements p·kVec ..
// of v [N, kKvHeads·hd].
template <int kDirection, int kHeadDim, int kHeads, int kKvHeads, typename T>
__global__ void qkv_v_kernel(T* stacked, T* v, std::int64_t packs) {
  constexpr int kVec = kRopeVec<kHeadDim, T>;
  constexpr std::int64_t kVWidth = std::int64_t(kKvHeads) * kHeadDim;
  constexpr std::int64_t kWidth = std::int64_t(kHeads + 2 * kKvHeads) * kHeadDim;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t e = p * kVec, n = e / kVWidth;
    T* packed = stacked + n * kWidth + (kWidth - kVWidth) + (e - n * kVWidth);
    float x[kVec];
    load_pack<kVec>(x, kDirection > 0 ? packed : v + e);
    store_pack<kVec>(kDirection > 0 ? v + e : packed, x);
  }
}

template <int kDirection, int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_v(T* stacked, T* v, int B, int seq_len) {
  constexpr int kVec = kRopeVec<kHeadDim, T>;
  const std::int64_t packs = std::int64_t(B) * seq_len * kKvHeads * kHeadDim / kVec;
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("qkv v", stacked, v);
  launch(qkv_v_kernel<kDirection, kHeadDim, kHeads, kKvHeads, T>, blocks_for(packs, kRopeThreads), kRopeThreads, 0,
         stacked, v, packs);
}

// v = the v heads of the stacked [B, seq_len, kHeads + 2·kKvHeads, hd].
template <int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_v_forward(T* v, const T* qkv, int B, int seq_len) {
  qkv_v<+1, kHeadDim, kHeads, kKvHeads>(const_cast<T*>(qkv), v, B, seq_len);  // reads qkv only
}

// The v heads of dqkv = dv.
template <int kHeadDim, int kHeads, int kKvHeads, typename T>
void qkv_v_backward(T* dqkv, const T* dv, int B, int seq_len) {
  qkv_v<-1, kHeadDim, kHeads, kKvHeads>(dqkv, const_cast<T*>(dv), B, seq_len);  // reads dv only
}

}  // namespace gc::tree::cuda
