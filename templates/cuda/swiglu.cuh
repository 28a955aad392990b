// SwiGLU activation on the GPU, the semantics of templates/cpu/swiglu.hpp (Shazeer 2020): with
// a = x·W_gate and b = x·W_up,
//
//   h = silu(a) ⊙ b,            silu(a) = a · σ(a)
//   backward  da = dh ⊙ b ⊙ σ(a) · (1 + a · (1 − σ(a)))      (= dh ⊙ b ⊙ silu'(a))
//             db = dh ⊙ silu(a)
//
// Elementwise over rows of kWidth values (d_ff, an expert's d_ff or the shared experts' width:
// SwigluShape below holds the spec's), fp32 math. kWidth is a template argument, so one thread
// handles a pack of up to 16 bytes that divides the row (common.cuh row_pack: 8 bf16 values for
// a d_ff that is a multiple of 8). Each thread reads all its inputs before writing, so da and db
// may alias dh (and h may alias a or b). The pair form reads a and b from one [rows, 2·kWidth]
// array (row r = [a_r | b_r], the output of one GEMM with the stacked [W_gate; W_up]) and writes
// [da | db] in that layout.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gc::tree::cuda {

// ---- the MLP widths of this experiment (gcompile folds the spec's values in) ------------------
struct SwigluShape {
  static constexpr int kDff = gc::knob<int>("plan.dense_d_ff", 128);       // dense MLP layers
  static constexpr int kExpertDff = gc::knob<int>("plan.moe_expert_d_ff", 1);  // one routed expert (MoE)
  static constexpr int kSharedDff = gc::knob<int>("plan.moe_shared_d_ff", 0);  // the shared experts together
};

inline constexpr int kSwigluThreads = 256;

// σ(a) = 1 / (1 + e^(−a)); for a → −∞, e^(−a) = inf and σ = 0 (no NaN).
__device__ inline float swiglu_sigmoid(float a) { return 1.0f / (1.0f + expf(-a)); }

// One thread per pack of kVec values (grid-stride over the n / kVec packs).
template <int kVec, typename T>
__global__ void swiglu_forward_kernel(T* h, const T* a, const T* b, std::int64_t packs) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    float av[kVec], bv[kVec], hv[kVec];
    load_pack(av, a + p * kVec);
    load_pack(bv, b + p * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) hv[e] = av[e] * swiglu_sigmoid(av[e]) * bv[e];
    store_pack(h + p * kVec, hv);
  }
}

template <int kVec, typename T>
__global__ void swiglu_backward_kernel(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t packs) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    float av[kVec], bv[kVec], gv[kVec], dav[kVec], dbv[kVec];
    load_pack(av, a + p * kVec);
    load_pack(bv, b + p * kVec);
    load_pack(gv, dh + p * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float sig = swiglu_sigmoid(av[e]);
      dav[e] = gv[e] * bv[e] * sig * (1.0f + av[e] * (1.0f - sig));
      dbv[e] = gv[e] * av[e] * sig;
    }
    store_pack(da + p * kVec, dav);
    store_pack(db + p * kVec, dbv);
  }
}

// Pair layout: pack p of the [rows, kWidth] result is row p / (kWidth / kVec), columns j … j+kVec−1;
// its a values sit at ab[row·2·kWidth + j], its b values kWidth further.
template <int kWidth, int kVec, typename T>
__global__ void swiglu_pair_forward_kernel(T* h, const T* ab, std::int64_t packs) {
  constexpr int kPacksPerRow = kWidth / kVec;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t row = p / kPacksPerRow;
    const int j = int(p - row * kPacksPerRow) * kVec;
    const T* a = ab + row * 2 * kWidth + j;
    float av[kVec], bv[kVec], hv[kVec];
    load_pack(av, a);
    load_pack(bv, a + kWidth);
#pragma unroll
    for (int e = 0; e < kVec; ++e) hv[e] = av[e] * swiglu_sigmoid(av[e]) * bv[e];
    store_pack(h + row * kWidth + j, hv);
  }
}

template <int kWidth, int kVec, typename T>
__global__ void swiglu_pair_backward_kernel(T* dab, const T* dh, const T* ab, std::int64_t packs) {
  constexpr int kPacksPerRow = kWidth / kVec;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t p = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; p < packs; p += stride) {
    const std::int64_t row = p / kPacksPerRow;
    const int j = int(p - row * kPacksPerRow) * kVec;
    const std::int64_t at = row * 2 * kWidth + j;
    float av[kVec], bv[kVec], gv[kVec], dav[kVec], dbv[kVec];
    load_pack(av, ab + at);
    load_pack(bv, ab + at + kWidth);
    load_pack(gv, dh + row * kWidth + j);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float sig = swiglu_sigmoid(av[e]);
      dav[e] = gv[e] * bv[e] * sig * (1.0f + av[e] * (1.0f - sig));
      dbv[e] = gv[e] * av[e] * sig;
    }
    store_pack(dab + at, dav);
    store_pack(dab + at + kWidth, dbv);
  }
}

// h [rows, kWidth] = silu(a) ⊙ b.
template <int kWidth, typename T>
void swiglu_forward(T* h, const T* a, const T* b, std::int64_t rows) {
  constexpr int kVec = row_pack<T>(kWidth);
  const std::int64_t packs = rows * (kWidth / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("swiglu_forward", h, a, b);
  launch(swiglu_forward_kernel<kVec, T>, blocks_for(packs, kSwigluThreads), kSwigluThreads, 0, h, a, b, packs);
}

// da, db [rows, kWidth] overwritten; either may alias dh.
template <int kWidth, typename T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t rows) {
  constexpr int kVec = row_pack<T>(kWidth);
  const std::int64_t packs = rows * (kWidth / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("swiglu_backward", da, db, dh, a, b);
  launch(swiglu_backward_kernel<kVec, T>, blocks_for(packs, kSwigluThreads), kSwigluThreads, 0, da, db, dh, a, b,
         packs);
}

// h [rows, kWidth] = silu(a) ⊙ b, ab [rows, 2·kWidth] = [a | b] per row.
template <int kWidth, typename T>
void swiglu_pair_forward(T* h, const T* ab, std::int64_t rows) {
  constexpr int kVec = row_pack<T>(kWidth);
  const std::int64_t packs = rows * (kWidth / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("swiglu_pair_forward", h, ab);
  launch(swiglu_pair_forward_kernel<kWidth, kVec, T>, blocks_for(packs, kSwigluThreads), kSwigluThreads, 0, h, ab,
         packs);
}

// dab [rows, 2·kWidth] = [da | db] per row (overwritten), from dh [rows, kWidth]. dab must not alias dh or ab.
template <int kWidth, typename T>
void swiglu_pair_backward(T* dab, const T* dh, const T* ab, std::int64_t rows) {
  constexpr int kVec = row_pack<T>(kWidth);
  const std::int64_t packs = rows * (kWidth / kVec);
  if (packs <= 0) return;
  check_pack_aligned<kVec, T>("swiglu_pair_backward", dab, dh, ab);
  launch(swiglu_pair_backward_kernel<kWidth, kVec, T>, blocks_for(packs, kSwigluThreads), kSwigluThreads, 0, dab, dh,
         ab, packs);
}

}  // namespace gc::tree::cuda
