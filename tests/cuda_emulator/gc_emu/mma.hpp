// CUDA emulator: the warp-wide tensor-core instruction the kernels use,
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (templates/cuda/mma.cuh calls it where a GPU
// build has the PTX). Every lane brings its fragments; the lanes exchange them with shuffles
// (so the strict warp-collective rules apply: all 32 lanes must arrive, none in a divergent
// branch), and each lane computes its four outputs in fp32, summing k in increasing order and
// adding the accumulator last. Products of two bf16 are exact in fp32; the tensor core's own
// summation order is unspecified, so results agree with a GPU to fp32 rounding, not bit for bit.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// lane = 4·g + t; a 32-bit register holds two bf16, the lower column/row in its low half:
//   A 16×16 row-major: a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B 16×8  (B[k][n]): b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//   C, D 16×8 fp32:    c0, c1 = C[g][2t], C[g][2t+1]   c2, c3 = C[g+8][2t], C[g+8][2t+1]
#pragma once

#include <cstdint>
#include <cstring>

namespace gc_emu {

inline float bf16_bits_to_float(std::uint32_t bits) {
  const std::uint32_t u = (bits & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline int linear_lane() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return int(linear % 32);
}

// d += A·B for the warp's fragments (all 32 lanes call it together).
inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  const int lane = linear_lane(), g = lane / 4, t = lane % 4;
  const auto pair = [](std::uint32_t lo, std::uint32_t hi) { return std::uint64_t(lo) | (std::uint64_t(hi) << 32); };
  float a_rows[2][16];  // A[g][k], A[g+8][k]
  float b_cols[2][16];  // B[k][2t], B[k][2t+1]
  for (int s = 0; s < 4; ++s) {  // lanes 4g + s hold rows g, g+8 at k = 2s, 2s+1, 2s+8, 2s+9
    const std::uint64_t a01 = shuffle(Collective::shfl_idx, 0xffffffffu, pair(a[0], a[1]), 4 * g + s, 32);
    const std::uint64_t a23 = shuffle(Collective::shfl_idx, 0xffffffffu, pair(a[2], a[3]), 4 * g + s, 32);
    const std::uint32_t r[4] = {std::uint32_t(a01), std::uint32_t(a01 >> 32), std::uint32_t(a23),
                                std::uint32_t(a23 >> 32)};
    for (int half = 0; half < 2; ++half) {
      a_rows[0][2 * s + half] = bf16_bits_to_float(r[0] >> (16 * half));
      a_rows[1][2 * s + half] = bf16_bits_to_float(r[1] >> (16 * half));
      a_rows[0][2 * s + 8 + half] = bf16_bits_to_float(r[2] >> (16 * half));
      a_rows[1][2 * s + 8 + half] = bf16_bits_to_float(r[3] >> (16 * half));
    }
  }
  for (int col = 0; col < 2; ++col) {  // column n = 2t + col lives in lanes 4n + s
    for (int s = 0; s < 4; ++s) {
      const std::uint64_t b01 = shuffle(Collective::shfl_idx, 0xffffffffu, pair(b[0], b[1]), 4 * (2 * t + col) + s, 32);
      for (int half = 0; half < 2; ++half) {
        b_cols[col][2 * s + half] = bf16_bits_to_float(std::uint32_t(b01) >> (16 * half));
        b_cols[col][2 * s + 8 + half] = bf16_bits_to_float(std::uint32_t(b01 >> 32) >> (16 * half));
      }
    }
  }
  for (int row = 0; row < 2; ++row) {
    for (int col = 0; col < 2; ++col) {
      float sum = 0.0f;
      for (int k = 0; k < 16; ++k) sum += a_rows[row][k] * b_cols[col][k];
      d[2 * row + col] += sum;
    }
  }
}

}  // namespace gc_emu
