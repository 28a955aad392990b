// The experts' GEMMs on Hopper's warpgroup MMA (sm_90a), issue 39's wgmma step:
// Y[r] = X[r]·W_eᵀ, dX[r] (+)= dY[r]·W_e and dW_e += Σ_r dY[r]ᵀ·X[r] for every expert in one
// launch each, with the semantics of grouped::forward and grouped::backward
// (cuda/grouped_gemm.cuh: the same row tiles of 128 rows found from the offsets on the device,
// fp32 accumulation in a fixed order, no atomics, rows past an expert's end neither read nor
// written). Each block computes one 128 × 128 output tile with two warpgroups, each issuing
// wgmma.mma_async m64n128k16 for its 64 rows of the tile (cuda/wgmma.cuh: both operands in shared
// memory, D = A·Bᵀ; in the forward A = the rows of X and B = the rows of W_e).
//
// Shared memory (dynamic, 96 KiB): a ring of kStages stages, each holding an A and a B tile of 128
// × kStep values for kStep = 64 values of K. A K-major tile (the rows; W_e's rows in
// the forward) has no swizzle: core matrix (row/8, k/8) (8 rows × 16 bytes) at 1024·(row/8) +
// 128·(k/8), so LBO = 128 (the next core matrix along K) and SBO = 1024 (the next 8 rows); a
// k-step of 16 advances the descriptor by 256 bytes. In dX, B[n = i][k = o] = W_e[o][i] is stored
// n-contiguous (MN-major, the transpose bit): core matrix (n/8, k/8) (8 k-rows × 8 n) at
// 128·(n/8) + 2048·(k/8), SBO = 128, LBO = 2048; a k-step advances it by 4096 bytes. dW's A and B
// (dY and X, K = the expert's rows) are both MN-major the same way. cp.async
// fills stage k + kStages − 1 while stage k is multiplied; rows past the expert's end load as
// zeros. The copies are generic-proxy writes that wgmma reads through the async proxy:
// fence.proxy.async, then the block barrier, before each stage's MMAs.
//
// A run takes them with train --experts wgmma (cuda/expert_linear.cuh, wgmma_experts_chosen); auto
// keeps the mma.sync kernels until bench/moe/expert_gemm_bench.cu (the kit's moe_experts row) and
// the moe_3b_wgmma row time them faster. Built for sm_90a only (wgmma): elsewhere the kernel body
// traps.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/grouped_gemm.cuh"
#include "cuda/hopper.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace gc::tree::cuda::grouped::sm90 {

inline constexpr int kThreads = 256;                    // two warpgroups, 64 rows each
inline constexpr int kTileCols = 128;                   // the wgmma's N
inline constexpr int kStep = 64;                        // K per stage
inline constexpr int kStages = 3;                       // two loading while one is multiplied
inline constexpr unsigned kCore = 128;                  // bytes of one core matrix
inline constexpr unsigned kRowGroup = (kStep / 8) * kCore;                 // 8 rows × kStep: 1024
inline constexpr unsigned kTileBytes = unsigned(kTileRows / 8) * kRowGroup;  // 128 rows × kStep
inline constexpr std::size_t kSmemBytes = std::size_t(kStages) * 2 * kTileBytes;

// Whether the projection IN -> OUT runs here (whole stages of K, whole 128-column tiles).
template <int IN, int OUT>
inline constexpr bool kSupported = IN % kStep == 0 && OUT % kTileCols == 0;

// Rows 0 .. 127 × kStep values of a row-major matrix (row stride STRIDE) into a K-major tile;
// rows ≥ rows are zeros. Called by all threads; the caller commits the cp.async group (the
// stages go through grouped::pipelined_k_loop, one group a stage).
template <std::int64_t STRIDE>
__device__ __forceinline__ void load_k_major(unsigned char* tile, const bf16* __restrict__ src, int rows) {
  constexpr int kChunks = kStep / 8;  // 16-byte chunks of a row
  for (int idx = int(threadIdx.x); idx < kTileRows * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    unsigned char* dst = tile + kRowGroup * unsigned(r / 8) + kCore * unsigned(c) + 16u * unsigned(r % 8);
    if (r < rows) {
      mma::cp_async_16(dst, src + std::int64_t(r) * STRIDE + 8 * c);
    } else {
      *reinterpret_cast<mma::Words4*>(dst) = mma::Words4{{0u, 0u, 0u, 0u}};
    }
  }
}

// kStep rows of a row-major matrix (row stride STRIDE), kTileCols values each from src on, as an
// MN-major tile (k = the row, m or n = the column: dX's W_e, dW's dY and X); rows ≥ rows are
// zeros. Called by all threads; the caller commits the group.
template <std::int64_t STRIDE>
__device__ __forceinline__ void load_mn_major(unsigned char* tile, const bf16* __restrict__ src, int rows = kStep) {
  constexpr int kChunks = kTileCols / 8;  // 16-byte chunks of a row: 8 values of m or n each
  constexpr unsigned kKGroup = unsigned(kTileCols / 8) * kCore;  // 8 k-rows × kTileCols: 2048
  for (int idx = int(threadIdx.x); idx < kStep * kChunks; idx += kThreads) {
    const int k = idx / kChunks, c = idx % kChunks;
    unsigned char* dst = tile + kCore * unsigned(c) + kKGroup * unsigned(k / 8) + 16u * unsigned(k % 8);
    if (k < rows) {
      mma::cp_async_16(dst, src + std::int64_t(k) * STRIDE + 8 * c);
    } else {
      *reinterpret_cast<mma::Words4*>(dst) = mma::Words4{{0u, 0u, 0u, 0u}};
    }
  }
}

// The warpgroup's 64 × kTileCols accumulators d into rows row0 + 64·group .. of out [.][COLS]
// (bf16 activations or fp32 gradients), from column col0 (out += d when ACCUMULATE), rows < end.
template <int COLS, bool ACCUMULATE, typename Out>
__device__ __forceinline__ void store_warpgroup(Out* __restrict__ out, const float (&d)[kTileCols / 2],
                                                std::int64_t row0, std::int64_t end, int col0) {
  // d[i]: row 16·warp + g + 8·((i/2) % 2) of the warpgroup's 64, column 8·(i/4) + 2q + i % 2.
  const int group = int(threadIdx.x) / 128, lane = int(threadIdx.x) % 32, warp = (int(threadIdx.x) % 128) / 32;
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < kTileCols / 2; i += 2) {
    const std::int64_t row = row0 + 64 * group + 16 * warp + g + 8 * ((i / 2) % 2);
    if (row >= end) continue;
    Out* o = out + row * COLS + col0 + 8 * (i / 4) + 2 * q;
    o[0] = from_float<Out>(d[i] + (ACCUMULATE ? to_float(o[0]) : 0.0f));
    o[1] = from_float<Out>(d[i + 1] + (ACCUMULATE ? to_float(o[1]) : 0.0f));
  }
}

// Stage `buf` of the ring: its A tile (the rows), then its B tile (W_e's part).
__device__ __forceinline__ unsigned char* stage_a(unsigned char* smem, int buf) {
  return smem + std::size_t(buf) * 2 * kTileBytes;
}
__device__ __forceinline__ unsigned char* stage_b(unsigned char* smem, int buf) {
  return stage_a(smem, buf) + kTileBytes;
}

// The descriptor of k-step ks of a stage tile: K-major (core matrices 128 bytes apart along K, 8-row
// groups kRowGroup apart) or MN-major (8-k-row groups kKGroup apart, 8-column groups 128 apart).
template <bool MN_MAJOR>
__device__ __forceinline__ std::uint64_t stage_descriptor(const unsigned char* tile, int ks) {
  constexpr unsigned kKGroup = unsigned(kTileCols / 8) * kCore;  // 8 k-rows of an MN-major tile
  return MN_MAJOR ? wgmma::descriptor(tile + 2 * kKGroup * ks, wgmma::Swizzle::none, kKGroup, kCore)
                  : wgmma::descriptor(tile + 2 * kCore * ks, wgmma::Swizzle::none, kCore, kRowGroup);
}

// This warpgroup's MMAs of one stage: d += A·Bᵀ over kStep values of K, A the warpgroup's 64 rows
// (m) of the stage's A tile, B the stage's B tile; each K-major, or MN-major when TRANS_A /
// TRANS_B (header).
template <bool TRANS_A, bool TRANS_B>
__device__ __forceinline__ void multiply_stage(float (&d)[kTileCols / 2], const unsigned char* a_tile,
                                               const unsigned char* b) {
  // The warpgroup's 64 m: 8 groups of 8 rows (K-major) or of 8 columns (MN-major) in.
  const unsigned char* a = a_tile + unsigned(threadIdx.x / 128) * (64 / 8) * (TRANS_A ? kCore : kRowGroup);
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < kStep / 16; ++ks) {
    wgmma::mma_bf16<kTileCols, TRANS_A, TRANS_B>(d, stage_descriptor<TRANS_A>(a, ks), stage_descriptor<TRANS_B>(b, ks),
                                                 true);
  }
  wgmma::commit();
  wgmma::wait<0>();  // the stage's buffers are free once the next barrier is passed
}

template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16* __restrict__ y, const bf16* __restrict__ x,
                                                           const bf16* __restrict__ w,
                                                           const std::int64_t* __restrict__ offsets, int experts) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  unsigned char* smem = hopper::dynamic_shared();
  const int col0 = int(blockIdx.y) * kTileCols, rows = int(tile.end - tile.row0);
  const bf16* w_e = w + std::int64_t(tile.expert) * OUT * IN + std::int64_t(col0) * IN;
  const bf16* x_t = x + tile.row0 * IN;
  float d[kTileCols / 2] = {};  // the warpgroup's accumulators (store_warpgroup's layout)
  pipelined_k_loop<1, kStages, true>(
      IN / kStep,
      [&](int k, int buf) {
        load_k_major<IN>(stage_a(smem, buf), x_t + k * kStep, rows);
        load_k_major<IN>(stage_b(smem, buf), w_e + k * kStep, kTileCols);
        mma::cp_async_commit();
      },
      [&](int buf) { multiply_stage<false, false>(d, stage_a(smem, buf), stage_b(smem, buf)); });
  store_warpgroup<OUT, false>(y, d, tile.row0, tile.end, col0);
#else
  __trap();  // built for an architecture without wgmma
#endif
}

// dX (+)= dY·W_e per expert: A = the tile's 128 rows of dY (K = OUT, K-major), B the MN-major
// W_e tile (header). IN must be a multiple of 128, OUT of 64 (kSupported<OUT, IN>).
template <int IN, int OUT, bool ACCUMULATE>
__global__ void __launch_bounds__(kThreads) backward_dx_kernel(bf16* __restrict__ dx, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ w,
                                                               const std::int64_t* __restrict__ offsets, int experts) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  unsigned char* smem = hopper::dynamic_shared();
  const int col0 = int(blockIdx.y) * kTileCols, rows = int(tile.end - tile.row0);
  const bf16* w_e = w + std::int64_t(tile.expert) * OUT * IN + col0;
  const bf16* dy_t = dy + tile.row0 * OUT;
  float d[kTileCols / 2] = {};  // the warpgroup's accumulators (store_warpgroup's layout)
  pipelined_k_loop<1, kStages, true>(
      OUT / kStep,
      [&](int k, int buf) {
        load_k_major<OUT>(stage_a(smem, buf), dy_t + k * kStep, rows);
        load_mn_major<IN>(stage_b(smem, buf), w_e + std::int64_t(k) * kStep * IN);
        mma::cp_async_commit();
      },
      [&](int buf) { multiply_stage<false, true>(d, stage_a(smem, buf), stage_b(smem, buf)); });
  store_warpgroup<IN, ACCUMULATE>(dx, d, tile.row0, tile.end, col0);
#else
  __trap();  // built for an architecture without wgmma
#endif
}

// dW_e += Σ_{r of e} dY[r]ᵀ·X[r] (fp32 [OUT][IN]): block (x, y, e) owns the 128 × 128 tile of
// rows (o) 128·y.. and columns (i) 128·x.. of W_e; A[m = o][k = r] = dY[r][o] and B[n = i][k = r]
// = X[r][i] are both stored m- or n-contiguous (MN-major, both transpose bits), K the expert's
// rows in stages of kStep in increasing order (rows past its end load as zeros). The block adds
// its sum to dW once: one owner per element, repeats bit for bit. An expert without rows returns
// at once (its dW untouched). IN and OUT must be multiples of 128.
template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) backward_dw_kernel(float* __restrict__ dw, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ x,
                                                               const std::int64_t* __restrict__ offsets) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  const int e = int(blockIdx.z);
  const std::int64_t begin = offsets[e], end = offsets[e + 1];
  if (begin == end) return;
  unsigned char* smem = hopper::dynamic_shared();
  const int i0 = int(blockIdx.x) * kTileCols, o0 = int(blockIdx.y) * kTileCols;
  float d[kTileCols / 2] = {};  // the warpgroup's accumulators (store_warpgroup's layout)
  pipelined_k_loop<1, kStages, true>(
      int((end - begin + kStep - 1) / kStep),
      [&](int k, int buf) {
        const std::int64_t r0 = begin + std::int64_t(k) * kStep;
        const int rows = int(end - r0 < kStep ? end - r0 : kStep);
        load_mn_major<OUT>(stage_a(smem, buf), dy + r0 * OUT + o0, rows);
        load_mn_major<IN>(stage_b(smem, buf), x + r0 * IN + i0, rows);
        mma::cp_async_commit();
      },
      [&](int buf) { multiply_stage<true, true>(d, stage_a(smem, buf), stage_b(smem, buf)); });
  store_warpgroup<IN, true>(dw + std::int64_t(e) * OUT * IN, d, o0, OUT, i0);  // rows (o) of W_e
#else
  __trap();  // built for an architecture without wgmma
#endif
}

// The launches (offsets: the device's copy; tiles: row_tiles of the host's, as grouped::forward).
template <int IN, int OUT>
void forward(bf16* y, const bf16* x, const bf16* w, const std::int64_t* offsets, int experts, std::int64_t tiles) {
  static_assert(kSupported<IN, OUT>, "sm90 grouped GEMM: IN must be a multiple of 64 and OUT of 128");
  if (tiles == 0) return;
  launch_with_dynamic_shared<forward_kernel<IN, OUT>>(dim3(unsigned(tiles), OUT / kTileCols), kThreads, kSmemBytes,
                                                      y, x, w, offsets, experts);
}

template <int IN, int OUT>
void backward_dx(bf16* dx, const bf16* dy, const bf16* w, const std::int64_t* offsets, int experts,
                 std::int64_t tiles, bool accumulate_dx) {
  static_assert(kSupported<OUT, IN>, "sm90 grouped dX: OUT must be a multiple of 64 and IN of 128");
  if (tiles == 0) return;
  const dim3 grid(unsigned(tiles), IN / kTileCols);
  if (accumulate_dx) {
    launch_with_dynamic_shared<backward_dx_kernel<IN, OUT, true>>(grid, kThreads, kSmemBytes, dx, dy, w, offsets,
                                                                  experts);
  } else {
    launch_with_dynamic_shared<backward_dx_kernel<IN, OUT, false>>(grid, kThreads, kSmemBytes, dx, dy, w, offsets,
                                                                   experts);
  }
}

template <int IN, int OUT>
void backward_dw(float* dw, const bf16* dy, const bf16* x, const std::int64_t* offsets, int experts) {
  static_assert(IN % kTileCols == 0 && OUT % kTileCols == 0, "sm90 grouped dW: IN and OUT must be multiples of 128");
  launch_with_dynamic_shared<backward_dw_kernel<IN, OUT>>(dim3(IN / kTileCols, OUT / kTileCols, unsigned(experts)),
                                                          kThreads, kSmemBytes, dw, dy, x, offsets);
}

}  // namespace gc::tree::cuda::grouped::sm90
