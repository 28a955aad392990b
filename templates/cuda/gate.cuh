// Gated attention on the GPU, the semantics of templates/cpu/gate.hpp (seed 000 eq. 3-4, Qiu et
// al.): each head's SDPA output is multiplied by a sigmoid gate g = σ(z) before W_O.
//
//   headwise     z [N, H]       out[n,h,c] = σ(z[n,h]) · attn[n,h,c]   (broadcast over hd)
//   elementwise  z [N, H·hd]    out[n,e]   = σ(z[n,e]) · attn[n,e]
//   backward     d attn = σ(z) ⊙ dout
//                dz     = σ(z)(1 − σ(z)) · (dout ⊙ attn)   (headwise: summed over the head's hd)
//
// attn, out, dout, dattn are [N, H, hd]. Forward and the elementwise backward use one thread
// per element; the headwise backward uses one warp per (row, head) vector: lane l handles
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

namespace gcm::cuda {

enum class GateMode { none, headwise, elementwise };

// ---- the gate of this experiment (gcompile folds the spec's values in) -----------------------
struct GateShape {
  static constexpr GateMode kMode = gc::knob<GateMode>("model.gated_attention", GateMode::none);
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);
  static constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
};

inline constexpr int kGateThreads = 256;

__device__ inline float gate_sigmoid(float z) { return 1.0f / (1.0f + expf(-z)); }

// One thread per element e of [N, H, hd] (grid-stride); the gate index is e / hd (headwise) or e.
template <GateMode kMode, class S, typename T>
__global__ void gate_forward_kernel(T* out, const T* attn, const T* z, std::int64_t total) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t zi = kMode == GateMode::headwise ? e / S::kHeadDim : e;
    out[e] = from_float<T>(gate_sigmoid(to_float(z[zi])) * to_float(attn[e]));
  }
}

template <typename T>
__global__ void gate_backward_elementwise_kernel(T* dattn, T* dz, const T* dout, const T* attn, const T* z,
                                                 std::int64_t total) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t e = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const float gate = gate_sigmoid(to_float(z[e]));
    const float grad = to_float(dout[e]);  // read before dattn[e] (may be the same memory) is written
    const float a = to_float(attn[e]);
    dz[e] = from_float<T>(gate * (1.0f - gate) * grad * a);
    dattn[e] = from_float<T>(gate * grad);
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
template <GateMode kMode, class S, typename T>
void gate_forward(T* out, const T* attn, const T* z, std::int64_t N) {
  static_assert(kMode != GateMode::none, "no gate to apply");
  const std::int64_t total = N * S::kHeads * S::kHeadDim;
  if (total <= 0) return;
  launch(gate_forward_kernel<kMode, S, T>, blocks_for(total, kGateThreads), kGateThreads, 0, out, attn, z, total);
}

// dattn [N,H,hd] and dz ([N,H] headwise, [N,H,hd] elementwise) are overwritten. dattn may alias dout.
template <GateMode kMode, class S, typename T>
void gate_backward(T* dattn, T* dz, const T* dout, const T* attn, const T* z, std::int64_t N) {
  static_assert(kMode != GateMode::none, "no gate to differentiate");
  const std::int64_t total = N * S::kHeads * S::kHeadDim;
  if (total <= 0) return;
  if constexpr (kMode == GateMode::headwise) {
    const std::int64_t vectors = N * S::kHeads;
    launch(gate_backward_headwise_kernel<S, T>, blocks_for(vectors * kWarp, kGateThreads), kGateThreads, 0, dattn, dz,
           dout, attn, z, vectors);
  } else {
    launch(gate_backward_elementwise_kernel<T>, blocks_for(total, kGateThreads), kGateThreads, 0, dattn, dz, dout, attn,
           z, total);
  }
}

}  // namespace gcm::cuda
