// Causal GQA attention forward for Hopper (sm_90a) on warpgroup MMAs (cuda/wgmma.cuh), issue 38's
// first step: the semantics, layouts and lse of flash_forward_kernel (cuda/flash_attention.cuh),
// with S = Q·Kᵀ and O += P·V as wgmma instructions of a whole warpgroup instead of mma.sync per
// warp. Block (x, h, b): WG warpgroups of 128 threads (2 by default, as FlashAttention-3's 128-query
// blocks), warpgroup j owning 64 queries from q0 + 64·j, q0 = 64·WG·(gridDim.x − 1 − x) (the
// longest rows first); key tiles of 64 up to the block's diagonal, each loaded once for all WG
// warpgroups (the one with the earlier queries multiplies a last tile its mask zeroes entirely).
//
// Shared memory (dynamic, no swizzle; core matrices of 8 rows × 16 bytes):
//   Q [64 queries][D] per warpgroup, K [64 keys][D]: K-major operands (A and B of S = Q·Kᵀ), core matrix
//     (row/8, d/8) at (D/8)·128·(row/8) + 128·(d/8): LBO 128, SBO (D/8)·128;
//   V [64 keys][D]: the MN-major B of O += P·V (B[n = d][k = key], d contiguous), core matrix
//     (d/8, key/8) at 128·(d/8) + (D/8)·128·(key/8): SBO 128, LBO (D/8)·128.
// Each k-step of 16 advances a descriptor's start by two core matrices along k.
// P stays in registers: the S accumulator (thread t: rows 16w + g and + 8, columns 8j + 2q, + 1)
// packed in bf16 pairs is the register-A operand of the next product (mma_bf16_rs).
// Q is loaded by the threads (16-byte vectors; rows past seq_len are zeros); K and V go through
// two stages with cp.async, the next tile's copies in flight during this tile's MMAs, then
// fence.proxy.async and a barrier before they are read (the next steps: TMA or cp.async.bulk,
// producer/consumer warpgroups).
//
// Built for sm_90a only (wgmma): elsewhere the kernel body traps; attention_sm90_supported says
// which shapes it takes (head_dim 64 or 128, bf16).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/kernel_rules.hpp"
#include "cuda/common.cuh"
#include "cuda/flash_attention.cuh"
#include "cuda/hopper.cuh"
#include "cuda/wgmma.cuh"
#include "cuda/wgmma_choice.cuh"

namespace gc::tree::cuda {

// The rule is core/kernel_rules.hpp's, which gcompile explain reads too.
template <class S, typename T>
constexpr bool attention_sm90_supported() {
  return core::sm90_attention_takes(std::is_same_v<T, bf16>, S::kHeadDim, S::kHeads, S::kKvHeads);
}

namespace sm90 {

inline constexpr int kRows = 64;      // queries per block, keys per tile
inline constexpr int kThreads = 128;  // one warpgroup

template <class S>
struct Config {
  static constexpr int kD = S::kHeadDim;
  static constexpr unsigned kCore = 128;                       // bytes of one core matrix
  static constexpr unsigned kRowGroup = unsigned(kD / 8) * kCore;  // one 8-row group of a [64][D] tile
  static constexpr unsigned kTileBytes = 8 * kRowGroup;       // [64][D] bf16
  // The forward's: a Q tile per warpgroup, then K and V of two stages.
  static constexpr std::size_t forward_smem_bytes(int warpgroups) { return (warpgroups + 4) * std::size_t(kTileBytes); }
  static constexpr int kGroup = S::kHeads / S::kKvHeads;
  static constexpr std::int64_t kQStride = std::int64_t(S::kHeads) * kD;
  static constexpr std::int64_t kKvStride = std::int64_t(S::kKvHeads) * kD;
  static constexpr float kScaleLog2 = S::kScale * detail::kLog2e;
};

// Rows row0 .. row0+63 of a head (row stride STRIDE) into a K-major tile (K_MAJOR) or the V layout,
// 16 bytes per thread and step, by the block's THREADS threads; rows ≥ seq_len are zeros.
template <class Cfg, std::int64_t STRIDE, bool K_MAJOR, int THREADS = kThreads>
__device__ __forceinline__ void load_tile(unsigned char* tile, const bf16* __restrict__ head, int row0, int seq_len) {
  constexpr int kChunks = Cfg::kD / 8;
  for (int idx = int(threadIdx.x); idx < kRows * kChunks; idx += THREADS) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    const unsigned at = K_MAJOR ? Cfg::kRowGroup * unsigned(r / 8) + Cfg::kCore * unsigned(c) + 16u * unsigned(r % 8)
                                : Cfg::kCore * unsigned(c) + Cfg::kRowGroup * unsigned(r / 8) + 16u * unsigned(r % 8);
    mma::Words4 w{{0u, 0u, 0u, 0u}};
    if (row < seq_len) w = *reinterpret_cast<const mma::Words4*>(head + std::int64_t(row) * STRIDE + 8 * c);
    *reinterpret_cast<mma::Words4*>(tile + at) = w;
  }
}

// load_tile with cp.async: rows < seq_len copied without a wait (this thread's copies join the
// open cp.async group; the caller commits it), rows past it stored as zeros.
template <class Cfg, std::int64_t STRIDE, bool K_MAJOR, int THREADS = kThreads>
__device__ __forceinline__ void load_tile_async(unsigned char* tile, const bf16* __restrict__ head, int row0,
                                                int seq_len) {
  constexpr int kChunks = Cfg::kD / 8;
  for (int idx = int(threadIdx.x); idx < kRows * kChunks; idx += THREADS) {
    const int r = idx / kChunks, c = idx % kChunks, row = row0 + r;
    const unsigned at = K_MAJOR ? Cfg::kRowGroup * unsigned(r / 8) + Cfg::kCore * unsigned(c) + 16u * unsigned(r % 8)
                                : Cfg::kCore * unsigned(c) + Cfg::kRowGroup * unsigned(r / 8) + 16u * unsigned(r % 8);
    if (row < seq_len) {
      mma::cp_async_16(tile + at, head + std::int64_t(row) * STRIDE + 8 * c);
    } else {
      *reinterpret_cast<mma::Words4*>(tile + at) = mma::Words4{{0u, 0u, 0u, 0u}};
    }
  }
}

// Rows block_row0 + 64·j .. + 63 of a head (row stride STRIDE) into the tile at first + j·step for
// each of a block's WG warpgroups j (the rows warpgroup j multiplies), by all WG·128 threads.
template <class Cfg, std::int64_t STRIDE, int WG>
__device__ __forceinline__ void load_warpgroup_tiles(unsigned char* first, std::size_t step,
                                                     const bf16* __restrict__ head, int block_row0, int seq_len) {
  for (int j = 0; j < WG; ++j) {
    load_tile<Cfg, STRIDE, true, WG * kThreads>(first + j * step, head, block_row0 + j * kRows, seq_len);
  }
}

// A 64×64 accumulator x as the A operand (bf16 pairs, registers) of the four k-steps of 16 columns
// that multiply it: a[kk] in the layout wgmma::mma_bf16_rs documents, read from the accumulator
// layout of wgmma::mma_bf16<64>. Packed before the wgmma::fence that opens the products: a register
// defined between two wgmmas makes ptxas insert a warpgroup.arrive there and serialize them.
using AFragments = std::uint32_t[kRows / 16][4];
__device__ __forceinline__ void accumulator_as_a(AFragments& a, const float (&x)[kRows / 2]) {
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = 4 * (2 * kk + r / 2) + 2 * (r % 2);
      a[kk][r] = mma::pack_bf16x2(x[i], x[i + 1]);
    }
  }
}

// acc += X·B over 64 k-rows: X given as accumulator_as_a's fragments, B [64 rows][D] the MN-major
// operand of the tile at `tile` (n = d, k = row).
template <class Cfg>
__device__ __forceinline__ void product_with_rows(float (&acc)[Cfg::kD / 2], const AFragments& x,
                                                  const unsigned char* tile) {
#pragma unroll
  for (int kk = 0; kk < kRows / 16; ++kk) {
    wgmma::mma_bf16_rs<Cfg::kD, true>(
        acc, x[kk],
        wgmma::descriptor(tile + 2 * Cfg::kRowGroup * kk, wgmma::Swizzle::none, Cfg::kRowGroup, Cfg::kCore), true);
  }
}

// x = A·Bᵀ over d: A and B [64 rows][D] K-major tiles (rows of A: M, rows of B: N = 64).
template <class Cfg>
__device__ __forceinline__ void product_over_d(float (&x)[kRows / 2], const unsigned char* a_tile,
                                               const unsigned char* b_tile) {
#pragma unroll
  for (int ks = 0; ks < Cfg::kD / 16; ++ks) {
    wgmma::mma_bf16<kRows>(
        x, wgmma::descriptor(a_tile + 2 * Cfg::kCore * ks, wgmma::Swizzle::none, Cfg::kCore, Cfg::kRowGroup),
        wgmma::descriptor(b_tile + 2 * Cfg::kCore * ks, wgmma::Swizzle::none, Cfg::kCore, Cfg::kRowGroup), ks > 0);
  }
}

// A warpgroup's [64][D] accumulator into rows row0 .. row0+63 of a head (row stride STRIDE) as bf16
// pairs, this thread's two rows (r = (i/2)%2) times scale[r]; rows ≥ seq_len are not stored.
// acc[i]: row row0 + 16w + g + 8·((i/2)%2), column 8·(i/4) + 2q + i%2 (w the warp within the
// warpgroup).
template <class Cfg, std::int64_t STRIDE>
__device__ __forceinline__ void store_rows(bf16* __restrict__ head, const float (&acc)[Cfg::kD / 2], int row0,
                                           const float (&scale)[2], int seq_len) {
  const int t = int(threadIdx.x) % kThreads, w = t / 32, g = (t % 32) / 4, qd = t % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 16 * w + g + 8 * r;
    if (row >= seq_len) continue;
#pragma unroll
    for (int j = 0; j < Cfg::kD / 8; ++j) {
      detail::store_pair(head, STRIDE, row, 8 * j + 2 * qd, acc[4 * j + 2 * r] * scale[r],
                         acc[4 * j + 2 * r + 1] * scale[r]);
    }
  }
}

template <class S, int WG>
__global__ void __launch_bounds__(WG * kThreads)
    forward_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ q,
                   const bf16* __restrict__ k, const bf16* __restrict__ v, int seq_len) {
#if defined(GC_CUDA_EMULATOR) || (defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL))
  using Cfg = Config<S>;
  constexpr int D = Cfg::kD, kBlockThreads = WG * kThreads;
  unsigned char* smem = hopper::dynamic_shared();
  const auto k_stage = [&](int tile) { return smem + (WG + 2 * (tile % 2)) * std::size_t(Cfg::kTileBytes); };
  const auto v_stage = [&](int tile) { return smem + (WG + 1 + 2 * (tile % 2)) * std::size_t(Cfg::kTileBytes); };

  const int b = blockIdx.z, h = blockIdx.y, g_kv = h / Cfg::kGroup;
  const int block_q0 = int(gridDim.x - 1 - blockIdx.x) * WG * kRows;
  const int t = int(threadIdx.x), wg = t / kThreads, w = (t % kThreads) / 32, lane = t % 32, g = lane / 4,
            qd = lane % 4;
  const int q0 = block_q0 + wg * kRows;                         // this warpgroup's first query
  const int rows[2] = {q0 + 16 * w + g, q0 + 16 * w + g + 8};  // this thread's queries
  unsigned char* q_s = smem + std::size_t(wg) * Cfg::kTileBytes;

  const std::int64_t q_off = std::int64_t(b) * seq_len * Cfg::kQStride + std::int64_t(h) * D;
  const std::int64_t kv_off = std::int64_t(b) * seq_len * Cfg::kKvStride + std::int64_t(g_kv) * D;
  load_warpgroup_tiles<Cfg, Cfg::kQStride, WG>(smem, Cfg::kTileBytes, q + q_off, block_q0, seq_len);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running row max of s·log2(e)
  float l[2] = {0.0f, 0.0f};            // this thread's part of the running Σ 2^(s·log2 e − m)

  const int last_query = min(block_q0 + WG * kRows, seq_len) - 1;  // block_q0 < seq_len by the grid size
  const int key_tiles = last_query / kRows + 1;
  const auto load_kv = [&](int tile) {  // one cp.async group per tile (K and V)
    load_tile_async<Cfg, Cfg::kKvStride, true, kBlockThreads>(k_stage(tile), k + kv_off, tile * kRows, seq_len);
    load_tile_async<Cfg, Cfg::kKvStride, false, kBlockThreads>(v_stage(tile), v + kv_off, tile * kRows, seq_len);
    mma::cp_async_commit();
  };
  load_kv(0);
  for (int tile = 0; tile < key_tiles; ++tile) {
    const int k0 = tile * kRows;
    // The previous iteration's closing barrier freed the other stage: prefetch into it, then wait
    // for this tile's group only.
    mma::prefetch_next_then_wait<1>(tile, key_tiles, load_kv);
    hopper::fence_proxy_async();  // the copies (and zeros) are visible to wgmma's async proxy
    __syncthreads();
    const unsigned char* k_s = k_stage(tile);
    const unsigned char* v_s = v_stage(tile);

    // S = Q·Kᵀ: D/16 k-steps of m64n64k16.
    float s[kRows / 2];
    wgmma::fence();
    product_over_d<Cfg>(s, q_s, k_s);
    wgmma::commit();
    wgmma::wait<0>();

    // Scores in log2 units, the causal mask (keys after the query are −inf), online softmax.
    // s[i]: row rows[(i/2)%2], key k0 + 8·(i/4) + 2·qd + i%2.
#pragma unroll
    for (int i = 0; i < kRows / 2; ++i) {
      const int key = k0 + 8 * (i / 4) + 2 * qd + (i % 2);
      s[i] = key > rows[(i / 2) % 2] ? -INFINITY : s[i] * Cfg::kScaleLog2;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kRows / 8; ++j) tile_max = fmaxf(tile_max, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
      const float m_new = fmaxf(m[r], detail::quad_max(tile_max));
      const float m_ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_ref);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kRows / 8; ++j) {
        s[4 * j + 2 * r] = exp2f(s[4 * j + 2 * r] - m_ref);
        s[4 * j + 2 * r + 1] = exp2f(s[4 * j + 2 * r + 1] - m_ref);
        sum += s[4 * j + 2 * r] + s[4 * j + 2 * r + 1];
      }
      l[r] = alpha * l[r] + sum;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[4 * j + 2 * r] *= alpha;
        o[4 * j + 2 * r + 1] *= alpha;
      }
      m[r] = m_new;
    }

    // O += P·V: 4 k-steps of 16 keys, P from registers (bf16 pairs, packed before the fence), V
    // MN-major.
    AFragments p_a;
    accumulator_as_a(p_a, s);
    wgmma::fence();
    product_with_rows<Cfg>(o, p_a, v_s);
    wgmma::commit();
    wgmma::wait<0>();
    __syncthreads();  // every thread's products are done before this stage is refilled
  }

  // O / l by rows, and lse (every lane of a quad sums l, before any row is skipped).
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l_row = detail::quad_sum(l[r]);
    inv[r] = 1.0f / l_row;
    if (qd == 0 && rows[r] < seq_len) {
      lse[(std::int64_t(b) * S::kHeads + h) * seq_len + rows[r]] = (m[r] + log2f(l_row)) * detail::kLn2;
    }
  }
  store_rows<Cfg, Cfg::kQStride>(out + q_off, o, q0, inv, seq_len);
#else
  __trap();  // built for an architecture without wgmma
#endif
}

}  // namespace sm90

// Whether this process runs attention shape S in T on the wgmma kernels, for the choice `want`
// (train --attention; cuda/wgmma_choice.cuh).
template <class S, typename T>
bool wgmma_attention_chosen(core::TensorCoreKernels want) {
  std::string shape;
  if constexpr (!attention_sm90_supported<S, T>()) {
    shape = std::string("they take bf16 with head_dim 64 or 128; this tree computes in ") +
            (std::is_same_v<T, bf16> ? "bf16" : "fp32") + " with head_dim " + std::to_string(S::kHeadDim);
  }
  return wgmma_chosen(want, "--attention", "attention", shape, core::kWgmmaAttentionByDefault);
}

// As flash_attention_forward<S>, on Hopper's warpgroup MMAs (the binary must contain sm_90a code),
// WG warpgroups (64 queries each) a block: 2, or 1 (what the first version ran; the kit's
// attention row times both).
template <class S, int WG = 2>
void attention_sm90_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int batch,
                            int seq_len) {
  static_assert(attention_sm90_supported<S, bf16>(), "attention_sm90_forward: head_dim 64 or 128");
  static_assert(WG == 1 || WG == 2, "attention_sm90_forward: 1 or 2 warpgroups a block");
  detail::check_attention_batch(batch, seq_len, "attention_sm90_forward");
  if (batch == 0 || seq_len == 0) return;
  check_pack_aligned<8, bf16>("attention_sm90_forward", out, q, k, v);
  constexpr std::size_t kSmem = sm90::Config<S>::forward_smem_bytes(WG);
  const dim3 grid(detail::row_tiles(seq_len, WG * sm90::kRows), unsigned(S::kHeads), unsigned(batch));
  launch_with_dynamic_shared<sm90::forward_kernel<S, WG>>(grid, WG * sm90::kThreads, kSmem, out, lse, q, k, v,
                                                          seq_len);
}

}  // namespace gc::tree::cuda
