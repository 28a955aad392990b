// Causal GQA attention backward for Hopper (sm_90a) on warpgroup MMAs (cuda/wgmma.cuh), issue 38's
// item 3: the semantics, inputs (lse, D_i = rowsum(dO ∘ O)) and outputs of flash_attention_backward
// (cuda/flash_attention.cuh), with every tile product a wgmma of one warpgroup.
//
// Two kernels, as the mma.sync backward, so that every result is written by one block in a fixed
// order (no atomics, bit-identical reruns): seven tile products per (query tile, key tile) pair,
// where FlashAttention-2 runs five and adds dQ with atomics. A block runs WG warpgroups (2 by
// default, 1 as a variant the bench times), each owning 64 of the block's keys (dK/dV) or queries
// (dQ) and all sharing the streamed tiles; the results do not depend on WG.
//   dK/dV, block (x, g, b): keys k0 .. k0+64·WG−1 of kv head g (K and V held in shared memory); for
//     each query head of the group in order and each 64-query tile at or after k0 (two cp.async stages):
//       Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ                     (shared × shared, m64n64k16)
//       Pᵀ = exp2(Sᵀ·scale·log2e − lse·log2e), dSᵀ = Pᵀ ∘ (dPᵀ − D_i)   (masked entries chosen 0)
//       dV += Pᵀ·dO, dK += dSᵀ·Q                   (Pᵀ, dSᵀ from registers, m64nDk16)
//   dQ, block (x, h, b): queries q0 .. q0+64·WG−1 of head h (Q and dO held), the longest rows first;
//     for each 64-key tile up to the block's diagonal: S = Q·Kᵀ, dP = dO·Vᵀ, P, dS, then dQ += dS·K.
// dK and dQ are scaled by the softmax scale once, at the store.
//
// Shared tiles: [64 rows][D] bf16 in 8×16-byte core matrices, core matrix (row/8, d/8) at
// (D/8)·128·(row/8) + 128·(d/8) (cuda/attention_sm90.cuh's load_tile). The same bytes serve as a
// K-major operand (rows = M or N, k = d: LBO 128, SBO (D/8)·128) and as an MN-major B operand
// (n = d, k = row: LBO (D/8)·128, SBO 128), since both read core matrices of 8 rows × 8 contiguous
// d; so Q, dO and K are each stored once for the two products that read them.
//
// Built for sm_90a only (wgmma): elsewhere the kernel bodies trap; attention_sm90_supported says
// which shapes they take (head_dim 64 or 128, bf16).
#pragma once

#include <cmath>
#include <cstdint>

#include "cuda/attention.cuh"
#include "cuda/attention_sm90.cuh"
#include "cuda/common.cuh"
#include "cuda/hopper.cuh"
#include "cuda/mma.cuh"
#include "cuda/wgmma.cuh"

namespace gc::tree::cuda {

namespace sm90 {

// The backward's dynamic shared memory: two held tiles per warpgroup (warpgroup j's at 2j and
// 2j + 1), two stages of two streamed tiles and, for dK/dV, each stage's lse (log2 units) and D_i
// of its 64 queries.
template <class S, int WG>
struct BackwardLayout {
  static constexpr std::size_t kTile = Config<S>::kTileBytes;
  static constexpr std::size_t kHeld = 0, kStream = 2 * WG * kTile, kRowStats = kStream + 4 * kTile;
  static constexpr std::size_t kBytes = kRowStats + 2 * 2 * kRows * sizeof(float);
  // Warpgroup j's first held tile (its second one follows), and streamed tile i's first tile.
  __device__ static unsigned char* held(unsigned char* smem, int j) {
    return smem + kHeld + std::size_t(2 * j) * kTile;
  }
  __device__ static unsigned char* stream(unsigned char* smem, int i) {
    return smem + kStream + std::size_t(i % 2) * 2 * kTile;
  }
};

template <class S, int WG>
__global__ void __launch_bounds__(WG * kThreads)
    backward_dkdv_kernel(bf16* __restrict__ dk, bf16* __restrict__ dv, const bf16* __restrict__ dout,
                         const float* __restrict__ lse, const float* __restrict__ delta, const bf16* __restrict__ q,
                         const bf16* __restrict__ k, const bf16* __restrict__ v, int seq_len) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  using Cfg = Config<S>;
  using L = BackwardLayout<S, WG>;
  constexpr int D = Cfg::kD, kBlockThreads = WG * kThreads;
  unsigned char* smem = hopper::dynamic_shared();
  const int t = int(threadIdx.x), wg = t / kThreads, w = (t % kThreads) / 32, g = (t % 32) / 4, qd = t % 4;
  unsigned char* k_s = L::held(smem, wg);  // this warpgroup's keys
  unsigned char* v_s = k_s + L::kTile;
  const auto q_stage = [&](int i) { return L::stream(smem, i); };
  const auto do_stage = [&](int i) { return L::stream(smem, i) + L::kTile; };
  float* row_stats = reinterpret_cast<float*>(smem + L::kRowStats);  // [stage][lse2 | delta][64]
  const auto lse2_stage = [&](int i) { return row_stats + (i % 2) * 2 * kRows; };
  const auto delta_stage = [&](int i) { return lse2_stage(i) + kRows; };

  const int b = blockIdx.z, g_kv = blockIdx.y, block_k0 = int(blockIdx.x) * WG * kRows;
  const int k0 = block_k0 + wg * kRows;                         // this warpgroup's first key
  const int keys[2] = {k0 + 16 * w + g, k0 + 16 * w + g + 8};  // this thread's accumulator rows

  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * D;
  load_warpgroup_tiles<Cfg, Cfg::kKvStride, WG>(L::held(smem, 0), 2 * L::kTile, k + kv_head, block_k0, seq_len);
  load_warpgroup_tiles<Cfg, Cfg::kKvStride, WG>(L::held(smem, 0) + L::kTile, 2 * L::kTile, v + kv_head, block_k0,
                                                seq_len);

  // Streamed tile i: query head g·G + i / tiles_per_head, queries i0 .. i0 + 63 (i0 ≥ block_k0:
  // earlier queries see none of these keys; a warpgroup whose keys all come after a tile's last
  // query multiplies it anyway, its mask zeroing every entry).
  const int tiles_per_head = (seq_len - block_k0 + kRows - 1) / kRows, tiles = Cfg::kGroup * tiles_per_head;
  const auto first_query = [&](int i) { return block_k0 + (i % tiles_per_head) * kRows; };
  const auto load_stage = [&](int i) {  // one cp.async group per tile (Q and dO); lse and D_i stored
    const int h = g_kv * Cfg::kGroup + i / tiles_per_head, i0 = first_query(i);
    const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * D;
    const std::int64_t lse_head = (std::int64_t(b) * S::kHeads + h) * seq_len;
    load_tile_async<Cfg, Cfg::kQStride, true, kBlockThreads>(q_stage(i), q + q_head, i0, seq_len);
    load_tile_async<Cfg, Cfg::kQStride, true, kBlockThreads>(do_stage(i), dout + q_head, i0, seq_len);
    mma::cp_async_commit();
    for (int c = t; c < kRows; c += kBlockThreads) {
      const bool valid = i0 + c < seq_len;
      lse2_stage(i)[c] = valid ? lse[lse_head + i0 + c] * detail::kLog2e : 0.0f;
      delta_stage(i)[c] = valid ? delta[lse_head + i0 + c] : 0.0f;
    }
  };

  float dk_acc[D / 2], dv_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk_acc[i] = dv_acc[i] = 0.0f;

  load_stage(0);
  for (int i = 0; i < tiles; ++i) {
    // The previous iteration's closing barrier freed the other stage: prefetch into it, then wait
    // for this tile's group only.
    mma::prefetch_next_then_wait<1>(i, tiles, load_stage);
    hopper::fence_proxy_async();  // the copies and stores are visible to wgmma's async proxy
    __syncthreads();
    const int i0 = first_query(i);
    const unsigned char* q_s = q_stage(i);
    const unsigned char* do_s = do_stage(i);
    const float* lse2 = lse2_stage(i);
    const float* delta_s = delta_stage(i);

    float p[kRows / 2], ds[kRows / 2];  // Pᵀ and dSᵀ: rows = keys, columns = queries
    wgmma::fence();
    product_over_d<Cfg>(p, k_s, q_s);    // Sᵀ = K·Qᵀ
    product_over_d<Cfg>(ds, v_s, do_s);  // dPᵀ = V·dOᵀ
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int e = 0; e < kRows / 2; ++e) {
      const int col = 8 * (e / 4) + 2 * qd + (e % 2), query = i0 + col;
      // Chosen, not multiplied: an overflowing exp2 of a masked entry cannot leak in.
      const bool valid = query < seq_len && keys[(e / 2) % 2] <= query;
      p[e] = valid ? exp2f(p[e] * Cfg::kScaleLog2 - lse2[col]) : 0.0f;
      ds[e] = p[e] * (ds[e] - delta_s[col]);
    }
    AFragments p_a, ds_a;
    accumulator_as_a(p_a, p);
    accumulator_as_a(ds_a, ds);
    wgmma::fence();
    product_with_rows<Cfg>(dv_acc, p_a, do_s);  // dV += Pᵀ·dO
    product_with_rows<Cfg>(dk_acc, ds_a, q_s);  // dK += dSᵀ·Q
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // every thread's products are done before this stage is refilled
  }

  store_rows<Cfg, Cfg::kKvStride>(dk + kv_head, dk_acc, k0, {S::kScale, S::kScale}, seq_len);
  store_rows<Cfg, Cfg::kKvStride>(dv + kv_head, dv_acc, k0, {1.0f, 1.0f}, seq_len);
#else
  __trap();  // built for an architecture without wgmma
#endif
}

template <class S, int WG>
__global__ void __launch_bounds__(WG * kThreads)
    backward_dq_kernel(bf16* __restrict__ dq, const bf16* __restrict__ dout, const float* __restrict__ lse,
                       const float* __restrict__ delta, const bf16* __restrict__ q, const bf16* __restrict__ k,
                       const bf16* __restrict__ v, int seq_len) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  using Cfg = Config<S>;
  using L = BackwardLayout<S, WG>;
  constexpr int D = Cfg::kD, kBlockThreads = WG * kThreads;
  unsigned char* smem = hopper::dynamic_shared();
  const int t = int(threadIdx.x), wg = t / kThreads, w = (t % kThreads) / 32, g = (t % 32) / 4, qd = t % 4;
  unsigned char* q_s = L::held(smem, wg);  // this warpgroup's queries
  unsigned char* do_s = q_s + L::kTile;
  const auto k_stage = [&](int i) { return L::stream(smem, i); };
  const auto v_stage = [&](int i) { return L::stream(smem, i) + L::kTile; };

  const int b = blockIdx.z, h = blockIdx.y, g_kv = h / Cfg::kGroup;
  const int block_q0 = int(gridDim.x - 1 - blockIdx.x) * WG * kRows;
  const int q0 = block_q0 + wg * kRows;
  const int rows[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};

  const std::int64_t q_head = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * D;
  const std::int64_t kv_head = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * D;
  const std::int64_t lse_head = (std::int64_t(b) * S::kHeads + h) * seq_len;
  load_warpgroup_tiles<Cfg, Cfg::kQStride, WG>(L::held(smem, 0), 2 * L::kTile, q + q_head, block_q0, seq_len);
  load_warpgroup_tiles<Cfg, Cfg::kQStride, WG>(L::held(smem, 0) + L::kTile, 2 * L::kTile, dout + q_head, block_q0,
                                               seq_len);
  float lse2[2], delta_row[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const bool valid = rows[r] < seq_len;
    lse2[r] = valid ? lse[lse_head + rows[r]] * detail::kLog2e : 0.0f;
    delta_row[r] = valid ? delta[lse_head + rows[r]] : 0.0f;
  }

  float dq_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dq_acc[i] = 0.0f;

  const int last_query = min(block_q0 + WG * kRows, seq_len) - 1;  // block_q0 < seq_len by the grid size
  const int tiles = last_query / kRows + 1;
  const auto load_stage = [&](int i) {  // one cp.async group per tile (K and V)
    load_tile_async<Cfg, Cfg::kKvStride, true, kBlockThreads>(k_stage(i), k + kv_head, i * kRows, seq_len);
    load_tile_async<Cfg, Cfg::kKvStride, true, kBlockThreads>(v_stage(i), v + kv_head, i * kRows, seq_len);
    mma::cp_async_commit();
  };
  load_stage(0);
  for (int i = 0; i < tiles; ++i) {
    mma::prefetch_next_then_wait<1>(i, tiles, load_stage);  // as in the dK/dV kernel
    hopper::fence_proxy_async();
    __syncthreads();
    const int k0 = i * kRows;
    const unsigned char* k_s = k_stage(i);

    float p[kRows / 2], ds[kRows / 2];
    wgmma::fence();
    product_over_d<Cfg>(p, q_s, k_s);           // S = Q·Kᵀ
    product_over_d<Cfg>(ds, do_s, v_stage(i));  // dP = dO·Vᵀ
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int e = 0; e < kRows / 2; ++e) {
      const int r = (e / 2) % 2, key = k0 + 8 * (e / 4) + 2 * qd + (e % 2);
      const bool valid = rows[r] < seq_len && key <= rows[r];
      p[e] = valid ? exp2f(p[e] * Cfg::kScaleLog2 - lse2[r]) : 0.0f;
      ds[e] = p[e] * (ds[e] - delta_row[r]);
    }
    AFragments ds_a;
    accumulator_as_a(ds_a, ds);
    wgmma::fence();
    product_with_rows<Cfg>(dq_acc, ds_a, k_s);  // dQ += dS·K
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // every thread's products are done before this stage is refilled
  }

  store_rows<Cfg, Cfg::kQStride>(dq + q_head, dq_acc, q0, {S::kScale, S::kScale}, seq_len);
#else
  __trap();  // built for an architecture without wgmma
#endif
}

}  // namespace sm90

// As flash_attention_backward<S>, on Hopper's warpgroup MMAs (the binary must contain sm_90a
// code), WG warpgroups a block (2, or 1: the bench's variant). `scratch` holds
// attention_backward_scratch_floats<S>(batch, seq_len) floats (D_i).
template <class S, int WG = 2>
void attention_sm90_backward(bf16* dq, bf16* dk, bf16* dv, float* scratch, const bf16* dout, const bf16* out,
                             const float* lse, const bf16* q, const bf16* k, const bf16* v, int batch, int seq_len) {
  static_assert(attention_sm90_supported<S, bf16>(), "attention_sm90_backward: head_dim 64 or 128");
  static_assert(WG == 1 || WG == 2, "attention_sm90_backward: 1 or 2 warpgroups a block");
  detail::check_attention_batch(batch, seq_len, "attention_sm90_backward");
  if (batch == 0 || seq_len == 0) return;
  check_pack_aligned<8, bf16>("attention_sm90_backward", dq, dk, dv, dout, q, k, v);
  detail::attention_backward_delta<bf16, S>(scratch, dout, out, batch, seq_len);
  constexpr std::size_t kSmem = sm90::BackwardLayout<S, WG>::kBytes;
  constexpr int kRowsPerBlock = WG * sm90::kRows, kThreads = WG * sm90::kThreads;
  const dim3 kv_grid(detail::row_tiles(seq_len, kRowsPerBlock), unsigned(S::kKvHeads), unsigned(batch));
  launch_with_dynamic_shared<sm90::backward_dkdv_kernel<S, WG>>(kv_grid, kThreads, kSmem, dk, dv, dout, lse, scratch,
                                                                q, k, v, seq_len);
  const dim3 q_grid(detail::row_tiles(seq_len, kRowsPerBlock), unsigned(S::kHeads), unsigned(batch));
  launch_with_dynamic_shared<sm90::backward_dq_kernel<S, WG>>(q_grid, kThreads, kSmem, dq, dout, lse, scratch, q, k,
                                                              v, seq_len);
}

}  // namespace gc::tree::cuda
