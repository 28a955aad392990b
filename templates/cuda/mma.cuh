// Tensor-core building blocks (compute capability 8.0+): the bf16 warp-wide matrix multiply
// mma.sync.m16n8k16 with fp32 accumulation, bf16 pairs packed in 32-bit registers, and 16-byte
// copies. Under the CUDA emulator (-DGC_CUDA_EMULATOR) the mma runs as gc_emu::mma_m16n8k16_bf16
// (tests/cuda_emulator/gc_emu/mma.hpp); tests/cuda/mma_test.cu checks both against a scalar
// product.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), for
// lane = 4·g + t of the warp; a register holds two bf16, the lower column (or row) in its low 16 bits:
//   A 16×16 row-major:    a[0] = A[g][2t, 2t+1]    a[1] = A[g+8][2t, 2t+1]
//                         a[2] = A[g][2t+8, 2t+9]  a[3] = A[g+8][2t+8, 2t+9]
//   B 16×8, as B[k][n]:   b[0] = B[2t, 2t+1][g]    b[1] = B[2t+8, 2t+9][g]
//   C, D 16×8 fp32:       c[0], c[1] = C[g][2t], C[g][2t+1]    c[2], c[3] = C[g+8][2t], C[g+8][2t+1]
// The accumulator's layout is the A layout of the next product (FlashAttention-2's register
// reuse): tiles n and n+1 of a 16×16 row block of C, rounded to bf16 in pairs, are the A
// fragment of k-step n/2: a[0] = (c_n[0], c_n[1]), a[1] = (c_n[2], c_n[3]), a[2], a[3] likewise
// from tile n+1 (pack_accumulators).
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace gcm::cuda::tc {

// Two bf16 (round to nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  const std::uint32_t lo_bits = __bfloat16_as_ushort(from_float<bf16>(lo));
  const std::uint32_t hi_bits = __bfloat16_as_ushort(from_float<bf16>(hi));
  return lo_bits | (hi_bits << 16);
}

// The bf16 in half `half` (0 = low) of a register, as its 16 bits.
__device__ __forceinline__ std::uint32_t half_bits(std::uint32_t word, int half) { return (word >> (16 * half)) & 0xffffu; }

// d += A·B (16×16 times 16×8, fp32 accumulators); all 32 lanes of the warp call it together.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#ifdef GC_CUDA_EMULATOR
  gc_emu::mma_m16n8k16_bf16(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// A fragment of k-step `kk` from the accumulators of n-tiles 2kk and 2kk+1 (see the header).
__device__ __forceinline__ void pack_accumulators(std::uint32_t (&a)[4], const float (&c_lo)[4], const float (&c_hi)[4]) {
  a[0] = pack_bf16x2(c_lo[0], c_lo[1]);
  a[1] = pack_bf16x2(c_lo[2], c_lo[3]);
  a[2] = pack_bf16x2(c_hi[0], c_hi[1]);
  a[3] = pack_bf16x2(c_hi[2], c_hi[3]);
}

// Sixteen bytes as one access (8 bf16); both sides 16-byte aligned.
struct alignas(16) Words4 {
  std::uint32_t w[4];
};

// Shared-memory tiles of bf16 rows stored as 32-bit words (two bf16 each): ROWS rows of DIM bf16,
// padded by 8 bf16 (4 words) per row so that the fragment loads below hit 32 distinct banks
// (the row stride is DIM/2 + 4 ≡ 4, 8, 12 or 20 words mod 32 for the head dims used).
template <int ROWS, int DIM>
struct SmemTile {
  static_assert(DIM % 16 == 0, "tile rows are whole k-steps of 16");
  static constexpr int kWords = DIM / 2 + 4;  // row stride in words (16-byte multiple)
  alignas(16) std::uint32_t w[ROWS][kWords];
};

// The A fragment of rows r0 .. r0+15 and columns 16·ks .. 16·ks+15 of a tile (row-major A).
template <class Tile>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const Tile& s, int r0, int ks, int lane) {
  const int g = lane / 4, t = lane % 4;
  a[0] = s.w[r0 + g][8 * ks + t];
  a[1] = s.w[r0 + g + 8][8 * ks + t];
  a[2] = s.w[r0 + g][8 * ks + 4 + t];
  a[3] = s.w[r0 + g + 8][8 * ks + 4 + t];
}

// The B fragment B[k][n] = tile[n0 + n][16·ks + k]: the tile's rows are B's columns (the K of
// Q·Kᵀ), so each register is one word of the tile.
template <class Tile>
__device__ __forceinline__ void load_b_rows(std::uint32_t (&b)[2], const Tile& s, int n0, int ks, int lane) {
  const int g = lane / 4, t = lane % 4;
  b[0] = s.w[n0 + g][8 * ks + t];
  b[1] = s.w[n0 + g][8 * ks + 4 + t];
}

// The B fragment B[k][n] = tile[k0 + k][n0 + n]: the tile's rows are B's rows (the V of P·V), so
// each register pairs two rows' halves.
template <class Tile>
__device__ __forceinline__ void load_b_cols(std::uint32_t (&b)[2], const Tile& s, int k0, int n0, int lane) {
  const int g = lane / 4, t = lane % 4;
  const int col = n0 + g, word = col / 2, half = col % 2;
  b[0] = half_bits(s.w[k0 + 2 * t][word], half) | (half_bits(s.w[k0 + 2 * t + 1][word], half) << 16);
  b[1] = half_bits(s.w[k0 + 2 * t + 8][word], half) | (half_bits(s.w[k0 + 2 * t + 9][word], half) << 16);
}

// Rows [row0, row0 + ROWS) of a bf16 matrix into a tile, 16 bytes per thread and step; row r of
// the source starts at src + r·STRIDE elements (STRIDE and src 16-byte aligned). Rows ≥ rows_end
// become 0. Called by all THREADS threads of the block.
template <int THREADS, std::int64_t STRIDE, int ROWS, int DIM>
__device__ __forceinline__ void load_tile(SmemTile<ROWS, DIM>& dst, const bf16* __restrict__ src, int row0,
                                          int rows_end) {
  constexpr int kChunks = DIM / 8;  // 16-byte chunks per row
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    Words4 v{{0u, 0u, 0u, 0u}};
    if (row < rows_end) v = *reinterpret_cast<const Words4*>(src + std::int64_t(row) * STRIDE + 8 * c);
    *reinterpret_cast<Words4*>(&dst.w[r][4 * c]) = v;
  }
}

}  // namespace gcm::cuda::tc
