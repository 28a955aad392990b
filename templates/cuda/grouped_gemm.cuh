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
// The row-tiled products (forward, dx) run one block per 128×BN output tile (BN = 128 where the
// output width allows, else 64): grid.x over the row tiles of all experts, grid.y over the output
// columns, expert by expert (expert e has ceil(rows_e / 128) of them; a block past the last finds
// none and returns). dW runs one block per BM×BN tile of W_e (blockIdx.z = e). Each block: 4 warps
// in 2×2, each a (BM/2)×(BN/2) quarter of the tile; K in steps of 32 through a ring of 4
// shared-memory stages (dynamic, 68-80 KiB), three loading with cp.async while one is multiplied
// (with two stages the kit measured 130 TFLOP/s at moe_3b's shapes on an H200). An expert with no rows
// has no tile and its dW is not touched (exactly its zero-initialized gradient, as on the CPU). IN
// and OUT must be multiples of 64 (whole column tiles; expert_linear.cuh falls back to plain kernels
// otherwise). Measured on an H200 at moe_3b's shapes: docs/performance.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/kernel_rules.hpp"
#include "cuda/common.cuh"
#include "cuda/hopper.cuh"
#include "cuda/mma.cuh"

namespace gc::tree::cuda::grouped {

inline constexpr int kThreads = 128;  // 4 warps, 2×2 over the output tile
inline constexpr int kTileRows = 128;  // rows of the activations per row tile (forward, dx)
inline constexpr int kStep = 32;       // K per shared-memory stage (2 mma k-steps)
inline constexpr int kStages = 4;      // stages in flight: 3 loading while one is multiplied

// Whether the projection IN -> OUT runs here (whole 64-column tiles, K in whole stages; the rule
// is core/kernel_rules.hpp's, which gcompile explain reads too).
template <int IN, int OUT>
inline constexpr bool kSupported = core::grouped_gemm_takes(true, IN, OUT);

// The width of an output tile along a dimension of COLS: 128 where it divides, else 64.
template <int COLS>
inline constexpr int kTileCols = COLS % 128 == 0 ? 128 : 64;

// A block's row tile: its expert (-1 past the last tile of the launch) and rows row0 .. end − 1
// of the activations (at most kTileRows of them).
struct RowTile {
  int expert;
  std::int64_t row0, end;
};

// Row tile `tile` of a launch: experts in order, ceil(rows_e / kTileRows) tiles each.
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

// A warp's accumulators: MT m-tiles of 16 rows × NT n-tiles of 8 columns (mma C layout).
template <int MT, int NT>
using Acc = float[MT][NT][4];

// How a warp reads its fragments from a stage's tiles. A: rows of the tile are the output rows
// (A_TRANS = false: the tile is [m][k]) or the K (A_TRANS: the tile is [k][m], as dYᵀ in dW).
// B: rows of the tile are the output columns (B_ROWS: the tile is [n][k], as W in the forward)
// or the K (the tile is [k][n]).
template <bool A_TRANS, bool B_ROWS>
struct Fragments {
  template <class Tile>
  __device__ __forceinline__ static void a(std::uint32_t (&f)[4], const Tile& t, int m0, int ks, int lane) {
    if constexpr (A_TRANS) {
      mma::load_a_trans(f, t, 16 * ks, m0, lane);
    } else {
      mma::load_a(f, t, m0, ks, lane);
    }
  }
  template <class Tile>
  __device__ __forceinline__ static void b(std::uint32_t (&f)[2], const Tile& t, int n0, int ks, int lane) {
    if constexpr (B_ROWS) {
      mma::load_b_rows(f, t, n0, ks, lane);
    } else {
      mma::load_b_cols(f, t, 16 * ks, n0, lane);
    }
  }
};

// acc += this warp's quarter of one stage: rows m0 .. m0 + 16·MT − 1, columns n0 .. n0 + 8·NT − 1.
template <int MT, int NT, class F, class TileA, class TileB>
__device__ __forceinline__ void multiply_stage(Acc<MT, NT>& acc, const TileA& a_s, const TileB& b_s, int m0, int n0,
                                               int lane) {
#pragma unroll
  for (int ks = 0; ks < kStep / 16; ++ks) {
    std::uint32_t a[MT][4], b[NT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) F::a(a[mt], a_s, m0 + 16 * mt, ks, lane);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) F::b(b[nt], b_s, n0 + 8 * nt, ks, lane);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma::mma_bf16_16816(acc[mt][nt], a[mt], b[nt]);
    }
  }
}

// The K loop of a block over `stages` stages of K in a ring of STAGES buffers: load(stage,
// buffer) issues the cp.async copies of a stage (GROUPS committed groups of this thread); while
// stage k is multiplied, stages k + 1 .. k + STAGES − 1 are in flight. A stage past the last
// commits empty groups, so that the count cp_async_wait waits for stays the same. ASYNC_PROXY
// (the wgmma kernels of cuda/grouped_gemm_sm90.cuh, which read shared memory through the async
// proxy): fence.proxy.async after the copies land, before the barrier.
template <int GROUPS, int STAGES = kStages, bool ASYNC_PROXY = false, class Load, class Multiply>
__device__ __forceinline__ void pipelined_k_loop(int stages, Load&& load, Multiply&& multiply) {
  const auto load_or_nothing = [&](int stage) {
    if (stage < stages) {
      load(stage, stage % STAGES);
    } else {
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) mma::cp_async_commit();
    }
  };
  for (int stage = 0; stage < STAGES - 1; ++stage) load_or_nothing(stage);
  for (int k = 0; k < stages; ++k) {
    mma::cp_async_wait<(STAGES - 2) * GROUPS>();  // stage k has landed (this thread's copies)
    if constexpr (ASYNC_PROXY) hopper::fence_proxy_async();
    __syncthreads();  // everyone's copies of stage k; everyone done multiplying stage k − 1
    load_or_nothing(k + STAGES - 1);  // into stage k − 1's buffer
    multiply(k % STAGES);
  }
}

// A block's stage buffers in dynamic shared memory: kStages tiles of A, then kStages of B.
template <class TileA, class TileB>
struct StageRing {
  static constexpr std::size_t kBytes = kStages * (sizeof(TileA) + sizeof(TileB));
  TileA* a;
  TileB* b;
  __device__ __forceinline__ StageRing() {
    unsigned char* smem = hopper::dynamic_shared();
    a = reinterpret_cast<TileA*>(smem);
    b = reinterpret_cast<TileB*>(smem + kStages * sizeof(TileA));
  }
};

// The rings of the three kernels: the rows' tile and W's (forward), dY's and W's (dx), dYᵀ's and
// X's (dW).
template <int OUT>
using ForwardRing = StageRing<mma::SmemTile<kTileRows, kStep>, mma::SmemTile<kTileCols<OUT>, kStep>>;
template <int IN>
using DxRing = StageRing<mma::SmemTile<kTileRows, kStep>, mma::SmemTile<kStep, kTileCols<IN>>>;
template <int IN, int OUT>
using DwRing = StageRing<mma::SmemTile<kStep, kTileCols<OUT>>, mma::SmemTile<kStep, kTileCols<IN>>>;

// Launches KERNEL on kThreads with `bytes` of dynamic shared memory (its stage ring).
template <auto KERNEL, typename... Args>
void launch_ring(dim3 grid, std::size_t bytes, Args&&... args) {
  launch_with_dynamic_shared<KERNEL>(grid, kThreads, bytes, std::forward<Args>(args)...);
}

// Stores a warp's accumulators at rows row0 + 16·mt (+ g, + 8), columns col0 + 8·nt + 2t (+1) of
// out [.][COLS] (out += acc when ACCUMULATE), rows < rows_end.
template <int COLS, bool ACCUMULATE, int MT, int NT, typename Out>
__device__ __forceinline__ void store_tile(Out* out, const Acc<MT, NT>& acc, std::int64_t row0, std::int64_t rows_end,
                                           int col0, int lane) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::int64_t row = row0 + 16 * mt + g + 8 * (e / 2);
        const int col = col0 + 8 * nt + 2 * t + e % 2;
        if (row >= rows_end) continue;
        Out& o = out[row * COLS + col];
        if constexpr (ACCUMULATE) {
          o = from_float<Out>(to_float(o) + acc[mt][nt][e]);
        } else {
          o = from_float<Out>(acc[mt][nt][e]);
        }
      }
    }
  }
}

// Y = X·W_eᵀ per expert: A = 128 rows of X [m][k], B[k][n] = W_e[n][k] (the tile holds W's rows).
template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) forward_kernel(bf16* __restrict__ y, const bf16* __restrict__ x,
                                                           const bf16* __restrict__ w,
                                                           const std::int64_t* __restrict__ offsets, int experts) {
  constexpr int BN = kTileCols<OUT>, MT = kTileRows / 32, NT = BN / 16;
  const ForwardRing<OUT> ring;
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  const int col0 = int(blockIdx.y) * BN, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int wm = (warp / 2) * (kTileRows / 2), wn = (warp % 2) * (BN / 2);
  const bf16* w_e = w + std::int64_t(tile.expert) * OUT * IN + std::int64_t(col0) * IN;
  const bf16* x_t = x + tile.row0 * IN;
  const int rows = int(tile.end - tile.row0);
  Acc<MT, NT> acc = {};
  pipelined_k_loop<2>(
      IN / kStep,
      [&](int k, int buf) {
        mma::load_tile_async<kThreads, IN>(ring.a[buf], x_t + k * kStep, 0, rows);
        mma::load_tile_async<kThreads, IN>(ring.b[buf], w_e + k * kStep, 0, BN);
      },
      [&](int buf) { multiply_stage<MT, NT, Fragments<false, true>>(acc, ring.a[buf], ring.b[buf], wm, wn, lane); });
  store_tile<OUT, false>(y, acc, tile.row0 + wm, tile.end, col0 + wn, lane);
}

// dX (+)= dY·W_e per expert: A = 128 rows of dY [m][k] (K = OUT), B[k][n] = W_e[k][n] (the tile
// holds W's rows, which are B's rows).
template <int IN, int OUT, bool ACCUMULATE>
__global__ void __launch_bounds__(kThreads) backward_dx_kernel(bf16* __restrict__ dx, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ w,
                                                               const std::int64_t* __restrict__ offsets, int experts) {
  constexpr int BN = kTileCols<IN>, MT = kTileRows / 32, NT = BN / 16;
  const DxRing<IN> ring;
  const RowTile tile = block_row_tile(offsets, experts);
  if (tile.expert < 0) return;
  const int col0 = int(blockIdx.y) * BN, warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int wm = (warp / 2) * (kTileRows / 2), wn = (warp % 2) * (BN / 2);
  const bf16* w_e = w + std::int64_t(tile.expert) * OUT * IN + col0;
  const bf16* dy_t = dy + tile.row0 * OUT;
  const int rows = int(tile.end - tile.row0);
  Acc<MT, NT> acc = {};
  pipelined_k_loop<2>(
      OUT / kStep,
      [&](int k, int buf) {
        mma::load_tile_async<kThreads, OUT>(ring.a[buf], dy_t + k * kStep, 0, rows);
        mma::load_tile_async<kThreads, IN>(ring.b[buf], w_e + std::int64_t(k) * kStep * IN, 0, kStep);
      },
      [&](int buf) { multiply_stage<MT, NT, Fragments<false, false>>(acc, ring.a[buf], ring.b[buf], wm, wn, lane); });
  store_tile<IN, ACCUMULATE>(dx, acc, tile.row0 + wm, tile.end, col0 + wn, lane);
}

// dW_e += Σ_r dY[r]ᵀ·X[r] over expert e's rows (blockIdx.z = e): output tile [BM of OUT][BN of IN],
// A[m][k] = dY[r0 + k][o0 + m] (the tile holds Aᵀ), B[k][n] = X[r0 + k][i0 + n], rows r in steps of
// 32 in increasing order (rows past the expert load as zeros). An expert without rows returns at
// once: its dW is not touched.
template <int IN, int OUT>
__global__ void __launch_bounds__(kThreads) backward_dw_kernel(float* __restrict__ dw, const bf16* __restrict__ dy,
                                                               const bf16* __restrict__ x,
                                                               const std::int64_t* __restrict__ offsets) {
  constexpr int BM = kTileCols<OUT>, BN = kTileCols<IN>, MT = BM / 32, NT = BN / 16;
  const DwRing<IN, OUT> ring;
  const int e = int(blockIdx.z);
  const std::int64_t begin = offsets[e], end = offsets[e + 1];
  if (begin == end) return;
  const int o0 = int(blockIdx.y) * BM, i0 = int(blockIdx.x) * BN;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int wm = (warp / 2) * (BM / 2), wn = (warp % 2) * (BN / 2);
  Acc<MT, NT> acc = {};
  pipelined_k_loop<2>(
      int((end - begin + kStep - 1) / kStep),
      [&](int k, int buf) {
        const std::int64_t r0 = begin + std::int64_t(k) * kStep;
        const int rows = int(end - r0 < kStep ? end - r0 : kStep);
        mma::load_tile_async<kThreads, OUT>(ring.a[buf], dy + r0 * OUT + o0, 0, rows);
        mma::load_tile_async<kThreads, IN>(ring.b[buf], x + r0 * IN + i0, 0, rows);
      },
      [&](int buf) { multiply_stage<MT, NT, Fragments<true, false>>(acc, ring.a[buf], ring.b[buf], wm, wn, lane); });
  store_tile<IN, true>(dw + std::int64_t(e) * OUT * IN, acc, o0 + wm, OUT, i0 + wn, lane);
}

// The row tiles of a launch: Σ_e ceil(rows_e / 64), from the host's copy of the offsets.
inline std::int64_t row_tiles(const std::int64_t* offsets_host, int experts) {
  std::int64_t tiles = 0;
  for (int e = 0; e < experts; ++e) tiles += (offsets_host[e + 1] - offsets_host[e] + kTileRows - 1) / kTileRows;
  return tiles;
}

// A bound on row_tiles for at most `rows` rows over `experts` experts, without reading the
// offsets: Σ_e ceil(r_e / T) ≤ (Σ_e r_e + E·(T − 1)) / T. The blocks past the last tile return.
inline std::int64_t max_row_tiles(std::int64_t rows, int experts) {
  return (rows + std::int64_t(experts) * (kTileRows - 1)) / kTileRows;
}

// The launches (offsets: on the device; tiles: row_tiles of the offsets, or max_row_tiles).
template <int IN, int OUT>
void forward(bf16* y, const bf16* x, const bf16* w, const std::int64_t* offsets, int experts, std::int64_t tiles) {
  static_assert(kSupported<IN, OUT>, "grouped GEMM: IN and OUT must be multiples of 64");
  if (tiles == 0) return;
  launch_ring<forward_kernel<IN, OUT>>(dim3(unsigned(tiles), OUT / kTileCols<OUT>), ForwardRing<OUT>::kBytes, y, x, w,
                                       offsets, experts);
}

// dW alone (backward's second half; cuda/grouped_gemm_sm90.cuh's dX pairs with it).
template <int IN, int OUT>
void backward_dw(float* dw, const bf16* dy, const bf16* x, const std::int64_t* offsets, int experts) {
  static_assert(kSupported<IN, OUT>, "grouped GEMM: IN and OUT must be multiples of 64");
  launch_ring<backward_dw_kernel<IN, OUT>>(dim3(IN / kTileCols<IN>, OUT / kTileCols<OUT>, unsigned(experts)),
                                           DwRing<IN, OUT>::kBytes, dw, dy, x, offsets);
}

template <int IN, int OUT>
void backward(bf16* dx, float* dw, const bf16* dy, const bf16* x, const bf16* w, const std::int64_t* offsets,
              int experts, std::int64_t tiles, bool accumulate_dx) {
  static_assert(kSupported<IN, OUT>, "grouped GEMM: IN and OUT must be multiples of 64");
  if (tiles > 0) {
    const dim3 grid(unsigned(tiles), IN / kTileCols<IN>);
    if (accumulate_dx) {
      launch_ring<backward_dx_kernel<IN, OUT, true>>(grid, DxRing<IN>::kBytes, dx, dy, w, offsets, experts);
    } else {
      launch_ring<backward_dx_kernel<IN, OUT, false>>(grid, DxRing<IN>::kBytes, dx, dy, w, offsets, experts);
    }
  }
  backward_dw<IN, OUT>(dw, dy, x, offsets, experts);
}

}  // namespace gc::tree::cuda::grouped
