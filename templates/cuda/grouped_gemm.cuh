// The experts' grouped GEMMs (issue 39): one launch per projection and direction covers every
// expert, the expert offsets read on the device, bf16 tensor cores (mma.sync.m16n8k16 through
// cuda/mma.cuh), fp32 accumulation, no atomics (each output tile has one block, which sums its K
// in a fixed order: deterministic). Expert e owns rows offsets[e] .. offsets[e+1] of the row-major
// activations; its weight W_e [OUT][IN] is block e of the stacked [E][OUT][IN].
//
//   forward      Y[r]   = X[r] · W_eᵀ                 (rows of e; Y [R][OUT], X [R][IN])
//   backward dx  dX[r] (+)= dY[r] · W_e               (dX [R][IN], dY [R][OUT])
//   backward dW  dW_e  += Σ_{r of e} dY[r]ᵀ · X[r]    (fp32 [OUT][IN]; rows in increasing order)
//
// The row-tiled products (forward, dx) run one block per 64×64 output tile: grid.x over row tiles
// of all experts, grid.y over the output columns, expert by expert (expert e has ceil(rows_e / 64)
// of them; a block past the last finds none and returns). An expert with no rows has no tile and
// its dW is not touched (exactly its zero-initialized gradient, as on the CPU). Each block: 4 warps,
// warp w the output rows 16w .. 16w+15, K in steps of 32 through shared-memory tiles loaded with
// cp.async. IN and OUT must be multiples of 64 (whole column tiles; backend.cuh falls back to one
// cuBLASLt GEMM per expert otherwise).
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"

namespace gcm::cuda::grouped {

inline constexpr int kThreads = 128;   // 4 warps
inline constexpr int kTileRows = 64;   // output rows per block (16 per warp)
inline constexpr int kTileCols = 64;   // output columns per block (8 n-tiles of 8)
inline constexpr int kStep = 32;       // K per shared-memory stage (2 mma k-steps)

// Whether the projection IN -> OUT runs here (whole 64-column tiles, K in whole stages).
template <int IN, int OUT>
inline constexpr bool kSupported = IN % kTileCols == 0 && OUT % kTileCols == 0;

// A block's row tile: its expert (-1 past the last tile of the launch) and rows row0 .. end − 1
// of the activations (at most 64 of them).
struct RowTile {
  int expert;
  std::int64_t row0, end;
};

// Row tile `tile` of a launch: experts in order, ceil(rows_e / 64) tiles each.
__device__ __forceinline__ RowTile find_row_tile(const std::int64_t* offsets, int experts, std::int64_t tile) {
  std::int64_t first = 0;
  for (int e = 0; e < experts; ++e) {
    const std::int64_t rows = offsets[e + 1] - offsets[e], tiles = (rows + kTileRows - 1) / kTileRows;
    if (tile < first + tiles) return {e, offsets[e] + (tile - first) * kTileRows, offsets[e + 1]};
    first += tiles;
  }
  return {-1, 0, 0};
}

// This block's row tile (blockIdx.x: up to 2^31 − 1 tiles): thread 0 finds it, the block shares it.
__device__ __forceinline__ RowTile block_row_tile(const std::int64_t* offsets, int experts) {
  __shared__ RowTile tile_s;
  if (threadIdx.x == 0) tile_s = find_row_tile(offsets, experts, blockIdx.x);
  __syncthreads();
  return tile_s;
}

// Stores a warp's 16×64 fp32 accumulators (8 n-tiles of the mma C layout) at rows row0 + 16w, columns
// col0 .. col0 + 63 of out [.][COLS] (out += acc when ACCUMULATE), rows < rows_end, columns < COLS.
template <int COLS, bool ACCUMULATE, typename Out>
__device__ __forceinline__ void store_tile(Out* out, const float (&acc)[8][4], std::int64_t row0, std::int64_t rows_end,
                                           int col0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const std::int64_t row = row0 + g + 8 * (e / 2);
      const int col = col0 + 8 * nt + 2 * t + e % 2;
      if (row >= rows_end || col >= COLS) continue;
      Out& o = out[row * COLS + col];
      if constexpr (ACCUMULATE) {
        o = from_float<Out>(to_float(o) + acc[nt][e]);
      } else {
        o = from_float<Out>(acc[nt][e]);
      }
    }
  }
}

// Y = X·W_eᵀ per expert: A = 64 rows of X, B[k][n] = W_e[n][k] (W's rows are B's columns).
template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16* __restrict__ y, const bf16* __restrict__ x,
                                                           const bf16* __restrict__ w,
                                                           const std::int64_t* __restrict__ offsets, int experts) {
  __shared__ mma::SmemTile<kTileRows, kStep> a_s;
  __shared__ mma::SmemTile<kTileCols, kStep> b_s;
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  const int e = tile.expert;
  const std::int64_t row0 = tile.row0, rows_end = tile.end;
  const int col0 = int(blockIdx.y) * kTileCols, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const bf16* w_e = w + std::int64_t(e) * OUT * IN;
  float acc[8][4] = {};
  for (int k0 = 0; k0 < IN; k0 += kStep) {
    mma::load_tile<kThreads, IN>(a_s, x + row0 * IN + k0, 0, int(rows_end - row0));
    mma::load_tile<kThreads, IN>(b_s, w_e + std::int64_t(col0) * IN + k0, 0, OUT - col0);
    __syncthreads();
    mma::product_rows<8, kStep / 16>(acc, a_s, 16 * warp, b_s, lane);
    __syncthreads();
  }
  store_tile<OUT, false>(y, acc, row0 + 16 * warp, rows_end, col0, lane);
}

// dX (+)= dY·W_e per expert: A = 64 rows of dY (K = OUT), B[k][n] = W_e[k][n] (W's rows are B's rows).
template <int IN, int OUT, bool ACCUMULATE>
__global__ void __launch_bounds__(kThreads) backward_dx_kernel(bf16* __restrict__ dx, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ w,
                                                               const std::int64_t* __restrict__ offsets, int experts) {
  __shared__ mma::SmemTile<kTileRows, kStep> a_s;
  __shared__ mma::SmemTile<kStep, kTileCols> b_s;
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  const int e = tile.expert;
  const std::int64_t row0 = tile.row0, rows_end = tile.end;
  const int col0 = int(blockIdx.y) * kTileCols, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const bf16* w_e = w + std::int64_t(e) * OUT * IN;
  float acc[8][4] = {};
  for (int k0 = 0; k0 < OUT; k0 += kStep) {
    mma::load_tile<kThreads, OUT>(a_s, dy + row0 * OUT + k0, 0, int(rows_end - row0));
    mma::load_tile<kThreads, IN>(b_s, w_e + std::int64_t(k0) * IN + col0, 0, kStep);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kStep / 16; ++ks) {
      std::uint32_t a[4];
      mma::load_a(a, a_s, 16 * warp, ks, lane);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        std::uint32_t b[2];
        mma::load_b_cols(b, b_s, 16 * ks, 8 * nt, lane);
        mma::mma_bf16_16816(acc[nt], a, b);
      }
    }
    __syncthreads();
  }
  store_tile<IN, ACCUMULATE>(dx, acc, row0 + 16 * warp, rows_end, col0, lane);
}

// dW_e += Σ_r dY[r]ᵀ·X[r] over expert e's rows (blockIdx.z = e): output tile [64 of OUT][64 of IN],
// A[m][k] = dY[r0 + k][o0 + m] (the tile holds Aᵀ), B[k][n] = X[r0 + k][i0 + n], rows r in steps of
// 32 in increasing order. An expert without rows returns at once: its dW is not touched.
template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) backward_dw_kernel(float* __restrict__ dw, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ x,
                                                               const std::int64_t* __restrict__ offsets) {
  __shared__ mma::SmemTile<kStep, kTileRows> a_s;
  __shared__ mma::SmemTile<kStep, kTileCols> b_s;
  const int e = int(blockIdx.z);
  const std::int64_t begin = offsets[e], end = offsets[e + 1];
  if (begin == end) return;
  const int o0 = int(blockIdx.y) * kTileRows, i0 = int(blockIdx.x) * kTileCols;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  float acc[8][4] = {};
  for (std::int64_t r0 = begin; r0 < end; r0 += kStep) {
    const int rows = int(end - r0 < kStep ? end - r0 : kStep);
    mma::load_tile<kThreads, OUT>(a_s, dy + r0 * OUT + o0, 0, rows);  // rows past the expert: zeros
    mma::load_tile<kThreads, IN>(b_s, x + r0 * IN + i0, 0, rows);
    __syncthreads();
#pragma unroll
    for (int ks = 0; ks < kStep / 16; ++ks) {
      std::uint32_t a[4];
      mma::load_a_trans(a, a_s, 16 * ks, 16 * warp, lane);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        std::uint32_t b[2];
        mma::load_b_cols(b, b_s, 16 * ks, 8 * nt, lane);
        mma::mma_bf16_16816(acc[nt], a, b);
      }
    }
    __syncthreads();
  }
  store_tile<IN, true>(dw + std::int64_t(e) * OUT * IN, acc, o0 + 16 * warp, OUT, i0, lane);
}

// The row tiles of a launch: Σ_e ceil(rows_e / 64), from the host's copy of the offsets.
inline std::int64_t row_tiles(const std::int64_t* offsets_host, int experts) {
  std::int64_t tiles = 0;
  for (int e = 0; e < experts; ++e) tiles += (offsets_host[e + 1] - offsets_host[e] + kTileRows - 1) / kTileRows;
  return tiles;
}

// The launches (offsets: the device's copy; tiles: row_tiles of the host's).
template <int IN, int OUT>
void forward(bf16* y, const bf16* x, const bf16* w, const std::int64_t* offsets, int experts, std::int64_t tiles) {
  static_assert(kSupported<IN, OUT>, "grouped GEMM: IN and OUT must be multiples of 64");
  if (tiles == 0) return;
  launch(forward_kernel<IN, OUT>, dim3(unsigned(tiles), OUT / kTileCols), kThreads, 0, y, x, w, offsets, experts);
}

template <int IN, int OUT>
void backward(bf16* dx, float* dw, const bf16* dy, const bf16* x, const bf16* w, const std::int64_t* offsets,
              int experts, std::int64_t tiles, bool accumulate_dx) {
  static_assert(kSupported<IN, OUT>, "grouped GEMM: IN and OUT must be multiples of 64");
  if (tiles > 0) {
    const dim3 grid(unsigned(tiles), IN / kTileCols);
    if (accumulate_dx) {
      launch(backward_dx_kernel<IN, OUT, true>, grid, kThreads, 0, dx, dy, w, offsets, experts);
    } else {
      launch(backward_dx_kernel<IN, OUT, false>, grid, kThreads, 0, dx, dy, w, offsets, experts);
    }
  }
  launch(backward_dw_kernel<IN, OUT>, dim3(IN / kTileCols, OUT / kTileRows, unsigned(experts)), kThreads, 0, dw, dy, x,
         offsets);
}

}  // namespace gcm::cuda::grouped
