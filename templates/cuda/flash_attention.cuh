// Causal GQA attention on tensor cores (bf16 mma.sync, compute capability 8.0+), FlashAttention-2
// style: the same semantics, layouts, lse and scratch as the reference kernels of
// cuda/attention.cuh (which stay, for fp32 and for head dims these kernels do not take, and as
// the reference tests/cuda/flash_attention_test.cu compares them with).
//
// What runs on tensor cores: S = Q·Kᵀ, O += P·V in the forward; in the backward Sᵀ = K·Qᵀ,
// dPᵀ = V·dOᵀ, dV += Pᵀ·dO, dK += dSᵀ·Q (one kernel per 16-key warp slab) and S, dP,
// dQ += dS·K (one kernel per 16-query slab). Operands are bf16 (P and dS are rounded to bf16
// before their products, as in FlashAttention-2); every accumulator, the softmax statistics
// (running max and sum, in fp32 registers, scores in log2 units) and lse are fp32. The products'
// fragment layouts are those of cuda/mma.cuh; an accumulator becomes the next product's A operand
// without leaving registers (pack_accumulators).
//
// Tiles: a warp owns 16 rows. Forward: blocks of 64 queries (4 warps) stream 64-key K and V
// tiles through shared memory (cp.async; for head_dim ≤ 64 double-buffered, the next tile's
// copy in flight during this tile's products); Q stays in registers. Fragments come from shared
// memory through ldmatrix (.trans for V and the other B operands read along columns). Causal
// block skipping: a block stops at the key tile holding its last query; only the tiles that cross
// the diagonal are masked.
// Backward: a block owns 64 rows and streams the other side's tiles (64 rows, 32 for head_dim >
// 64) through two stages of dynamic shared memory (55-70 KiB), the next tile's cp.async in
// flight during this tile's products; the dK/dV kernel holds its keys' K and V, loops over the
// kv group's query heads and the query tiles at or after its keys (in order); the dQ kernel
// holds its queries' Q and dO and loops over the key tiles up to the diagonal. A warp skips the
// tiles its causal mask zeroes entirely. Nothing is shared between blocks and every sum runs in
// a fixed order: no atomics, bit-identical reruns.
//
// Specialized: head_dim, heads, kv heads and the scale are S's compile-time constants, so every
// k-step and n-tile loop has a constant trip count. head_dim must be a multiple of 16 (at most
// 128); flash_attention_supported<S, T>() says whether these kernels apply.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/kernel_rules.hpp"
#include "cuda/attention.cuh"
#include "cuda/common.cuh"
#include "cuda/hopper.cuh"
#include "cuda/mma.cuh"

namespace gc::tree::cuda {

// Whether the tensor-core kernels take attention shape S in element type T (the rule is
// core/kernel_rules.hpp's, which gcompile explain reads too).
template <class S, typename T>
constexpr bool flash_attention_supported() {
  return core::flash_attention_takes(std::is_same_v<T, bf16>, S::kHeadDim);
}

namespace detail {

inline constexpr int kWarpRows = 16;  // rows of one warp's slab (the mma's M)
inline constexpr int kRowsF = 64;     // forward: queries per block and keys per tile

template <class S>
struct FlashConfig {
  static_assert(core::flash_attention_takes(true, S::kHeadDim),
                "tensor-core attention needs head_dim % 16 == 0, <= 128");
  static_assert(S::kHeads % S::kKvHeads == 0, "heads must be a multiple of kv_heads");
  static constexpr int kHeadDim = S::kHeadDim;
  static constexpr int kSteps = kHeadDim / 16;       // k-steps over head_dim
  static constexpr int kDimTiles = kHeadDim / 8;     // n-tiles over head_dim
  static constexpr int kGroup = S::kHeads / S::kKvHeads;
  static constexpr std::int64_t kQStride = std::int64_t(S::kHeads) * kHeadDim;
  static constexpr std::int64_t kKvStride = std::int64_t(S::kKvHeads) * kHeadDim;
  static constexpr float kScale = S::kScale;
  static constexpr float kScaleLog2 = S::kScale * kLog2e;
  static constexpr int kThreadsF = kRowsF / kWarpRows * kWarp;  // 128
  // Forward K/V stages: two (the next tile's cp.async overlaps this tile's math) when both fit
  // in 48 KiB of static shared memory (head_dim ≤ 64), else one.
  static constexpr int kStagesF = 2 * 2 * sizeof(mma::SmemTile<kRowsF, kHeadDim>) <= 48 * 1024 ? 2 : 1;
  // Backward: a block owns 64 rows (4 warps of 16: keys in dK/dV, queries in dQ) and streams the
  // other side in tiles of kStreamRowsB rows through two shared-memory stages (the next tile's
  // cp.async in flight during this tile's products). 32 streamed rows at head_dim 128 keep a
  // warp's scores and gradients at 16 × 32 (218 registers, no spills on sm_90a).
  static constexpr int kOwnRowsB = 64;
  static constexpr int kStreamRowsB = kHeadDim <= 64 ? 64 : 32;
  static constexpr int kThreadsB = kOwnRowsB / kWarpRows * kWarp;  // 128
  // The dQ kernel's occupancy hint: 4 blocks an SM at head_dim ≤ 64 (125 registers), else 1,
  // which leaves ptxas the 160 registers head_dim 128 needs without spilling (sm_90a).
  static constexpr int kDqMinBlocks = kHeadDim <= 64 ? 4 : 1;
};

// The backward kernels' dynamic shared memory: the block's own rows (two tiles), two stages of
// the streamed tiles and, for dK/dV, the streamed queries' lse (log2 units) and D_i.
template <class S>
struct BackwardShared {
  using Cfg = FlashConfig<S>;
  using Own = mma::SmemTile<Cfg::kOwnRowsB, Cfg::kHeadDim>;
  using Streamed = mma::SmemTile<Cfg::kStreamRowsB, Cfg::kHeadDim>;
  Own own[2];           // dK/dV: K, V; dQ: Q, dO
  Streamed stream[2][2];  // [stage]: dK/dV: Q, dO; dQ: K, V
  float lse2[2][Cfg::kStreamRowsB], delta[2][Cfg::kStreamRowsB];
};

// One bf16 pair of a row-major matrix as a register; 0 for rows ≥ rows_end.
__device__ __forceinline__ std::uint32_t load_pair(const bf16* __restrict__ base, std::int64_t stride, int row,
                                                   int col, int rows_end) {
  return row < rows_end ? *reinterpret_cast<const std::uint32_t*>(base + std::int64_t(row) * stride + col) : 0u;
}

__device__ __forceinline__ void store_pair(bf16* __restrict__ base, std::int64_t stride, int row, int col, float lo,
                                           float hi) {
  *reinterpret_cast<std::uint32_t*>(base + std::int64_t(row) * stride + col) = mma::pack_bf16x2(lo, hi);
}

// A warp slab's accumulators into rows of a head (row stride STRIDE): the lane's rows rows[0]
// (acc[d][0], acc[d][1]) and rows[1] (acc[d][2], acc[d][3]) at columns 8d + 2t and 8d + 2t + 1,
// each times scale[r], as bf16 pairs; rows ≥ seq_len are not stored.
template <std::int64_t STRIDE, int D_TILES>
__device__ __forceinline__ void store_slab(bf16* __restrict__ base, const int (&rows)[2],
                                           const float (&acc)[D_TILES][4], const float (&scale)[2], int seq_len,
                                           int t) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= seq_len) continue;
#pragma unroll
    for (int d = 0; d < D_TILES; ++d) {
      store_pair(base, STRIDE, rows[r], 8 * d + 2 * t, acc[d][2 * r] * scale[r], acc[d][2 * r + 1] * scale[r]);
    }
  }
}

// Max and sum over the four lanes of a quad (the lanes holding one accumulator row).
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// acc[d] += X·B where X [16][16·K_STEPS] is given as accumulators x[2·K_STEPS][4] (rounded to
// bf16 here) and B[k][n] = b_tile[k][8·d + n] (P·V-shaped products).
template <int D_TILES, int K_STEPS, class TileB>
__device__ __forceinline__ void product_cols(float (&acc)[D_TILES][4], const float (&x)[2 * K_STEPS][4],
                                             const TileB& b_tile, int lane) {
#pragma unroll
  for (int kk = 0; kk < K_STEPS; ++kk) {
    std::uint32_t a[4];
    mma::pack_accumulators(a, x[2 * kk], x[2 * kk + 1]);
#pragma unroll
    for (int d = 0; d < D_TILES; ++d) {
      std::uint32_t b[2];
      mma::load_b_cols(b, b_tile, 16 * kk, 8 * d, lane);
      mma::mma_bf16_16816(acc[d], a, b);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward. Block (x, h, b): queries q0 .. q0+63 of head h, q0 = 64·(gridDim.x − 1 − x) (the
// longest rows first). Warp w owns queries q0 + 16w .. +15; lane 4g + t holds rows g and g + 8
// of the slab and, of every 8-column tile, columns 2t and 2t + 1.
template <class S>
__global__ void __launch_bounds__(FlashConfig<S>::kThreadsF)
    flash_forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                         const bf16* __restrict__ k, const bf16* __restrict__ v, int seq_len) {
  using Cfg = FlashConfig<S>;
  constexpr int kSteps = Cfg::kSteps, kDimTiles = Cfg::kDimTiles, kKeyTiles = kRowsF / 8;
  constexpr int kStages = Cfg::kStagesF;
  __shared__ mma::SmemTile<kRowsF, Cfg::kHeadDim> k_s[kStages], v_s[kStages];

  const int b = blockIdx.z, h = blockIdx.y, g_kv = h / Cfg::kGroup;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRowsF;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
  const int slab = q0 + warp * kWarpRows;
  const int rows[2] = {slab + g, slab + g + 8};  // this lane's queries (may be ≥ seq_len: not stored)

  const std::int64_t q_off = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * Cfg::kHeadDim;
  const bf16* q_head = q + q_off;
  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * Cfg::kHeadDim;

  std::uint32_t q_frag[kSteps][4];  // the slab's Q as A fragments, for the whole kernel
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    q_frag[ks][0] = load_pair(q_head, Cfg::kQStride, rows[0], 16 * ks + 2 * t, seq_len);
    q_frag[ks][1] = load_pair(q_head, Cfg::kQStride, rows[1], 16 * ks + 2 * t, seq_len);
    q_frag[ks][2] = load_pair(q_head, Cfg::kQStride, rows[0], 16 * ks + 8 + 2 * t, seq_len);
    q_frag[ks][3] = load_pair(q_head, Cfg::kQStride, rows[1], 16 * ks + 8 + 2 * t, seq_len);
  }
  float o[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max of s·log2(e)
  float l[2] = {0.0f, 0.0f};            // this lane's part of the running Σ 2^(s·log2 e − m)

  const int last_query = min(q0 + kRowsF, seq_len) - 1;  // q0 < seq_len by the grid size
  const int key_tiles = last_query / kRowsF + 1;
  const auto load_kv = [&](int tile) {  // one cp.async group per tile (K and V)
    const int stage = tile % kStages;
    mma::load_tile_async<Cfg::kThreadsF, Cfg::kKvStride>(k_s[stage], k + kv_head, tile * kRowsF, seq_len);
    mma::load_tile_async<Cfg::kThreadsF, Cfg::kKvStride>(v_s[stage], v + kv_head, tile * kRowsF, seq_len);
  };
  if (kStages == 2) load_kv(0);
  for (int tile = 0; tile < key_tiles; ++tile) {
    const int k0 = tile * kRowsF;
    if (kStages == 2) {
      // The previous iteration's closing barrier freed the other stage: prefetch into it, then
      // wait for this tile's two groups only.
      mma::prefetch_next_then_wait<2>(tile, key_tiles, load_kv);
    } else {
      load_kv(tile);
      mma::cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile have landed
    const auto& k_tile = k_s[tile % kStages];
    const auto& v_tile = v_s[tile % kStages];

    float s[kKeyTiles][4];
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    // Q·Kᵀ with Q from registers
#pragma unroll
    for (int ks = 0; ks < kSteps; ++ks) {
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        std::uint32_t bk[2];
        mma::load_b_rows(bk, k_tile, 8 * nt, ks, lane);
        mma::mma_bf16_16816(s[nt], q_frag[ks], bk);
      }
    }
    // Scores in log2 units; keys after the query (only in tiles that reach past the slab's first
    // row) are −inf. Keys ≥ seq_len are after every stored query.
    const bool crosses_diagonal = k0 + kRowsF - 1 > slab;
#pragma unroll
    for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * nt + 2 * t + (e & 1);
        s[nt][e] = (crosses_diagonal && key > rows[e / 2]) ? -INFINITY : s[nt][e] * Cfg::kScaleLog2;
      }
    }
    // Online softmax (see cuda/attention.cuh): every row has key 0 in the first tile, so m is
    // finite from then on; m_ref keeps (−inf) − (−inf) out of the first tile's α.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) tile_max = fmaxf(tile_max, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(tile_max));
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_ref);
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
        s[nt][2 * r] = exp2f(s[nt][2 * r] - m_ref);
        s[nt][2 * r + 1] = exp2f(s[nt][2 * r + 1] - m_ref);
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      l[r] = alpha * l[r] + sum;
#pragma unroll
      for (int d = 0; d < kDimTiles; ++d) {
        o[d][2 * r] *= alpha;
        o[d][2 * r + 1] *= alpha;
      }
      m[r] = m_new;
    }
    product_cols<kDimTiles, kKeyTiles / 2>(o, s, v_tile, lane);  // O += P·V
    __syncthreads();  // this stage's readers are done before it is refilled
  }

  // Row by row (not store_slab): finishing one row before the next keeps the forward at 128
  // registers for head_dim 64 (143 with both rows' normalizers live).
  bf16* out_head = out + q_off;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l_row = quad_sum(l[r]);
    if (rows[r] >= seq_len) continue;
    const float inv = 1.0f / l_row;
#pragma unroll
    for (int d = 0; d < kDimTiles; ++d) {
      store_pair(out_head, Cfg::kQStride, rows[r], 8 * d + 2 * t, o[d][2 * r] * inv, o[d][2 * r + 1] * inv);
    }
    if (t == 0) lse[(std::int64_t(b) * S::kHeads + h) * seq_len + rows[r]] = (m[r] + log2f(l_row)) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward, dK and dV. Block (x, g, b): keys k0 .. k0 + 63 of kv head g, k0 = 64·x; warp w owns
// keys k0 + 16w .. +15 (rows of Sᵀ, dPᵀ, dK, dV), lane 4g + t as in the forward. The block
// streams, for each query head of the kv group in order, the query tiles at or after k0 (queries
// before k0 see none of these keys), each with its dO, lse and D_i; a warp whose keys all come
// after a tile's last query skips that tile's products (they would add only zeros).
template <class S>
__global__ void __launch_bounds__(FlashConfig<S>::kThreadsB)
    flash_backward_dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                               const float* __restrict__ lse, const float* __restrict__ delta,
                               const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                               int seq_len) {
  using Cfg = FlashConfig<S>;
  constexpr int QB = Cfg::kStreamRowsB, kSteps = Cfg::kSteps, kDimTiles = Cfg::kDimTiles, kQueryTiles = QB / 8;
  constexpr int kThreads = Cfg::kThreadsB;
  auto& sm = *reinterpret_cast<BackwardShared<S>*>(hopper::dynamic_shared());

  const int b = blockIdx.z, g_kv = blockIdx.y;
  const int k0 = int(blockIdx.x) * Cfg::kOwnRowsB;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
  const int slab = warp * kWarpRows;                        // the warp's first row in the own tiles
  const int keys[2] = {k0 + slab + g, k0 + slab + g + 8};  // this lane's keys

  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * Cfg::kHeadDim;
  mma::load_tile_async<kThreads, Cfg::kKvStride>(sm.own[0], k + kv_head, k0, seq_len);
  mma::load_tile_async<kThreads, Cfg::kKvStride>(sm.own[1], v + kv_head, k0, seq_len);

  // Streamed tile i: query head g·G + i / tiles_per_head, queries i0 .. i0 + QB − 1.
  const int tiles_per_head = (seq_len - k0 + QB - 1) / QB, tiles = Cfg::kGroup * tiles_per_head;
  const auto head_of = [&](int i) { return g_kv * Cfg::kGroup + i / tiles_per_head; };
  const auto first_query = [&](int i) { return k0 + (i % tiles_per_head) * QB; };
  const auto load_stage = [&](int i) {
    const int stage = i % 2, h = head_of(i), i0 = first_query(i);
    const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * Cfg::kHeadDim;
    const std::int64_t lse_head = (std::int64_t(b) * S::kHeads + h) * seq_len;
    mma::load_tile_async<kThreads, Cfg::kQStride>(sm.stream[stage][0], q + q_head, i0, seq_len);
    mma::load_tile_async<kThreads, Cfg::kQStride>(sm.stream[stage][1], dout + q_head, i0, seq_len);
    for (int ii = threadIdx.x; ii < QB; ii += kThreads) {
      const bool valid = i0 + ii < seq_len;
      sm.lse2[stage][ii] = valid ? lse[lse_head + i0 + ii] * kLog2e : 0.0f;
      sm.delta[stage][ii] = valid ? delta[lse_head + i0 + ii] : 0.0f;
    }
  };

  float dk_acc[kDimTiles][4], dv_acc[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk_acc[d][e] = dv_acc[d][e] = 0.0f;
  }

  load_stage(0);
  for (int i = 0; i < tiles; ++i) {
    // The previous iteration's closing barrier freed the other stage: prefetch into it, then wait
    // for this tile's two copy groups (and K, V) only.
    mma::prefetch_next_then_wait<2>(i, tiles, load_stage);
    __syncthreads();  // every thread's copies (and lse, D_i) of this tile are in
    const int stage = i % 2, i0 = first_query(i);
    if (k0 + slab <= i0 + QB - 1) {  // some of the warp's keys are at or before the tile's last query
      const auto& q_s = sm.stream[stage][0];
      const auto& do_s = sm.stream[stage][1];
      float p[kQueryTiles][4], ds[kQueryTiles][4];  // Pᵀ and dSᵀ: rows = keys, columns = queries
#pragma unroll
      for (int nt = 0; nt < kQueryTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) p[nt][e] = ds[nt][e] = 0.0f;
      }
      mma::product_rows<kQueryTiles, kSteps>(p, sm.own[0], slab, q_s, lane);   // Sᵀ = K·Qᵀ
      mma::product_rows<kQueryTiles, kSteps>(ds, sm.own[1], slab, do_s, lane);  // dPᵀ = V·dOᵀ
#pragma unroll
      for (int nt = 0; nt < kQueryTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int col = 8 * nt + 2 * t + (e & 1), query = i0 + col;
          // P = 0 where the key is after the query or the query is past the end: chosen, not
          // multiplied, so an overflowing exp2 of a masked entry cannot leak in.
          const bool valid = query < seq_len && keys[e / 2] <= query;
          p[nt][e] = valid ? exp2f(p[nt][e] * Cfg::kScaleLog2 - sm.lse2[stage][col]) : 0.0f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - sm.delta[stage][col]);
        }
      }
      product_cols<kDimTiles, kQueryTiles / 2>(dv_acc, p, do_s, lane);  // dV += Pᵀ·dO
      product_cols<kDimTiles, kQueryTiles / 2>(dk_acc, ds, q_s, lane);  // dK += dSᵀ·Q
    }
    __syncthreads();  // this stage's readers are done before it is refilled
  }

  const float scale[2] = {Cfg::kScale, Cfg::kScale}, one[2] = {1.0f, 1.0f};
  store_slab<Cfg::kKvStride>(dk + kv_head, keys, dk_acc, scale, seq_len, t);
  store_slab<Cfg::kKvStride>(dv + kv_head, keys, dv_acc, one, seq_len, t);
}

// ---------------------------------------------------------------------------------------------
// Backward, dQ. Block (x, h, b): queries q0 .. q0 + 63 of head h, the longest rows first; warp w
// owns queries q0 + 16w .. +15. The block streams the key tiles up to its last query, each with
// its V; a warp whose queries all come before a tile's first key skips that tile's products.
template <class S>
__global__ void __launch_bounds__(FlashConfig<S>::kThreadsB, FlashConfig<S>::kDqMinBlocks)
    flash_backward_dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, const float* __restrict__ lse,
                             const float* __restrict__ delta, const bf16* __restrict__ q,
                             const bf16* __restrict__ k, const bf16* __restrict__ v, int seq_len) {
  using Cfg = FlashConfig<S>;
  constexpr int KB = Cfg::kStreamRowsB, kSteps = Cfg::kSteps, kDimTiles = Cfg::kDimTiles, kKeyTiles = KB / 8;
  constexpr int kThreads = Cfg::kThreadsB;
  auto& sm = *reinterpret_cast<BackwardShared<S>*>(hopper::dynamic_shared());

  const int b = blockIdx.z, h = blockIdx.y, g_kv = h / Cfg::kGroup;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * Cfg::kOwnRowsB;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
  const int slab = warp * kWarpRows;
  const int rows[2] = {q0 + slab + g, q0 + slab + g + 8};

  const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * Cfg::kHeadDim;
  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * Cfg::kHeadDim;
  const std::int64_t lse_head = (std::int64_t(b) * S::kHeads + h) * seq_len;
  mma::load_tile_async<kThreads, Cfg::kQStride>(sm.own[0], q + q_head, q0, seq_len);
  mma::load_tile_async<kThreads, Cfg::kQStride>(sm.own[1], dout + q_head, q0, seq_len);
  float lse2[2], delta_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool valid = rows[r] < seq_len;
    lse2[r] = valid ? lse[lse_head + rows[r]] * kLog2e : 0.0f;
    delta_row[r] = valid ? delta[lse_head + rows[r]] : 0.0f;
  }

  float dq_acc[kDimTiles][4];
#pragma unroll
  for (int d = 0; d < kDimTiles; ++d) dq_acc[d][0] = dq_acc[d][1] = dq_acc[d][2] = dq_acc[d][3] = 0.0f;

  const int last_query = min(q0 + Cfg::kOwnRowsB, seq_len) - 1;  // q0 < seq_len by the grid size
  const int tiles = last_query / KB + 1;
  const auto load_stage = [&](int i) {
    mma::load_tile_async<kThreads, Cfg::kKvStride>(sm.stream[i % 2][0], k + kv_head, i * KB, seq_len);
    mma::load_tile_async<kThreads, Cfg::kKvStride>(sm.stream[i % 2][1], v + kv_head, i * KB, seq_len);
  };
  load_stage(0);
  for (int i = 0; i < tiles; ++i) {
    mma::prefetch_next_then_wait<2>(i, tiles, load_stage);  // as in the dK/dV kernel
    __syncthreads();
    const int k0 = i * KB;
    if (k0 <= q0 + slab + kWarpRows - 1) {  // some of the tile's keys are at or before the warp's last query
      const auto& k_s = sm.stream[i % 2][0];
      const auto& v_s = sm.stream[i % 2][1];
      float p[kKeyTiles][4], ds[kKeyTiles][4];
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) p[nt][e] = ds[nt][e] = 0.0f;
      }
      mma::product_rows<kKeyTiles, kSteps>(p, sm.own[0], slab, k_s, lane);   // S = Q·Kᵀ
      mma::product_rows<kKeyTiles, kSteps>(ds, sm.own[1], slab, v_s, lane);  // dP = dO·Vᵀ
#pragma unroll
      for (int nt = 0; nt < kKeyTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2, key = k0 + 8 * nt + 2 * t + (e & 1);
          const bool valid = rows[r] < seq_len && key <= rows[r];
          p[nt][e] = valid ? exp2f(p[nt][e] * Cfg::kScaleLog2 - lse2[r]) : 0.0f;
          ds[nt][e] = p[nt][e] * (ds[nt][e] - delta_row[r]);
        }
      }
      product_cols<kDimTiles, kKeyTiles / 2>(dq_acc, ds, k_s, lane);  // dQ += dS·K
    }
    __syncthreads();  // this stage's readers are done before it is refilled
  }

  const float scale[2] = {Cfg::kScale, Cfg::kScale};
  store_slab<Cfg::kQStride>(dq + q_head, rows, dq_acc, scale, seq_len, t);
}

inline unsigned row_tiles(int seq_len, int rows) { return unsigned((seq_len + rows - 1) / rows); }

}  // namespace detail

// As attention_forward<S> (cuda/attention.cuh), on tensor cores; bf16 only.
template <class S>
void flash_attention_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int batch,
                             int seq_len) {
  using namespace detail;
  detail::check_attention_batch(batch, seq_len, "flash_attention_forward");
  if (batch == 0 || seq_len == 0) return;
  check_pack_aligned<8, bf16>("flash_attention_forward", out, q, k, v);
  const dim3 grid(row_tiles(seq_len, kRowsF), unsigned(S::kHeads), unsigned(batch));
  launch(flash_forward_kernel<S>, grid, FlashConfig<S>::kThreadsF, 0, out, lse, q, k, v, seq_len);
}

// As attention_backward<S>, on tensor cores; bf16 only. `scratch` holds
// attention_backward_scratch_floats<S>(batch, seq_len) floats (D_i, as the reference computes it).
template <class S>
void flash_attention_backward(bf16* dq, bf16* dk, bf16* dv, float* scratch, const bf16* dout, const bf16* out,
                              const float* lse, const bf16* q, const bf16* k, const bf16* v, int batch, int seq_len) {
  using namespace detail;
  detail::check_attention_batch(batch, seq_len, "flash_attention_backward");
  if (batch == 0 || seq_len == 0) return;
  check_pack_aligned<8, bf16>("flash_attention_backward", dq, dk, dv, dout, q, k, v);
  detail::attention_backward_delta<bf16, S>(scratch, dout, out, batch, seq_len);
  constexpr int R = FlashConfig<S>::kOwnRowsB, kThreads = FlashConfig<S>::kThreadsB;
  constexpr std::size_t kShared = sizeof(BackwardShared<S>);
  const dim3 kv_grid(row_tiles(seq_len, R), unsigned(S::kKvHeads), unsigned(batch));
  launch_with_dynamic_shared<flash_backward_dkdv_kernel<S>>(kv_grid, kThreads, kShared, dk, dv, dout, lse, scratch, q,
                                                            k, v, seq_len);
  const dim3 q_grid(row_tiles(seq_len, R), unsigned(S::kHeads), unsigned(batch));
  launch_with_dynamic_shared<flash_backward_dq_kernel<S>>(q_grid, kThreads, kShared, dq, dout, lse, scratch, q, k, v,
                                                          seq_len);
}

}  // namespace gc::tree::cuda
