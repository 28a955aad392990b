// Causal scaled-dot-product attention with grouped-query heads (GQA) on the GPU, FlashAttention
// style: no T×T matrix is ever stored, every sum runs in fp32, and the backward pass is
// deterministic (no atomics; every output element is owned by one thread group that sums in a
// fixed order, so two runs agree bit for bit). Semantics are those of templates/cpu/attention.hpp.
//
// Shapes: q, out, dq [B, T, H, hd];  k, v, dk, dv [B, T, KV, hd];  lse [B, H, T] (fp32).
// Query head h reads kv head g = h / (H / KV). Query i sees keys j ≤ i. With s_ij = scale · q_i·k_j:
//
// Specialized: an attention shape S (AttentionShape below, or a test's own) fixes H = S::kHeads,
// KV = S::kKvHeads, hd = S::kHeadDim and scale = S::kScale at compile time: strides, the GQA
// group, the score scale (also pre-multiplied by log2 e), the register tiles and every head-dim
// loop are constants of the kernel. Only batch and seq_len vary at run time.
//
// Forward (online softmax). One block owns 64 queries of one (b, h) and streams the key/value
// tiles 0 .. causal limit through shared memory. Per query row it keeps a running max m, a
// running sum l = Σ_j exp(s_ij − m) and an unnormalised output o = Σ_j exp(s_ij − m) v_j. For
// each key tile with tile max m~:  m' = max(m, m~),  α = exp(m − m'),
//     l ← α l + Σ_j exp(s_ij − m'),    o ← α o + Σ_j exp(s_ij − m') v_j,    m ← m'.
// At the end out_i = o / l and lse_i = m + log l (natural log). Internally the exponentials are
// exp2 of scores pre-multiplied by log2(e) (exp(x) = 2^(x·log2 e)); lse is stored in nats.
//
// Backward (FlashAttention-2). P_ij = exp(s_ij − lse_i) is recomputed from q, k and lse; with
// dP_ij = dout_i·v_j and D_i = rowsum(dout_i ⊙ out_i) = Σ_j P_ij dP_ij,
//     dS = P ⊙ (dP − D),   dq_i = scale Σ_j dS_ij k_j,
//     dk_j = scale Σ_{h,i} dS_ij q_i,   dv_j = Σ_{h,i} P_ij dout_i   (h over the kv group).
// Three kernels: (1) D_i per (b, h, i) into `scratch`; (2) one block per (b, kv head, 64 keys)
// loops over the group's query heads and the query tiles at or after its keys, accumulating
// dk, dv in registers; (3) one block per (b, h, 64 queries) loops over the key tiles up to the
// causal limit, accumulating dq in registers. S is recomputed in both (2) and (3); nothing is
// shared between blocks, so there are no atomics.
//
// Thread layout (all three tiled kernels). A block has 64 "rows" (queries in the forward and
// dq kernels, keys in the dk/dv kernel); each row is owned by a group of TPR = kTileDim / 16
// consecutive lanes, and lane `part` of the group owns the 16 dims part, part + TPR, ...,
// part + 15·TPR (interleaved, so the group reads consecutive shared-memory words: no bank
// conflicts). A dot product over head_dim is 16 FMAs per lane plus a butterfly shuffle over the
// group, which leaves the same sum in every lane of the group.
//
// head_dim: the register tiles are kTileDim = S::kHeadDim rounded up to 32, 64 or 128 (at
// compile time); the extra dims are masked (loaded as 0, never stored), which leaves every dot
// product unchanged, and for head_dim 32, 64 or 128 the masks fold away. Any even head_dim in
// [2, 128] compiles (a static_assert refuses others).
//
// Launches (default stream; threads = 64 · kTileDim / 16 = 128, 256, 512 for kTileDim 32, 64,
// 128; the streamed shared-memory tile has 64 rows for kTileDim ≤ 64 and 32 rows for 128, so the
// static shared memory stays at or under 32 KiB):
//   forward     grid (ceil(T/64), H, B)    tiles K, V [rows][kTileDim] fp32
//   backward D  grid min(ceil(B·H·T/8), 65535·16) × 256 threads, one warp per query row
//   backward dk/dv  grid (ceil(T/64), KV, B)    tiles Q, dout [rows][kTileDim] fp32 + lse, D
//   backward dq     grid (ceil(T/64), H, B)     tiles K, V [rows][kTileDim] fp32
// The forward and dq grids start with the last query tiles (they have the most key tiles).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "gc/knob.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

// ---- the attention of this experiment (gcompile folds the spec's values into these knobs) ---
struct AttentionShape {
  static constexpr int kHeads = gc::knob<int>("model.n_heads", 4);
  static constexpr int kKvHeads = gc::knob<int>("model.n_kv_heads", 2);
  static constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
  static constexpr float kScale = gc::knob<float>("plan.attn_scale", 0.25f);  // s = scale · q·k
};

namespace detail {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kRows = 64;          // rows (queries or keys) owned by one block
inline constexpr int kDimsPerThread = 16;  // head dims held per lane

// Compile-time layout of shape S's kernels.
template <class S>
struct ReferenceConfig {
  static_assert(S::kHeadDim > 0 && S::kHeadDim <= 128 && S::kHeadDim % 2 == 0, "head_dim must be even, at most 128");
  static_assert(S::kHeads > 0 && S::kKvHeads > 0 && S::kHeads % S::kKvHeads == 0, "heads must be a multiple of kv_heads");
  static constexpr int kHeadDim = S::kHeadDim;
  static constexpr int kTileDim = kHeadDim <= 32 ? 32 : kHeadDim <= 64 ? 64 : 128;  // register tile width
  static constexpr int kThreadsPerRow = kTileDim / kDimsPerThread;  // 2, 4, 8
  static constexpr int kThreads = kRows * kThreadsPerRow;           // 128, 256, 512
  static constexpr int kTile = kTileDim <= 64 ? 64 : 32;            // rows of the streamed smem tile
  static constexpr int kGroup = S::kHeads / S::kKvHeads;            // query heads per kv head
  static constexpr std::int64_t kQStride = std::int64_t(S::kHeads) * kHeadDim;     // between positions of q
  static constexpr std::int64_t kKvStride = std::int64_t(S::kKvHeads) * kHeadDim;  // ... of k, v
  static constexpr float kScale = S::kScale;                        // s = scale · q·k (natural units)
  static constexpr float kScaleLog2 = S::kScale * kLog2e;           // s·log2(e) = kScaleLog2 · q·k
  static_assert(kWarp % kThreadsPerRow == 0, "a row group must not straddle a warp");
  static_assert(kRows % kTile == 0, "query/key tiles must align with the blocks' rows");
};

// Sum over the TPR consecutive lanes of a row group. A butterfly: every lane ends with the same
// bits. All 32 lanes of the warp must call it (it sits outside any divergent branch).
template <int TPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int off = TPR / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Rows [row0, row0 + ROWS) of one head into fp32 shared memory; row t of the head starts at
// src + t·ROW_STRIDE. Rows ≥ seq_len and dims ≥ DIM (the true head_dim) become 0. Called by every
// thread.
template <typename T, int ROWS, int TILE_DIM, int DIM, std::int64_t ROW_STRIDE, int THREADS>
__device__ __forceinline__ void load_tile(float (*dst)[TILE_DIM], const T* __restrict__ src, int row0, int seq_len) {
#pragma unroll 4
  for (int idx = threadIdx.x; idx < ROWS * TILE_DIM; idx += THREADS) {
    const int r = idx / TILE_DIM, c = idx % TILE_DIM, t = row0 + r;
    dst[r][c] = (t < seq_len && (DIM == TILE_DIM || c < DIM)) ? to_float(src[std::int64_t(t) * ROW_STRIDE + c]) : 0.0f;
  }
}

// The lane's 16 interleaved dims (part + TPR·c) of one row into registers; 0 where !valid or
// the dim is ≥ DIM.
template <typename T, int TPR, int DIM>
__device__ __forceinline__ void load_row(float (&dst)[kDimsPerThread], const T* __restrict__ row, bool valid,
                                         int part) {
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) {
    const int dim = part + TPR * c;
    dst[c] = (valid && (DIM == TPR * kDimsPerThread || dim < DIM)) ? to_float(row[dim]) : 0.0f;
  }
}

template <typename T, int TPR, int DIM>
__device__ __forceinline__ void store_row(T* __restrict__ row, const float (&src)[kDimsPerThread], float factor,
                                          int part) {
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) {
    const int dim = part + TPR * c;
    if (DIM == TPR * kDimsPerThread || dim < DIM) row[dim] = from_float<T>(factor * src[c]);
  }
}

// This lane's part of a dot product of its register row with shared-memory row `srow`.
template <int TPR>
__device__ __forceinline__ float partial_dot(const float (&reg)[kDimsPerThread], const float* srow, int part) {
  float acc = 0.0f;
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) acc += reg[c] * srow[part + TPR * c];
  return acc;
}

// ---------------------------------------------------------------------------------------------
// Forward. Block (x, h, b): queries q0 .. q0+63 of head h, q0 = 64·(gridDim.x − 1 − x).
template <typename T, class S>
__global__ void __launch_bounds__(ReferenceConfig<S>::kThreads)
    attention_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ q,
                             const T* __restrict__ k, const T* __restrict__ v, int seq_len) {
  using Cfg = ReferenceConfig<S>;
  constexpr int kTileDim = Cfg::kTileDim, DIM = Cfg::kHeadDim;
  constexpr int TPR = Cfg::kThreadsPerRow, BN = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float k_s[BN][kTileDim];
  __shared__ float v_s[BN][kTileDim];

  const int b = blockIdx.z, h = blockIdx.y, g = h / Cfg::kGroup;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int i = q0 + row;  // this group's query; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = i < seq_len;

  const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * DIM;
  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g) * DIM;
  const std::int64_t q_row = q_head + std::int64_t(row_valid ? i : 0) * Cfg::kQStride;

  float q_r[DPT];
  load_row<T, TPR, DIM>(q_r, q + q_row, row_valid, part);
  float acc[DPT];
#pragma unroll
  for (int c = 0; c < DPT; ++c) acc[c] = 0.0f;
  float m = -INFINITY;  // running max of s·log2(e)
  float l = 0.0f;       // running Σ 2^(s·log2(e) − m)

  const int last_query = min(q0 + kRows, seq_len) - 1;  // q0 < seq_len by the grid size
  for (int k0 = 0; k0 <= last_query; k0 += BN) {  // same trip count in every thread
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, BN, kTileDim, DIM, Cfg::kKvStride, Cfg::kThreads>(k_s, k + kv_head, k0, seq_len);
    load_tile<T, BN, kTileDim, DIM, Cfg::kKvStride, Cfg::kThreads>(v_s, v + kv_head, k0, seq_len);
    __syncthreads();

    float s[BN];  // scores of this tile in log2 units; −inf where masked
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BN; ++jj) {
      const float dot = group_sum<TPR>(partial_dot<TPR>(q_r, k_s[jj], part));
      const int j = k0 + jj;
      s[jj] = (j <= i && j < seq_len) ? dot * Cfg::kScaleLog2 : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    const float m_new = fmaxf(m, tile_max);
    // Key 0 is in the first tile for every row, so m_new is finite from then on; the guard only
    // keeps (−inf) − (−inf) out of a row that has seen no key yet.
    const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m - m_ref);  // 0 on the first tile (m = −inf)
    l *= alpha;
#pragma unroll
    for (int c = 0; c < DPT; ++c) acc[c] *= alpha;
#pragma unroll
    for (int jj = 0; jj < BN; ++jj) {
      const float pj = exp2f(s[jj] - m_ref);  // 0 where masked
      l += pj;
#pragma unroll
      for (int c = 0; c < DPT; ++c) acc[c] += pj * v_s[jj][part + TPR * c];
    }
    m = m_new;
  }

  if (row_valid) {
    store_row<T, TPR, DIM>(out + q_row, acc, 1.0f / l, part);
    if (part == 0) lse[(std::int64_t(b) * S::kHeads + h) * seq_len + i] = (m + log2f(l)) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward 1: delta[r] = D_i = Σ_c dout_i[c]·out_i[c] for every query row r = (b·H + h)·T + i
// (the lse order). One warp per row.
template <typename T, class S>
__global__ void attention_backward_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout,
                                                const T* __restrict__ out, int seq_len, std::int64_t rows) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps_per_block = blockDim.x / kWarp;
  for (std::int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < rows;
       r += std::int64_t(gridDim.x) * warps_per_block) {  // uniform within a warp
    const int i = int(r % seq_len);
    const int h = int((r / seq_len) % S::kHeads);
    const std::int64_t b = r / (std::int64_t(seq_len) * S::kHeads);
    const std::int64_t off = ((b * seq_len + i) * S::kHeads + h) * S::kHeadDim;
    float sum = 0.0f;
#pragma unroll
    for (int c = lane; c < S::kHeadDim; c += kWarp) sum += to_float(dout[off + c]) * to_float(out[off + c]);
    sum = warp_sum(sum);
    if (lane == 0) delta[r] = sum;
  }
}

// The same D_i read in 16-byte packs (issue 38: the tensor-core backwards' delta pass): kLanes =
// head_dim / kVec lanes a row, a power of two of at most 32, so that a warp holds kRowsPerWarp
// rows as aligned groups of lanes and each group's shuffle tree adds its products in a fixed order.
template <typename T, class S>
struct DeltaPacks {
  static constexpr int kVec = row_pack<T>(S::kHeadDim);
  static constexpr int kLanes = S::kHeadDim / kVec;
  static constexpr bool kApplies = kVec > 1 && kLanes <= kWarp && (kLanes & (kLanes - 1)) == 0;
  static constexpr int kRowsPerWarp = kApplies ? kWarp / kLanes : 1;
};

template <typename T, class S>
__global__ void attention_backward_delta_packed_kernel(float* __restrict__ delta, const T* __restrict__ dout,
                                                       const T* __restrict__ out, int seq_len, std::int64_t rows) {
  using P = DeltaPacks<T, S>;
  static_assert(P::kApplies, "attention_backward_delta_packed_kernel: head_dim / pack must be a power of two <= 32");
  const int lane = threadIdx.x % kWarp, part = lane % P::kLanes;
  const std::int64_t rows_per_block = std::int64_t(blockDim.x / kWarp) * P::kRowsPerWarp;
  // The loop bound is the warp's first row, so that every lane of a warp runs every shuffle.
  for (std::int64_t base = blockIdx.x * rows_per_block + (threadIdx.x / kWarp) * P::kRowsPerWarp; base < rows;
       base += std::int64_t(gridDim.x) * rows_per_block) {
    const std::int64_t r = base + lane / P::kLanes;
    float sum = 0.0f;
    if (r < rows) {
      const int i = int(r % seq_len);
      const int h = int((r / seq_len) % S::kHeads);
      const std::int64_t b = r / (std::int64_t(seq_len) * S::kHeads);
      const std::int64_t off = ((b * seq_len + i) * S::kHeads + h) * S::kHeadDim + std::int64_t(part) * P::kVec;
      float d[P::kVec], o[P::kVec];
      load_pack<P::kVec>(d, dout + off);
      load_pack<P::kVec>(o, out + off);
#pragma unroll
      for (int e = 0; e < P::kVec; ++e) sum += d[e] * o[e];
    }
#pragma unroll
    for (int width = P::kLanes / 2; width > 0; width /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, width);
    if (r < rows && part == 0) delta[r] = sum;
  }
}

// D_i of every query row into `delta` (attention_backward_scratch_floats<S> floats): in packs where
// DeltaPacks applies and dout and out start on a pack's boundary, else one warp a row.
template <typename T, class S>
void attention_backward_delta(float* delta, const T* dout, const T* out, int batch, int seq_len) {
  const std::int64_t rows = std::int64_t(batch) * S::kHeads * seq_len;
  constexpr int kThreads = 256;
  using P = DeltaPacks<T, S>;
  if constexpr (P::kApplies) {
    if (packs_aligned<P::kVec, T>(dout, out)) {
      launch(attention_backward_delta_packed_kernel<T, S>, blocks_for(rows, kThreads / kWarp * P::kRowsPerWarp),
             kThreads, 0, delta, dout, out, seq_len, rows);
      return;
    }
  }
  launch(attention_backward_delta_kernel<T, S>, blocks_for(rows, kThreads / kWarp), kThreads, 0, delta, dout, out,
         seq_len, rows);
}

// ---------------------------------------------------------------------------------------------
// Backward 2: dk, dv. Block (x, g, b): keys k0 .. k0+63 of kv head g, k0 = 64·x. Each row group
// holds k_j, v_j and accumulates dk_j, dv_j over the group's query heads (in order) and the
// query tiles from k0 on (in order), query by query.
template <typename T, class S>
__global__ void __launch_bounds__(ReferenceConfig<S>::kThreads)
    attention_backward_dkdv_kernel(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ dout,
                                   const float* __restrict__ lse, const float* __restrict__ delta,
                                   const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   int seq_len) {
  using Cfg = ReferenceConfig<S>;
  constexpr int kTileDim = Cfg::kTileDim, DIM = Cfg::kHeadDim;
  constexpr int TPR = Cfg::kThreadsPerRow, BM = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float q_s[BM][kTileDim];
  __shared__ float do_s[BM][kTileDim];
  __shared__ float lse2_s[BM];   // lse_i · log2(e)
  __shared__ float delta_s[BM];  // D_i

  const int b = blockIdx.z, g = blockIdx.y;
  const int k0 = int(blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int j = k0 + row;  // this group's key; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = j < seq_len;

  const std::int64_t kv_row = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g) * DIM +
                              std::int64_t(row_valid ? j : 0) * Cfg::kKvStride;

  float k_r[DPT], v_r[DPT], dk_acc[DPT], dv_acc[DPT];
  load_row<T, TPR, DIM>(k_r, k + kv_row, row_valid, part);
  load_row<T, TPR, DIM>(v_r, v + kv_row, row_valid, part);
#pragma unroll
  for (int c = 0; c < DPT; ++c) dk_acc[c] = dv_acc[c] = 0.0f;

  for (int h = g * Cfg::kGroup; h < (g + 1) * Cfg::kGroup; ++h) {
    const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * DIM;
    const std::int64_t lse_head = (std::int64_t(b) * S::kHeads + h) * seq_len;
    // Queries before k0 see none of this block's keys; k0 is a multiple of BM.
    for (int i0 = k0; i0 < seq_len; i0 += BM) {  // same trip count in every thread
      __syncthreads();  // the previous tile's readers are done
      load_tile<T, BM, kTileDim, DIM, Cfg::kQStride, Cfg::kThreads>(q_s, q + q_head, i0, seq_len);
      load_tile<T, BM, kTileDim, DIM, Cfg::kQStride, Cfg::kThreads>(do_s, dout + q_head, i0, seq_len);
      for (int ii = threadIdx.x; ii < BM; ii += Cfg::kThreads) {
        const bool valid = i0 + ii < seq_len;
        lse2_s[ii] = valid ? lse[lse_head + i0 + ii] * kLog2e : 0.0f;
        delta_s[ii] = valid ? delta[lse_head + i0 + ii] : 0.0f;
      }
      __syncthreads();

#pragma unroll 4
      for (int ii = 0; ii < BM; ++ii) {
        const int i = i0 + ii;
        const float qk = group_sum<TPR>(partial_dot<TPR>(k_r, q_s[ii], part));
        const float dp = group_sum<TPR>(partial_dot<TPR>(v_r, do_s[ii], part));  // dout_i·v_j
        // i < seq_len and j ≤ i (which implies j < seq_len); P = 0 elsewhere, chosen, not
        // multiplied, so an overflowing exp2 of a masked entry cannot leak in.
        const bool valid = i < seq_len && j <= i;
        const float P = valid ? exp2f(qk * Cfg::kScaleLog2 - lse2_s[ii]) : 0.0f;
        const float dS = P * (dp - delta_s[ii]);
#pragma unroll
        for (int c = 0; c < DPT; ++c) {
          dv_acc[c] += P * do_s[ii][part + TPR * c];
          dk_acc[c] += dS * q_s[ii][part + TPR * c];
        }
      }
    }
  }

  if (row_valid) {
    store_row<T, TPR, DIM>(dk + kv_row, dk_acc, Cfg::kScale, part);
    store_row<T, TPR, DIM>(dv + kv_row, dv_acc, 1.0f, part);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward 3: dq. Block (x, h, b): queries q0 .. q0+63 of head h, q0 = 64·(gridDim.x − 1 − x).
// Each row group holds q_i, dout_i, lse_i, D_i and accumulates dq_i over the key tiles in order.
template <typename T, class S>
__global__ void __launch_bounds__(ReferenceConfig<S>::kThreads)
    attention_backward_dq_kernel(T* __restrict__ dq, const T* __restrict__ dout, const float* __restrict__ lse,
                                 const float* __restrict__ delta, const T* __restrict__ q, const T* __restrict__ k,
                                 const T* __restrict__ v, int seq_len) {
  using Cfg = ReferenceConfig<S>;
  constexpr int kTileDim = Cfg::kTileDim, DIM = Cfg::kHeadDim;
  constexpr int TPR = Cfg::kThreadsPerRow, BN = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float k_s[BN][kTileDim];
  __shared__ float v_s[BN][kTileDim];

  const int b = blockIdx.z, h = blockIdx.y, g = h / Cfg::kGroup;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int i = q0 + row;  // this group's query; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = i < seq_len;

  const std::int64_t q_row = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * DIM +
                             std::int64_t(row_valid ? i : 0) * Cfg::kQStride;
  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g) * DIM;
  const std::int64_t lse_row = (std::int64_t(b) * S::kHeads + h) * seq_len + (row_valid ? i : 0);

  float q_r[DPT], do_r[DPT], dq_acc[DPT];
  load_row<T, TPR, DIM>(q_r, q + q_row, row_valid, part);
  load_row<T, TPR, DIM>(do_r, dout + q_row, row_valid, part);
#pragma unroll
  for (int c = 0; c < DPT; ++c) dq_acc[c] = 0.0f;
  const float lse2 = row_valid ? lse[lse_row] * kLog2e : 0.0f;
  const float delta_i = row_valid ? delta[lse_row] : 0.0f;

  const int last_query = min(q0 + kRows, seq_len) - 1;  // q0 < seq_len by the grid size
  for (int k0 = 0; k0 <= last_query; k0 += BN) {  // same trip count in every thread
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, BN, kTileDim, DIM, Cfg::kKvStride, Cfg::kThreads>(k_s, k + kv_head, k0, seq_len);
    load_tile<T, BN, kTileDim, DIM, Cfg::kKvStride, Cfg::kThreads>(v_s, v + kv_head, k0, seq_len);
    __syncthreads();

#pragma unroll 4
    for (int jj = 0; jj < BN; ++jj) {
      const int j = k0 + jj;
      const float qk = group_sum<TPR>(partial_dot<TPR>(q_r, k_s[jj], part));
      const float dp = group_sum<TPR>(partial_dot<TPR>(do_r, v_s[jj], part));  // dout_i·v_j
      const bool valid = row_valid && j <= i;  // implies j < seq_len
      const float P = valid ? exp2f(qk * Cfg::kScaleLog2 - lse2) : 0.0f;
      const float dS = P * (dp - delta_i);
#pragma unroll
      for (int c = 0; c < DPT; ++c) dq_acc[c] += dS * k_s[jj][part + TPR * c];
    }
  }

  if (row_valid) store_row<T, TPR, DIM>(dq + q_row, dq_acc, Cfg::kScale, part);
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Throws gc::rt::RuntimeError for a batch the grid cannot hold.
inline void check_attention_batch(int batch, int seq_len, const char* who) {
  if (batch < 0 || seq_len < 0 || batch > 65535) {
    throw gc::rt::RuntimeError(std::string(who) + ": batch must be in [0, 65535] and seq_len non-negative (batch " +
                               std::to_string(batch) + ", seq_len " + std::to_string(seq_len) + ")");
  }
}

inline unsigned attention_row_tiles(int seq_len) { return unsigned((seq_len + kRows - 1) / kRows); }

}  // namespace detail

// Floats of `scratch` that attention_backward<S> needs: D_i for every query row, [B, H, T].
template <class S>
std::size_t attention_backward_scratch_floats(int batch, int seq_len) {
  return std::size_t(batch) * std::size_t(S::kHeads) * std::size_t(seq_len);
}

// out [B, T, H, hd] and lse [B, H, T] (natural log of Σ_j exp(s_ij)) are overwritten.
template <class S, typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, int batch, int seq_len) {
  using namespace detail;
  check_attention_batch(batch, seq_len, "attention_forward");
  if (batch == 0 || seq_len == 0) return;
  const dim3 grid(attention_row_tiles(seq_len), unsigned(S::kHeads), unsigned(batch));
  launch(attention_forward_kernel<T, S>, grid, ReferenceConfig<S>::kThreads, 0, out, lse, q, k, v, seq_len);
}

// dq, dk, dv are overwritten (every element, deterministically). `out` and `lse` are the
// forward's outputs; `scratch` holds attention_backward_scratch_floats<S>(batch, seq_len) floats.
template <class S, typename T>
void attention_backward(T* dq, T* dk, T* dv, float* scratch, const T* dout, const T* out, const float* lse, const T* q,
                        const T* k, const T* v, int batch, int seq_len) {
  using namespace detail;
  check_attention_batch(batch, seq_len, "attention_backward");
  if (batch == 0 || seq_len == 0) return;
  const std::int64_t rows = std::int64_t(attention_backward_scratch_floats<S>(batch, seq_len));
  constexpr int kDeltaThreads = 256;
  launch(attention_backward_delta_kernel<T, S>, blocks_for(rows, kDeltaThreads / kWarp), kDeltaThreads, 0, scratch,
         dout, out, seq_len, rows);
  const dim3 kv_grid(attention_row_tiles(seq_len), unsigned(S::kKvHeads), unsigned(batch));
  launch(attention_backward_dkdv_kernel<T, S>, kv_grid, ReferenceConfig<S>::kThreads, 0, dk, dv, dout, lse, scratch, q, k, v,
         seq_len);
  const dim3 q_grid(attention_row_tiles(seq_len), unsigned(S::kHeads), unsigned(batch));
  launch(attention_backward_dq_kernel<T, S>, q_grid, ReferenceConfig<S>::kThreads, 0, dq, dout, lse, scratch, q, k, v, seq_len);
}

}  // namespace gc::tree::cuda
