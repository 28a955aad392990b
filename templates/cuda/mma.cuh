// Tensor-core building blocks (compute capability 8.0+): the bf16 warp-wide matrix multiply
// mma.sync.m16n8k16 with fp32 accumulation, fragments loaded from shared memory with ldmatrix,
// bf16 pairs packed in 32-bit registers, and tiles copied global → shared with cp.async. Under the
// CUDA emulator (-DGC_CUDA_EMULATOR) the three instructions run as gc::emu::mma_m16n8k16_bf16,
// gc::emu::ldmatrix and gc::emu::cp_async_* (tests/cuda_emulator/gc_emu/mma.hpp; cp.async's copies
// land only at the wait); tests/cuda/mma_test.cu checks them against scalar products.
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

namespace gc::tree::cuda::mma {

// Two bf16 (round to nearest even) in one register, `lo` in the low half.
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  const std::uint32_t lo_bits = __bfloat16_as_ushort(from_float<bf16>(lo));
  const std::uint32_t hi_bits = __bfloat16_as_ushort(from_float<bf16>(hi));
  return lo_bits | (hi_bits << 16);
}

// d += A·B (16×16 times 16×8, fp32 accumulators); all 32 lanes of the warp call it together.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mma_m16n8k16_bf16(d, a, b);
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

// ldmatrix.sync.m8n8 (x COUNT matrices, TRANS for .trans): lanes 8m .. 8m+7 pass the addresses of
// the 8 rows (16 bytes each, 16-byte aligned) of matrix m; lane 4g + t receives in r[m] row g,
// columns 2t and 2t + 1 of matrix m (TRANS: rows 2t and 2t + 1 of column g). All lanes call it.
template <int COUNT, bool TRANS>
__device__ __forceinline__ void ldmatrix(std::uint32_t (&r)[COUNT], const void* row) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::ldmatrix<COUNT, TRANS>(r, row);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (COUNT == 4 && !TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else if constexpr (COUNT == 4 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else if constexpr (COUNT == 2 && !TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
  } else {
    static_assert(COUNT == 2 && TRANS, "ldmatrix: x2 or x4");
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
  }
#endif
}

// 16 bytes global → shared without passing through registers (cp.async.cg: L2 only); they land
// once cp_async_wait lets their group complete. Both addresses 16-byte aligned.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::cp_async_16(smem, gmem);
#else
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(addr), "l"(gmem));
#endif
}
// Closes the group of this thread's cp.async copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef GC_CUDA_EMULATOR
  gc::emu::cp_async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most PENDING of this thread's committed groups (the newest) are still in flight.
// Other threads' copies are visible after a __syncthreads that follows their waits.
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
#ifdef GC_CUDA_EMULATOR
  gc::emu::cp_async_wait(PENDING);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
#endif
}

// Two stages of streamed tiles: before tile i is used, tile i + 1's copies are issued into the
// other stage (load(i + 1): GROUPS committed groups of this thread) and only tile i's are waited
// for; the last tile waits for everything. The caller's barrier follows (and, for wgmma readers,
// fence.proxy.async before it), and a barrier after tile i's readers frees its stage.
template <int GROUPS, class Load>
__device__ __forceinline__ void prefetch_next_then_wait(int i, int tiles, Load&& load) {
  if (i + 1 < tiles) {
    load(i + 1);
    cp_async_wait<GROUPS>();
  } else {
    cp_async_wait<0>();
  }
}

// Shared-memory tiles of bf16 rows stored as 32-bit words (two bf16 each): ROWS rows of DIM bf16,
// padded by 8 bf16 (4 words, 16 bytes) per row, so that the eight 16-byte rows an ldmatrix phase
// reads fall in distinct banks (the row stride is DIM/2 + 4 ≡ 4, 8, 12 or 20 words mod 32 for the
// head dims used).
template <int ROWS, int DIM>
struct SmemTile {
  static_assert(DIM % 16 == 0, "tile rows are whole k-steps of 16");
  static constexpr int kWords = DIM / 2 + 4;  // row stride in words (16-byte multiple)
  alignas(16) std::uint32_t w[ROWS][kWords];
};

// The A fragment of rows r0 .. r0+15 and columns 16·ks .. 16·ks+15 of a tile (row-major A): one
// ldmatrix.x4 of the four 8×8 blocks in a[] order (rows +0/+8, columns +0/+8).
template <class Tile>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const Tile& s, int r0, int ks, int lane) {
  const int m = lane / 8, i = lane % 8;  // this lane addresses row i of matrix m
  ldmatrix<4, false>(a, &s.w[r0 + i + 8 * (m % 2)][8 * ks + 4 * (m / 2)]);
}

// The A fragment of A[m][k] = tile[k0 + k][m0 + m] (the tile holds Aᵀ: its rows are the k of the
// product, e.g. the rows summed over in a weight gradient): ldmatrix.x4.trans of the four 8×8 blocks
// in a[] order (m +0/+8, k +0/+8); lane 4g + t gets rows 2t, 2t + 1 of column g of each.
template <class Tile>
__device__ __forceinline__ void load_a_trans(std::uint32_t (&a)[4], const Tile& s, int k0, int m0, int lane) {
  const int m = lane / 8, i = lane % 8;  // this lane addresses row i of matrix m
  ldmatrix<4, true>(a, &s.w[k0 + i + 8 * (m / 2)][(m0 + 8 * (m % 2)) / 2]);
}

// The B fragment B[k][n] = tile[n0 + n][16·ks + k]: the tile's rows are B's columns (the K of
// Q·Kᵀ): ldmatrix.x2 of rows n0 .. n0+7 at columns 16·ks and 16·ks + 8.
template <class Tile>
__device__ __forceinline__ void load_b_rows(std::uint32_t (&b)[2], const Tile& s, int n0, int ks, int lane) {
  const int m = (lane / 8) % 2, i = lane % 8;
  ldmatrix<2, false>(b, &s.w[n0 + i][8 * ks + 4 * m]);
}

// The B fragment B[k][n] = tile[k0 + k][n0 + n]: the tile's rows are B's rows (the V of P·V):
// ldmatrix.x2.trans of rows k0 .. k0+7 and k0+8 .. k0+15 at columns n0 .. n0+7.
template <class Tile>
__device__ __forceinline__ void load_b_cols(std::uint32_t (&b)[2], const Tile& s, int k0, int n0, int lane) {
  const int m = (lane / 8) % 2, i = lane % 8;
  ldmatrix<2, true>(b, &s.w[k0 + i + 8 * m][n0 / 2]);
}

// acc[n] (+)= A·B over STEPS k-steps of 16, A = rows r0 .. r0+15 of `a_tile`, B[k][n] = b_tile[n][k]
// for N_TILES n-tiles of 8 (Q·Kᵀ-shaped products: the B tile's rows are B's columns).
template <int N_TILES, int STEPS, class TileA, class TileB>
__device__ __forceinline__ void product_rows(float (&acc)[N_TILES][4], const TileA& a_tile, int r0,
                                             const TileB& b_tile, int lane) {
#pragma unroll
  for (int ks = 0; ks < STEPS; ++ks) {
    std::uint32_t a[4];
    mma::load_a(a, a_tile, r0, ks, lane);
#pragma unroll
    for (int nt = 0; nt < N_TILES; ++nt) {
      std::uint32_t b[2];
      mma::load_b_rows(b, b_tile, 8 * nt, ks, lane);
      mma::mma_bf16_16816(acc[nt], a, b);
    }
  }
}

// Rows [row0, row0 + ROWS) of a bf16 matrix into a tile, 16 bytes per thread and step, with
// cp.async (this thread's copies are one new group; they land after cp_async_wait); row r of the
// source starts at src + r·STRIDE elements (STRIDE and src 16-byte aligned). Rows ≥ rows_end are
// written 0 at once. Called by all THREADS threads of the block.
template <int THREADS, std::int64_t STRIDE, int ROWS, int DIM>
__device__ __forceinline__ void load_tile_async(SmemTile<ROWS, DIM>& dst, const bf16* __restrict__ src, int row0,
                                                int rows_end) {
  constexpr int kChunks = DIM / 8;  // 16-byte chunks per row
#pragma unroll
  for (int idx = threadIdx.x; idx < ROWS * kChunks; idx += THREADS) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    if (row < rows_end) {
      cp_async_16(&dst.w[r][4 * c], src + std::int64_t(row) * STRIDE + 8 * c);
    } else {
      *reinterpret_cast<Words4*>(&dst.w[r][4 * c]) = Words4{{0u, 0u, 0u, 0u}};
    }
  }
  cp_async_commit();
}

// load_tile_async, then wait for every copy of this thread (a __syncthreads must still follow
// before other threads read the tile).
template <int THREADS, std::int64_t STRIDE, int ROWS, int DIM>
__device__ __forceinline__ void load_tile(SmemTile<ROWS, DIM>& dst, const bf16* __restrict__ src, int row0,
                                          int rows_end) {
  load_tile_async<THREADS, STRIDE>(dst, src, row0, rows_end);
  cp_async_wait<0>();
}

}  // namespace gc::tree::cuda::mma
