// Gated attention on the GPU, the semantics of templates/cpu/gate.hpp (seed 000 eq. 3-4, Qiu et
// al.): each head's SDPA output is multiplied by a sigmoid gate g = σ(z) before W_O.
//
//   headwise     z [N, H]       out[n,h,c] = σ(z[n,h]) · attn[n,h,c]   (broadcast over hd)
//   elementwise  z [N, H·hd]    out[n,e]   = σ(z[n,e]) · attn[n,e]
//   backward     d attn = σ(z) ⊙ dout
//                dz     = σ(z)(1 − σ(z)) · (dout ⊙ attn)   (headwise: summed over the head's hd)
//
// attn, out, dout, dattn are [N, H, hd]. Forward and the elementwise backward use one thread
// per pack of kVec consecutive elements (up to 16 bytes; the widest that divides hd, so a pack
// never straddles two heads); the headwise backward uses one warp per (row, head) vector: lane l handles
// c = l, l+32, …, reading dout[c] (into its share of Σ dout ⊙ attn) before writing dattn[c],
// then the warp sums the shares and lane 0 writes dz. No element is touched by two lanes, so
// dattn may alias dout (the model runs it in place) and out may alias attn.
//
// Specialized: the heads and head_dim are compile-time (GateShape below, or a test's own shape S
// with kHeads and kHeadDim), so the headwise gate index e / hd divides by a constant and the
// per-head loop has a fixed trip count. The mode is a template argument (the model passes the
// spec's model.gated_attention; GateShape::kMode records it here).
#pragma once

#include <cstdint>

#include "common.cuh"
#include "gc/knob.hpp"
#include "vocabulary.hpp"

namespace gc::tree::cuda {

// ---- the gate of this experiment (gcompile folds the spec's values in) -----------------------
struct GateShape {
  static constexpr GatedAttention kMode = gc::knob<GatedAttention>("model.gated_attention", GatedAttention::none);
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);
  static constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
};

inline constexpr int kGateThreads = 256;

__device__ inline float gate_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// Elements per thread of the forward and the elementwise backward.
template <class S, typename T>
inline constexpr int kGateVec = row_pack<T>(S::kHeadDim);

// One thread per pack of elements e .. e+kVec−1 of [N, H, hd] (grid-stride); the gate index is
// e / hd for the whole pack (headwise) or e .. e+kVec−1 (elementwise).
template <GatedAttention kMode, class S, typename T>
__global__ void gate_forward_kernel(T* out, const T* attn, const T* z, std::int64_t packs) {
  constexpr int kVec = kGateVec<S, T>;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t e = p * kVec;
    float a[kVec], g[kVec];
    load_pack<kVec>(a, attn + e);
    if constexpr (kMode == GatedAttention::headwise) {
      const float head_gate = gate_sigmoid(to_float(z[e / S::kHeadDim]));
#pragma unroll
      for (int i = 0; i < kVec; ++i) g[i] = head_gate;
    } else {
      load_pack<kVec>(g, z + e);
#pragma unroll
      for (int i = 0; i < kVec; ++i) g[i] = gate_sigmoid(g[i]);
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) a[i] *= g[i];
    store_pack<kVec>(out + e, a);
  }
}

template <int kVec, typename T>
__global__ void gate_backward_elementwise_kernel(T* dattn, T* dz, const T* dout, const T* attn, const T* z,
                                                 std::int64_t packs) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t e = p * kVec;
    float gate[kVec], grad[kVec], a[kVec], dgate[kVec];
    load_pack<kVec>(gate, z + e);
    load_pack<kVec>(grad, dout + e);  // read before dattn (may be the same memory) is written
    load_pack<kVec>(a, attn + e);
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      gate[i] = gate_sigmoid(gate[i]);
      dgate[i] = gate[i] * (1.0f - gate[i]) * grad[i] * a[i];
      grad[i] *= gate[i];
    }
    store_pack<kVec>(dz + e, dgate);
    store_pack<kVec>(dattn + e, grad);
  }
}

// One warp per head vector (warp-stride over the N·H vectors; the loop is warp-uniform).
template <class S, typename T>
__global__ void gate_backward_headwise_kernel(T* dattn, T* dz, const T* dout, const T* attn, const T* z,
                                              std::int64_t vectors) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = std::int64_t(gridDim.x) * blockDim.x / kWarp;
  for (std::int64_t head = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; head < vectors;
       head += warps) {
    const float gate = gate_sigmoid(to_float(z[head]));
    const std::int64_t base = head * S::kHeadDim;
    float dgate = 0.0f;  // this lane's share of Σ_c dout ⊙ attn
#pragma unroll
    for (int c = lane; c < S::kHeadDim; c += kWarp) {
      const float grad = to_float(dout[base + c]);
      dgate += grad * to_float(attn[base + c]);
      dattn[base + c] = from_float<T>(gate * grad);  // same lane, same c: read above, written here
    }
    dgate = warp_sum(dgate);
    if (lane == 0) dz[head] = from_float<T>(gate * (1.0f - gate) * dgate);
  }
}

// out = σ(z) ⊙ attn (broadcast over head_dim when headwise). out may alias attn.
template <GatedAttention kMode, class S, typename T>
void gate_forward(T* out, const T* attn, const T* z, std::int64_t N) {
  static_assert(kMode != GatedAttention::none, "no gate to apply");
  constexpr int kVec = kGateVec<S, T>;
  const std::int64_t packs = N * S::kHeads * (S::kHeadDim / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("gate_forward", out, attn);
  if constexpr (kMode == GatedAttention::elementwise) check_pack_aligned<kVec, T>("gate_forward", z);
  launch(gate_forward_kernel<kMode, S, T>, blocks_for(packs, kGateThreads), kGateThreads, 0, out, attn, z, packs);
}

// dattn [N,H,hd] and dz ([N,H] headwise, [N,H,hd] elementwise) are overwritten. dattn may alias dout.
template <GatedAttention kMode, class S, typename T>
void gate_backward(T* dattn, T* dz, const T* dout, const T* attn, const T* z, std::int64_t N) {
  static_assert(kMode != GatedAttention::none, "no gate to differentiate");
  const std::int64_t total = N * S::kHeads * S::kHeadDim;
  if (total <= 0) return;
  if constexpr (kMode == GatedAttention::headwise) {
    const std::int64_t vectors = N * S::kHeads;
    launch(gate_backward_headwise_kernel<S, T>, blocks_for(vectors * kWarp, kGateThreads), kGateThreads, 0, dattn, dz,
           dout, attn, z, vectors);
  } else {
    constexpr int kVec = kGateVec<S, T>;
    const std::int64_t packs = total / kVec;
    check_pack_aligned<kVec, T>("gate_backward", dattn, dz, dout, attn, z);
    launch(gate_backward_elementwise_kernel<kVec, T>, blocks_for(packs, kGateThreads), kGateThreads, 0, dattn, dz, dout,
           attn, z, packs);
  }
}

}  // namespace gc::tree::cuda
