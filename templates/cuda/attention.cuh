// Causal scaled-dot-product attention with grouped-query heads (GQA) on the GPU, FlashAttention
// style: no T×T matrix is ever stored, every sum runs in fp32, and the backward pass is
// deterministic (no atomics; every output element is owned by one thread group that sums in a
// fixed order, so two runs agree bit for bit). Semantics are those of templates/cpu/attention.hpp.
//
// Shapes: q, out, dq [B, T, H, hd];  k, v, dk, dv [B, T, KV, hd];  lse [B, H, T] (fp32).
// Query head h reads kv head g = h / (H / KV). Query i sees keys j ≤ i. `scale` is passed in
// (usually 1/sqrt(hd)). With s_ij = scale · q_i·k_j:
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
// dq kernels, keys in the dk/dv kernel); each row is owned by a group of TPR = HEAD_DIM / 16
// consecutive lanes, and lane `part` of the group owns the 16 dims part, part + TPR, ...,
// part + 15·TPR (interleaved, so the group reads consecutive shared-memory words: no bank
// conflicts). A dot product over head_dim is 16 FMAs per lane plus a butterfly shuffle over the
// group, which leaves the same sum in every lane of the group.
//
// head_dim: the kernels are templates on HEAD_DIM ∈ {32, 64, 128}; a runtime head_dim is
// rounded up to the next of these and the extra dims are masked (loaded as 0, never stored),
// which leaves every dot product unchanged. So any even head_dim in [2, 128] works (e.g. 16, 48,
// 96 run the 32, 64, 128 kernels); odd or larger head_dims throw gc::rt::RuntimeError.
//
// Launches (default stream; threads = 64 · HEAD_DIM / 16 = 128, 256, 512 for HEAD_DIM 32, 64,
// 128; the streamed shared-memory tile has 64 rows for HEAD_DIM ≤ 64 and 32 rows for 128, so the
// static shared memory stays at or under 32 KiB):
//   forward     grid (ceil(T/64), H, B)    tiles K, V [rows][HEAD_DIM] fp32
//   backward D  grid min(ceil(B·H·T/8), 65535·16) × 256 threads, one warp per query row
//   backward dk/dv  grid (ceil(T/64), KV, B)    tiles Q, dout [rows][HEAD_DIM] fp32 + lse, D
//   backward dq     grid (ceil(T/64), H, B)     tiles K, V [rows][HEAD_DIM] fp32
// The forward and dq grids start with the last query tiles (they have the most key tiles).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cpu/attention.hpp"
#include "cuda/common.cuh"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gcm::cuda {

namespace attention_detail {

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr int kRows = 64;          // rows (queries or keys) owned by one block
inline constexpr int kDimsPerThread = 16;  // head dims held per lane

template <int HEAD_DIM>
struct Config {
  static_assert(HEAD_DIM == 32 || HEAD_DIM == 64 || HEAD_DIM == 128, "HEAD_DIM must be 32, 64 or 128");
  static constexpr int kThreadsPerRow = HEAD_DIM / kDimsPerThread;  // 2, 4, 8
  static constexpr int kThreads = kRows * kThreadsPerRow;           // 128, 256, 512
  static constexpr int kTile = HEAD_DIM <= 64 ? 64 : 32;            // rows of the streamed smem tile
  static_assert(kWarp % kThreadsPerRow == 0, "a row group must not straddle a warp");
  static_assert(kRows % kTile == 0, "query/key tiles must align with the blocks' rows");
};

// Everything the kernels need from AttentionDims, plus the two forms of the scale.
struct Params {
  int seq_len, heads, kv_heads, head_dim, group;
  float scale;       // s = scale · q·k (natural units)
  float scale_log2;  // scale · log2(e): s·log2(e) = scale_log2 · q·k
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
// src + t·row_stride. Rows ≥ seq_len and dims ≥ head_dim become 0. Called by every thread.
template <typename T, int ROWS, int HEAD_DIM, int THREADS>
__device__ __forceinline__ void load_tile(float (*dst)[HEAD_DIM], const T* __restrict__ src, int row0, int seq_len,
                                          std::int64_t row_stride, int head_dim) {
  for (int idx = threadIdx.x; idx < ROWS * HEAD_DIM; idx += THREADS) {
    const int r = idx / HEAD_DIM, c = idx % HEAD_DIM, t = row0 + r;
    dst[r][c] = (t < seq_len && c < head_dim) ? to_float(src[std::int64_t(t) * row_stride + c]) : 0.0f;
  }
}

// The lane's 16 interleaved dims (part + TPR·c) of one row into registers; 0 where !valid or
// the dim is ≥ head_dim.
template <typename T, int TPR>
__device__ __forceinline__ void load_row(float (&dst)[kDimsPerThread], const T* __restrict__ row, bool valid, int part,
                                         int head_dim) {
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) {
    const int dim = part + TPR * c;
    dst[c] = (valid && dim < head_dim) ? to_float(row[dim]) : 0.0f;
  }
}

template <typename T, int TPR>
__device__ __forceinline__ void store_row(T* __restrict__ row, const float (&src)[kDimsPerThread], float factor, int part,
                                          int head_dim) {
#pragma unroll
  for (int c = 0; c < kDimsPerThread; ++c) {
    const int dim = part + TPR * c;
    if (dim < head_dim) row[dim] = from_float<T>(factor * src[c]);
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
template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(Config<HEAD_DIM>::kThreads)
    attention_forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ q,
                             const T* __restrict__ k, const T* __restrict__ v, Params p) {
  using Cfg = Config<HEAD_DIM>;
  constexpr int TPR = Cfg::kThreadsPerRow, BN = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float k_s[BN][HEAD_DIM];
  __shared__ float v_s[BN][HEAD_DIM];

  const int b = blockIdx.z, h = blockIdx.y, g = h / p.group;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int i = q0 + row;  // this group's query; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = i < p.seq_len;

  const std::int64_t q_stride = std::int64_t(p.heads) * p.head_dim;  // between positions
  const std::int64_t kv_stride = std::int64_t(p.kv_heads) * p.head_dim;
  const std::int64_t q_head = std::int64_t(b) * p.seq_len * q_stride + std::int64_t(h) * p.head_dim;
  const std::int64_t kv_head = std::int64_t(b) * p.seq_len * kv_stride + std::int64_t(g) * p.head_dim;
  const std::int64_t q_row = q_head + std::int64_t(row_valid ? i : 0) * q_stride;

  float q_r[DPT];
  load_row<T, TPR>(q_r, q + q_row, row_valid, part, p.head_dim);
  float acc[DPT];
#pragma unroll
  for (int c = 0; c < DPT; ++c) acc[c] = 0.0f;
  float m = -INFINITY;  // running max of s·log2(e)
  float l = 0.0f;       // running Σ 2^(s·log2(e) − m)

  const int last_query = min(q0 + kRows, p.seq_len) - 1;  // q0 < seq_len by the grid size
  for (int k0 = 0; k0 <= last_query; k0 += BN) {  // same trip count in every thread
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, BN, HEAD_DIM, Cfg::kThreads>(k_s, k + kv_head, k0, p.seq_len, kv_stride, p.head_dim);
    load_tile<T, BN, HEAD_DIM, Cfg::kThreads>(v_s, v + kv_head, k0, p.seq_len, kv_stride, p.head_dim);
    __syncthreads();

    float s[BN];  // scores of this tile in log2 units; −inf where masked
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < BN; ++jj) {
      const float dot = group_sum<TPR>(partial_dot<TPR>(q_r, k_s[jj], part));
      const int j = k0 + jj;
      s[jj] = (j <= i && j < p.seq_len) ? dot * p.scale_log2 : -INFINITY;
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
    store_row<T, TPR>(out + q_row, acc, 1.0f / l, part, p.head_dim);
    if (part == 0) lse[(std::int64_t(b) * p.heads + h) * p.seq_len + i] = (m + log2f(l)) * kLn2;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward 1: delta[r] = D_i = Σ_c dout_i[c]·out_i[c] for every query row r = (b·H + h)·T + i
// (the lse order). One warp per row.
template <typename T>
__global__ void attention_backward_delta_kernel(float* __restrict__ delta, const T* __restrict__ dout,
                                                const T* __restrict__ out, Params p, std::int64_t rows) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps_per_block = blockDim.x / kWarp;
  for (std::int64_t r = blockIdx.x * warps_per_block + threadIdx.x / kWarp; r < rows;
       r += std::int64_t(gridDim.x) * warps_per_block) {  // uniform within a warp
    const int i = int(r % p.seq_len);
    const int h = int((r / p.seq_len) % p.heads);
    const std::int64_t b = r / (std::int64_t(p.seq_len) * p.heads);
    const std::int64_t off = ((b * p.seq_len + i) * p.heads + h) * p.head_dim;
    float sum = 0.0f;
    for (int c = lane; c < p.head_dim; c += kWarp) sum += to_float(dout[off + c]) * to_float(out[off + c]);
    sum = warp_sum(sum);
    if (lane == 0) delta[r] = sum;
  }
}

// ---------------------------------------------------------------------------------------------
// Backward 2: dk, dv. Block (x, g, b): keys k0 .. k0+63 of kv head g, k0 = 64·x. Each row group
// holds k_j, v_j and accumulates dk_j, dv_j over the group's query heads (in order) and the
// query tiles from k0 on (in order), query by query.
template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(Config<HEAD_DIM>::kThreads)
    attention_backward_dkdv_kernel(T* __restrict__ dk, T* __restrict__ dv, const T* __restrict__ dout,
                                   const float* __restrict__ lse, const float* __restrict__ delta,
                                   const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                   Params p) {
  using Cfg = Config<HEAD_DIM>;
  constexpr int TPR = Cfg::kThreadsPerRow, BM = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float q_s[BM][HEAD_DIM];
  __shared__ float do_s[BM][HEAD_DIM];
  __shared__ float lse2_s[BM];   // lse_i · log2(e)
  __shared__ float delta_s[BM];  // D_i

  const int b = blockIdx.z, g = blockIdx.y;
  const int k0 = int(blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int j = k0 + row;  // this group's key; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = j < p.seq_len;

  const std::int64_t q_stride = std::int64_t(p.heads) * p.head_dim;
  const std::int64_t kv_stride = std::int64_t(p.kv_heads) * p.head_dim;
  const std::int64_t kv_row =
      std::int64_t(b) * p.seq_len * kv_stride + std::int64_t(g) * p.head_dim + std::int64_t(row_valid ? j : 0) * kv_stride;

  float k_r[DPT], v_r[DPT], dk_acc[DPT], dv_acc[DPT];
  load_row<T, TPR>(k_r, k + kv_row, row_valid, part, p.head_dim);
  load_row<T, TPR>(v_r, v + kv_row, row_valid, part, p.head_dim);
#pragma unroll
  for (int c = 0; c < DPT; ++c) dk_acc[c] = dv_acc[c] = 0.0f;

  for (int h = g * p.group; h < (g + 1) * p.group; ++h) {
    const std::int64_t q_head = std::int64_t(b) * p.seq_len * q_stride + std::int64_t(h) * p.head_dim;
    const std::int64_t lse_head = (std::int64_t(b) * p.heads + h) * p.seq_len;
    // Queries before k0 see none of this block's keys; k0 is a multiple of BM.
    for (int i0 = k0; i0 < p.seq_len; i0 += BM) {  // same trip count in every thread
      __syncthreads();  // the previous tile's readers are done
      load_tile<T, BM, HEAD_DIM, Cfg::kThreads>(q_s, q + q_head, i0, p.seq_len, q_stride, p.head_dim);
      load_tile<T, BM, HEAD_DIM, Cfg::kThreads>(do_s, dout + q_head, i0, p.seq_len, q_stride, p.head_dim);
      for (int ii = threadIdx.x; ii < BM; ii += Cfg::kThreads) {
        const bool valid = i0 + ii < p.seq_len;
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
        const bool valid = i < p.seq_len && j <= i;
        const float P = valid ? exp2f(qk * p.scale_log2 - lse2_s[ii]) : 0.0f;
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
    store_row<T, TPR>(dk + kv_row, dk_acc, p.scale, part, p.head_dim);
    store_row<T, TPR>(dv + kv_row, dv_acc, 1.0f, part, p.head_dim);
  }
}

// ---------------------------------------------------------------------------------------------
// Backward 3: dq. Block (x, h, b): queries q0 .. q0+63 of head h, q0 = 64·(gridDim.x − 1 − x).
// Each row group holds q_i, dout_i, lse_i, D_i and accumulates dq_i over the key tiles in order.
template <typename T, int HEAD_DIM>
__global__ void __launch_bounds__(Config<HEAD_DIM>::kThreads)
    attention_backward_dq_kernel(T* __restrict__ dq, const T* __restrict__ dout, const float* __restrict__ lse,
                                 const float* __restrict__ delta, const T* __restrict__ q, const T* __restrict__ k,
                                 const T* __restrict__ v, Params p) {
  using Cfg = Config<HEAD_DIM>;
  constexpr int TPR = Cfg::kThreadsPerRow, BN = Cfg::kTile, DPT = kDimsPerThread;
  __shared__ float k_s[BN][HEAD_DIM];
  __shared__ float v_s[BN][HEAD_DIM];

  const int b = blockIdx.z, h = blockIdx.y, g = h / p.group;
  const int q0 = int(gridDim.x - 1 - blockIdx.x) * kRows;
  const int row = threadIdx.x / TPR, part = threadIdx.x % TPR;
  const int i = q0 + row;  // this group's query; rows ≥ seq_len compute on zeros and store nothing
  const bool row_valid = i < p.seq_len;

  const std::int64_t q_stride = std::int64_t(p.heads) * p.head_dim;
  const std::int64_t kv_stride = std::int64_t(p.kv_heads) * p.head_dim;
  const std::int64_t q_row = std::int64_t(b) * p.seq_len * q_stride + std::int64_t(h) * p.head_dim +
                             std::int64_t(row_valid ? i : 0) * q_stride;
  const std::int64_t kv_head = std::int64_t(b) * p.seq_len * kv_stride + std::int64_t(g) * p.head_dim;
  const std::int64_t lse_row = (std::int64_t(b) * p.heads + h) * p.seq_len + (row_valid ? i : 0);

  float q_r[DPT], do_r[DPT], dq_acc[DPT];
  load_row<T, TPR>(q_r, q + q_row, row_valid, part, p.head_dim);
  load_row<T, TPR>(do_r, dout + q_row, row_valid, part, p.head_dim);
#pragma unroll
  for (int c = 0; c < DPT; ++c) dq_acc[c] = 0.0f;
  const float lse2 = row_valid ? lse[lse_row] * kLog2e : 0.0f;
  const float delta_i = row_valid ? delta[lse_row] : 0.0f;

  const int last_query = min(q0 + kRows, p.seq_len) - 1;  // q0 < seq_len by the grid size
  for (int k0 = 0; k0 <= last_query; k0 += BN) {  // same trip count in every thread
    __syncthreads();  // the previous tile's readers are done
    load_tile<T, BN, HEAD_DIM, Cfg::kThreads>(k_s, k + kv_head, k0, p.seq_len, kv_stride, p.head_dim);
    load_tile<T, BN, HEAD_DIM, Cfg::kThreads>(v_s, v + kv_head, k0, p.seq_len, kv_stride, p.head_dim);
    __syncthreads();

#pragma unroll 4
    for (int jj = 0; jj < BN; ++jj) {
      const int j = k0 + jj;
      const float qk = group_sum<TPR>(partial_dot<TPR>(q_r, k_s[jj], part));
      const float dp = group_sum<TPR>(partial_dot<TPR>(do_r, v_s[jj], part));  // dout_i·v_j
      const bool valid = row_valid && j <= i;  // implies j < seq_len
      const float P = valid ? exp2f(qk * p.scale_log2 - lse2) : 0.0f;
      const float dS = P * (dp - delta_i);
#pragma unroll
      for (int c = 0; c < DPT; ++c) dq_acc[c] += dS * k_s[jj][part + TPR * c];
    }
  }

  if (row_valid) store_row<T, TPR>(dq + q_row, dq_acc, p.scale, part, p.head_dim);
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Throws gc::rt::RuntimeError for shapes the kernels do not handle.
inline void check_attention_dims(const cpu::AttentionDims& d, const char* who) {
  const auto fail = [&](const std::string& what) {
    throw gc::rt::RuntimeError(std::string(who) + ": " + what + " (batch " + std::to_string(d.batch) + ", seq_len " +
                               std::to_string(d.seq_len) + ", heads " + std::to_string(d.heads) + ", kv_heads " +
                               std::to_string(d.kv_heads) + ", head_dim " + std::to_string(d.head_dim) + ")");
  };
  if (d.head_dim <= 0 || d.head_dim > 128 || d.head_dim % 2 != 0) {
    fail("head_dim must be even and at most 128");
  }
  if (d.heads <= 0 || d.kv_heads <= 0 || d.heads % d.kv_heads != 0) {
    fail("heads must be a positive multiple of kv_heads");
  }
  if (d.batch < 0 || d.seq_len < 0) fail("negative batch or seq_len");
  if (d.heads > 65535 || d.batch > 65535) fail("heads and batch must be at most 65535 (grid limits)");
}

// The compiled HEAD_DIM that serves a (checked) runtime head_dim.
inline int attention_kernel_head_dim(int head_dim) { return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : 128; }

inline Params attention_params(const cpu::AttentionDims& d, float scale) {
  return Params{d.seq_len, d.heads, d.kv_heads, d.head_dim, d.group(), scale, scale * kLog2e};
}

inline unsigned attention_row_tiles(const cpu::AttentionDims& d) { return unsigned((d.seq_len + kRows - 1) / kRows); }

template <typename T, int HEAD_DIM>
void launch_attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const cpu::AttentionDims& d,
                              const Params& p) {
  const dim3 grid(attention_row_tiles(d), unsigned(d.heads), unsigned(d.batch));
  launch(attention_forward_kernel<T, HEAD_DIM>, grid, Config<HEAD_DIM>::kThreads, 0, out, lse, q, k, v, p);
}

template <typename T, int HEAD_DIM>
void launch_attention_backward(T* dq, T* dk, T* dv, const float* delta, const T* dout, const float* lse, const T* q,
                               const T* k, const T* v, const cpu::AttentionDims& d, const Params& p) {
  const dim3 kv_grid(attention_row_tiles(d), unsigned(d.kv_heads), unsigned(d.batch));
  launch(attention_backward_dkdv_kernel<T, HEAD_DIM>, kv_grid, Config<HEAD_DIM>::kThreads, 0, dk, dv, dout, lse, delta,
         q, k, v, p);
  const dim3 q_grid(attention_row_tiles(d), unsigned(d.heads), unsigned(d.batch));
  launch(attention_backward_dq_kernel<T, HEAD_DIM>, q_grid, Config<HEAD_DIM>::kThreads, 0, dq, dout, lse, delta, q, k,
         v, p);
}

}  // namespace attention_detail

// Floats of `scratch` that attention_backward needs: D_i for every query row, [B, H, T].
inline std::size_t attention_backward_scratch_floats(const cpu::AttentionDims& d) {
  return std::size_t(d.batch) * std::size_t(d.heads) * std::size_t(d.seq_len);
}

// out [B, T, H, hd] and lse [B, H, T] (natural log of Σ_j exp(s_ij)) are overwritten.
template <typename T>
void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const cpu::AttentionDims& d,
                       float scale) {
  using namespace attention_detail;
  check_attention_dims(d, "attention_forward");
  if (d.batch == 0 || d.seq_len == 0) return;
  const Params p = attention_params(d, scale);
  switch (attention_kernel_head_dim(d.head_dim)) {
    case 32:
      launch_attention_forward<T, 32>(out, lse, q, k, v, d, p);
      break;
    case 64:
      launch_attention_forward<T, 64>(out, lse, q, k, v, d, p);
      break;
    default:
      launch_attention_forward<T, 128>(out, lse, q, k, v, d, p);
      break;
  }
}

// dq, dk, dv are overwritten (every element, deterministically). `out` and `lse` are the
// forward's outputs; `scratch` holds attention_backward_scratch_floats(d) floats.
template <typename T>
void attention_backward(T* dq, T* dk, T* dv, float* scratch, const T* dout, const T* out, const float* lse, const T* q,
                        const T* k, const T* v, const cpu::AttentionDims& d, float scale) {
  using namespace attention_detail;
  check_attention_dims(d, "attention_backward");
  if (d.batch == 0 || d.seq_len == 0) return;
  const Params p = attention_params(d, scale);

  const std::int64_t rows = std::int64_t(attention_backward_scratch_floats(d));
  constexpr int kDeltaThreads = 256;
  launch(attention_backward_delta_kernel<T>, blocks_for(rows, kDeltaThreads / kWarp), kDeltaThreads, 0, scratch, dout,
         out, p, rows);

  switch (attention_kernel_head_dim(d.head_dim)) {
    case 32:
      launch_attention_backward<T, 32>(dq, dk, dv, scratch, dout, lse, q, k, v, d, p);
      break;
    case 64:
      launch_attention_backward<T, 64>(dq, dk, dv, scratch, dout, lse, q, k, v, d, p);
      break;
    default:
      launch_attention_backward<T, 128>(dq, dk, dv, scratch, dout, lse, q, k, v, d, p);
      break;
  }
}

}  // namespace gcm::cuda
