// The CUDA backend as the model sees it: the same interface as
// cpu/backend.hpp (model/model_impl.hpp composes the layers once against it),
// with device buffers, cuBLASLt GEMMs and the kernels of cuda/*.cuh.
//
// Types: Act = T is float (precision "fp32", for parity with the CPU) or
// bf16 (precision "bf16"); parameter gradients are always fp32 (bf16 GEMM
// operands accumulate into fp32 weight gradients), and rstd/lse are fp32.
// Every buffer and scratch area is allocated in the constructor of the model
// (prepare() here); forward and backward allocate nothing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/aligned_linear.cuh"
#include "cuda/attention.cuh"
#include "cuda/attention_sm90.cuh"
#include "cuda/attention_sm90_backward.cuh"
#include "cuda/common.cuh"
#include "cuda/cross_entropy.cuh"
#include "cuda/device_check.cuh"
#include "cuda/embedding.cuh"
#include "cuda/flash_attention.cuh"
#include "cuda/gate.cuh"
#include "cuda/expert_linear.cuh"
#include "cuda/expert_slots.cuh"
#include "cuda/moe.cuh"
#include "cuda/moe_stats.cuh"
#include "cuda/rmsnorm.cuh"
#include "cuda/rope.cuh"
#include "cuda/swiglu.cuh"
#include "plan.hpp"
#include "profile/step_profile.hpp"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/pinned_upload.hpp"
#include "runtime/token_shard.hpp"

namespace gc::tree::cuda {

using gc::rt::cuda::BlasLt;
using gc::rt::cuda::DeviceBuffer;

template <typename T>
class Backend {
 public:
  using Act = T;
  using Grad = float;
  using Stat = float;
  template <typename U>
  using Buffer = DeviceBuffer<U>;

  // Where the model's ops report when `train --profile` times them (null: not profiling).
  profile::Recorder* profiler = nullptr;

  template <typename U>
  static void allocate(Buffer<U>& buf, std::int64_t n) {
    buf.resize(std::size_t(n));
    buf.zero();
  }
  template <typename U>
  static void zero(Buffer<U>& buf) {
    buf.zero();
  }
  // n values from the device to the host (waits for the GPU; counted: gc::rt::cuda::transfer_stats)
  // and back (queued after the work before it).
  template <typename U>
  static void to_host(U* host, const U* device, std::int64_t n) {
    if (n > 0) gc::rt::cuda::copy_to_host(host, device, std::size_t(n) * sizeof(U));
  }
  template <typename U>
  static void from_host(U* device, const U* host, std::int64_t n) {
    if (n > 0) GC_CUDA_CHECK(cudaMemcpy(device, host, std::size_t(n) * sizeof(U), cudaMemcpyHostToDevice));
  }
  static void copy(T* dst, const T* src, std::int64_t n) {
    GC_CUDA_CHECK(cudaMemcpyAsync(dst, src, std::size_t(n) * sizeof(T), cudaMemcpyDeviceToDevice));
  }
  static void add(T* out, const T* a, const T* b, std::int64_t n) {
    launch(add_kernel<T>, blocks_for(n, 256), 256, 0, out, a, b, n);
  }

  void prepare(int batch, int seq_len) {
    batch_ = batch;
    seq_len_ = seq_len;
    const std::int64_t N = std::int64_t(batch) * seq_len;
    std::vector<float> cos_host(std::size_t(seq_len) * kHeadDim / 2), sin_host(cos_host.size());
    rope_table(cos_host.data(), sin_host.data(), seq_len, RopeShape::kHeadDim, RopeShape::kTheta);
    cos_.resize(cos_host.size());
    sin_.resize(sin_host.size());
    cos_.upload(cos_host.data(), cos_host.size());
    sin_.upload(sin_host.data(), sin_host.size());
    tokens_.resize(std::size_t(N));
    targets_.resize(std::size_t(N));
    index_tokens_.resize(std::size_t(N));
    index_offsets_.resize(std::size_t(N) + 1);
    index_positions_.resize(std::size_t(N));
    staging_.reserve(std::size_t(N) + 1);
    // The largest dg reduction: a d_model-wide norm over N rows, or a QK-norm over N·heads rows.
    const std::size_t dg = std::max(rmsnorm_dg_scratch_floats<ResidualNorm>(N),
                                    rmsnorm_dg_scratch_floats<QkNorm>(N * kHeads));
    dg_scratch_.resize(dg);
    attention_scratch_.resize(std::max<std::size_t>(attention_backward_scratch_floats<AttentionShape>(batch, seq_len), 1));
    loss_sum_.resize(1);
    moment_partials_.resize(2 * std::size_t(kMomentBlocks));
    step_loss_.resize(2);
    step_loss_.zero();
    linear_.reserve(kAlignScratchActElems, kAlignScratchGradElems);  // planned: compiler/plan, align_scratch
    if constexpr (kMoe) {
      // The routing state is the model's (model/moe_block.hpp); here the dispatch's counts per
      // expert, and N doubles for the sigmoid scores' row sums or the z-loss's lse².
      moe_groups_ = std::max(batch, 1);
      moe_counts_.resize(std::size_t(kExperts));
      moe_row_total_.resize(std::size_t(N));
      if constexpr (!std::is_same_v<T, float>) {
        moe_router_grad_.resize(std::size_t(N) * kExperts);
      }
    }
  }

  // Copies a host batch to the device without waiting for the GPU (through page-locked slots,
  // runtime/cuda/pinned_upload.hpp); the embedding's inverse index is built on the host from the
  // same tokens (deterministic backward, no atomics).
  const std::int32_t* stage_tokens(const std::int32_t* tokens, int N) {
    check_staged_rows(N);
    staging_.upload(tokens_.data(), tokens, std::size_t(N));
    const EmbeddingIndex index = build_embedding_index(tokens, N);
    num_unique_ = int(index.unique_tokens.size());
    staging_.upload(index_tokens_.data(), index.unique_tokens.data(), index.unique_tokens.size());
    staging_.upload(index_offsets_.data(), index.offsets.data(), index.offsets.size());
    staging_.upload(index_positions_.data(), index.positions.data(), index.positions.size());
    return tokens_.data();
  }
  const std::int32_t* stage_targets(const std::int32_t* targets, int N) {
    check_staged_rows(N);
    scored_ = gc::rt::count_scored(targets, N);
    staging_.upload(targets_.data(), targets, std::size_t(N));
    return targets_.data();
  }

  // The backend's cuBLASLt (the weight metrics' cosine products share its workspace).
  BlasLt& blas() { return blas_; }

  // y[N,out] = x[N,in] · W[out,in]^T
  // (Widths not a multiple of 8 run on zero-padded copies in bf16: cuda/aligned_linear.cuh.)
  void linear_forward(T* y, const T* x, const T* W, int N, int in, int out) {
    linear_.forward(blas_, y, x, W, N, in, out);
  }
  // dx[N,in] = (or +=) dy[N,out] · W[out,in];  dW[out,in] += dy^T · x (fp32).
  void linear_backward(T* dx, float* dW, const T* dy, const T* x, const T* W, int N, int in, int out,
                       bool accumulate_dx = false) {
    linear_.backward(blas_, dx, dW, dy, x, W, N, in, out, accumulate_dx);
  }
  // The model's norms are d_model wide (ResidualNorm) or, for QK-norm, head_dim wide (QkNorm):
  // the width picks the specialized kernel (the two coincide when d_model = head_dim).
  void rmsnorm_forward(T* y, float* rstd, const T* x, const T* g, std::int64_t rows, int dim) {
    with_norm(dim, [&](auto norm) { cuda::rmsnorm_forward<decltype(norm)>(y, rstd, x, g, rows); });
  }
  void add_rmsnorm_forward(T* h, T* y, float* rstd, const T* a, const T* b, const T* g, std::int64_t rows, int dim) {
    with_norm(dim, [&](auto norm) { cuda::add_rmsnorm_forward<decltype(norm)>(h, y, rstd, a, b, g, rows); });
  }
  void rmsnorm_backward(T* dx, float* dg, const T* dy, const T* x, const T* g, const float* rstd, std::int64_t rows,
                        int dim, bool accumulate_dx = false) {
    with_norm(dim, [&](auto norm) {
      cuda::rmsnorm_backward<decltype(norm)>(dx, dg, dg_scratch_.data(), dy, x, g, rstd, rows, accumulate_dx);
    });
  }
  // q has RopeShape::kHeads heads, k RopeShape::kKvHeads: each count has its kernel.
  void rope_forward(T* out, const T* x, int heads) {
    with_rope_heads(heads, [&](auto h) {
      cuda::rope_forward<RopeShape::kHeadDim, decltype(h)::value>(out, x, cos_.data(), sin_.data(), batch_, seq_len_);
    });
  }
  void rope_backward(T* dx, const T* dy, int heads) {
    with_rope_heads(heads, [&](auto h) {
      cuda::rope_backward<RopeShape::kHeadDim, decltype(h)::value>(dx, dy, cos_.data(), sin_.data(), batch_, seq_len_);
    });
  }
  // The stacked Q/K/V projection's row split into RoPE(q), RoPE(k) and v, and the gradients
  // stacked back (cuda/rope.cuh).
  void qkv_rope_forward(T* qr, T* kr, T* v, const T* qkv) {
    cuda::qkv_rope_forward<RopeShape::kHeadDim, RopeShape::kHeads, RopeShape::kKvHeads>(
        qr, kr, v, qkv, cos_.data(), sin_.data(), batch_, seq_len_);
  }
  void qkv_rope_backward(T* dqkv, const T* dqr, const T* dkr, const T* dv) {
    cuda::qkv_rope_backward<RopeShape::kHeadDim, RopeShape::kHeads, RopeShape::kKvHeads>(
        dqkv, dqr, dkr, dv, cos_.data(), sin_.data(), batch_, seq_len_);
  }
  // The QK-norm path of the stacked projection: v out of its rows (and dv back in), and the norm
  // over q's (queries) or k's heads read (and their dx written) inside the rows (cuda/rmsnorm.cuh
  // QkNormInStack).
  void qkv_v_forward(T* v, const T* qkv) {
    cuda::qkv_v_forward<RopeShape::kHeadDim, RopeShape::kHeads, RopeShape::kKvHeads>(v, qkv, batch_, seq_len_);
  }
  void qkv_v_backward(T* dqkv, const T* dv) {
    cuda::qkv_v_backward<RopeShape::kHeadDim, RopeShape::kHeads, RopeShape::kKvHeads>(dqkv, dv, batch_, seq_len_);
  }
  void stacked_heads_rmsnorm_forward(T* y, float* rstd, const T* x, const T* g, std::int64_t N, bool queries) {
    with_stacked_heads(queries, [&](auto norm) {
      using S = decltype(norm);
      cuda::rmsnorm_forward<S>(y, rstd, x, g, N * S::kGroupRows);
    });
  }
  void stacked_heads_rmsnorm_backward(T* dx, float* dg, const T* dy, const T* x, const T* g, const float* rstd,
                                      std::int64_t N, bool queries) {
    with_stacked_heads(queries, [&](auto norm) {
      using S = decltype(norm);
      cuda::rmsnorm_backward<S>(dx, dg, dg_scratch_.data(), dy, x, g, rstd, N * S::kGroupRows, false);
    });
  }
  // The attention kernels are specialized for the spec's heads, head_dim and scale
  // (AttentionShape); the model's dims must be those. bf16 with a head_dim that is a multiple of
  // 16 runs on tensor cores (cuda/flash_attention.cuh); fp32 and other head dims on the
  // reference kernels (cuda/attention.cuh). bf16 at head_dim 64 or 128 may run on Hopper's
  // warpgroup MMAs instead (cuda/attention_sm90*.cuh), as choose_kernels decided.
  static constexpr bool kFlashAttention = cuda::flash_attention_supported<AttentionShape, T>();
  static constexpr bool kSm90Attention = cuda::attention_sm90_supported<AttentionShape, T>();
  // train --attention and --experts, before the first step; each throws when the wgmma kernels
  // are asked for and cannot run here.
  void choose_kernels(const core::KernelChoices& want) {
    wgmma_attention_ = cuda::wgmma_attention_chosen<AttentionShape, T>(want.attention);
    wgmma_experts_ = cuda::wgmma_experts_chosen<T>(want.experts);
  }
  const char* attention_kernels() const {
    return wgmma_attention_ ? "wgmma attention" : kFlashAttention ? "mma.sync attention" : "reference attention";
  }
  // "" in a dense tree.
  const char* expert_kernels() const {
    if (!kMoe) return "";
    if (wgmma_experts_) return "wgmma experts";
    const bool grouped = core::grouped_gemm_takes(std::is_same_v<T, bf16>, kDModel, kExpertDff);
    return grouped ? "mma.sync experts" : "plain experts";
  }
  void attention_forward(T* out, float* lse, const T* q, const T* k, const T* v, const AttentionDims& d,
                         double scale) {
    check_attention_shape(d, scale);
    if constexpr (kSm90Attention) {
      if (wgmma_attention_) return cuda::attention_sm90_forward<AttentionShape>(out, lse, q, k, v, d.batch, d.seq_len);
    }
    if constexpr (kFlashAttention) {
      cuda::flash_attention_forward<AttentionShape>(out, lse, q, k, v, d.batch, d.seq_len);
    } else {
      cuda::attention_forward<AttentionShape>(out, lse, q, k, v, d.batch, d.seq_len);
    }
  }
  void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* out, const float* lse, const T* q, const T* k,
                          const T* v, const AttentionDims& d, double scale) {
    check_attention_shape(d, scale);
    if constexpr (kSm90Attention) {
      if (wgmma_attention_) {
        return cuda::attention_sm90_backward<AttentionShape>(dq, dk, dv, attention_scratch_.data(), dout, out, lse, q,
                                                             k, v, d.batch, d.seq_len);
      }
    }
    if constexpr (kFlashAttention) {
      cuda::flash_attention_backward<AttentionShape>(dq, dk, dv, attention_scratch_.data(), dout, out, lse, q, k, v,
                                                     d.batch, d.seq_len);
    } else {
      cuda::attention_backward<AttentionShape>(dq, dk, dv, attention_scratch_.data(), dout, out, lse, q, k, v, d.batch,
                                               d.seq_len);
    }
  }
  template <GatedAttention kMode>
  void gate_forward(T* out, const T* attn, const T* z, std::int64_t N) {
    cuda::gate_forward<kMode, GateShape>(out, attn, z, N);
  }
  template <GatedAttention kMode>
  void gate_backward(T* dattn, T* dz, const T* dout, const T* attn, const T* z, std::int64_t N) {
    cuda::gate_backward<kMode, GateShape>(dattn, dz, dout, attn, z, N);
  }
  // --- mixture of experts (cuda/moe.cuh; the routing bookkeeping cuda/moe_stats.cuh). Every
  // array is device memory, the routing state included, so nothing here waits for the GPU; the
  // rows kept under moe.capacity_factor are offsets[E], which the kernels read on the device.
  // Router logits in fp32 from bf16/fp32 operands; backward through a T copy of the fp32 gradient.
  void router_forward(float* logits, const T* b, const T* W, int N) {
    blas_.gemm(false, true, N, kExperts, kDModel, 1.0f, b, kDModel, W, kDModel, 0.0f, logits, kExperts);
  }
  void router_backward(T* db, float* dW, const float* dlogits, const T* b, const T* W, int N) {
    const T* grad = nullptr;
    if constexpr (std::is_same_v<T, float>) {
      grad = dlogits;
    } else {
      cuda::moe_cast(moe_router_grad_.data(), dlogits, std::int64_t(N) * kExperts);
      grad = moe_router_grad_.data();
    }
    linear_backward(db, dW, grad, b, W, N, kDModel, kExperts);
  }
  void moe_route_forward(float* scores, std::int32_t* expert, float* weight, const float* logits, const float* bias,
                         int N) {
    cuda::moe_route_forward<MoeLayout>(scores, expert, weight, logits, bias, N);
  }
  void moe_dispatch(std::int32_t* order, std::int32_t* position, std::int64_t* offsets, const std::int32_t* expert,
                    int N) {
    cuda::moe_dispatch<MoeLayout>(order, position, offsets, moe_counts_.data(), expert, N);
  }
  void moe_apply_capacity(std::int32_t* kept, std::int32_t* position, std::int64_t* dropped, const std::int32_t* expert,
                          int N, int seq_len) {
    check_moe_groups(N, seq_len);
    cuda::moe_apply_capacity<MoeLayout>(kept, position, dropped, expert, N, seq_len, kMoeCapacity);
  }
  // rows: N·k, a bound; the rows are offsets[E].
  void moe_gather(T* xs, const T* x, const std::int32_t* order, const std::int64_t* offsets, std::int64_t rows,
                  int dim) {
    check_moe_dim(dim);
    cuda::moe_gather<MoeLayout>(xs, x, order, rows, offsets + kExperts);
  }
  // Expert parallelism (model/expert_parallel.hpp): dst[p] = src[rows[p]] (host-planned indices
  // through from_host, or slotted ones built here by expert_slots_route: cuda/expert_slots.cuh).
  void gather_rows(T* dst, const T* src, const std::int32_t* rows, std::int64_t n, int dim) {
    cuda::gather_rows(dst, src, rows, n, dim);
  }
  void expert_slots_pack(T* slots, const T* rows, const std::int64_t* offsets, int G, std::int64_t S, int dim) {
    cuda::expert_slots_pack(slots, rows, offsets, G, S, dim, kExperts);
  }
  void expert_slots_unpack(T* rows, const T* slots, const std::int64_t* offsets, int G, std::int64_t S, int dim) {
    cuda::expert_slots_unpack(rows, slots, offsets, G, S, dim, kExperts);
  }
  void expert_slots_route(std::int32_t* perm, std::int32_t* unperm, std::int64_t* local_offsets,
                          const std::int64_t* all_offsets, int G, std::int64_t S, int lo, int hi, std::int64_t C) {
    cuda::expert_slots_route(perm, unperm, local_offsets, all_offsets, G, S, {lo, hi}, C, kExperts);
  }
  void moe_combine(T* out, const T* ys, const float* weight, const std::int32_t* position, int N, int dim,
                   bool accumulate) {
    check_moe_dim(dim);
    cuda::moe_combine<MoeLayout>(out, ys, weight, position, N, accumulate);
  }
  void moe_combine_backward(T* dys, float* dweight, const T* dout, const T* ys, const float* weight,
                            const std::int32_t* order, const std::int64_t* offsets, int N, std::int64_t rows, int dim) {
    check_moe_dim(dim);
    const std::int64_t* live_rows = kMoeCapacity > 0 ? offsets + kExperts : nullptr;  // dropless: rows = N·k
    cuda::moe_combine_backward<MoeLayout>(dys, dweight, dout, ys, weight, order, rows, std::int64_t(N) * kTopK,
                                          live_rows);
  }
  void moe_scatter_add(T* dx, const T* dxs, const std::int32_t* position, int N, int dim) {
    check_moe_dim(dim);
    cuda::moe_scatter_add<MoeLayout>(dx, dxs, position, N);
  }
  void moe_mean_probs(double* mean_prob, const float* scores, int N, int group_rows) {
    check_moe_groups(N, group_rows);
    cuda::moe_mean_probs<MoeLayout>(mean_prob, moe_row_total_.data(), scores, N, group_rows);
  }
  void moe_group_counts(std::int64_t* counts, const std::int32_t* expert, int N, int group_rows) {
    check_moe_groups(N, group_rows);
    cuda::moe_group_counts<MoeLayout>(counts, expert, N, group_rows);
  }
  // The z-loss's lse per row, and *aux += coef · Σ lse² / N (the N squares in row_total's
  // scratch, unused by softmax routers, the only ones the z-loss allows).
  void moe_router_lse(float* lse, const float* logits, int N, double* aux, double coef) {
    static_assert(kRouterScoring == RouterScoring::softmax || kMoeZLoss == 0.0, "the z-loss needs a softmax router");
    cuda::moe_router_lse<MoeLayout>(lse, moe_row_total_.data(), aux, coef, logits, N);
  }
  void moe_record_routing(const core::MoeBalance& b, const std::int64_t* offsets, const std::int64_t* dropped,
                          double* selected, double* step_tally, const double* mean_prob, const std::int64_t* seq_counts,
                          const double* seq_mean_prob, double* aux) {
    cuda::moe_record_routing(b, offsets, dropped, selected, step_tally, mean_prob, seq_counts, seq_mean_prob, aux);
  }
  void moe_balance_gradient(const core::MoeBalance& b, const double* selected, const std::int64_t* seq_counts,
                            double loss_scale, double* aux_grad) {
    cuda::moe_balance_gradient(b, selected, seq_counts, loss_scale, aux_grad);
  }
  void moe_close_step(double* step_tally, double* window_tally, float* bias, double rate) {
    cuda::moe_close_step(kExperts, step_tally, window_tally, bias, rate);
  }
  void moe_route_backward(float* dlogits, const float* dweight, const float* scores, const std::int32_t* expert,
                          const float* weight, const double* aux, int aux_group_rows, const float* lse,
                          double z_scale, int N) {
    if (aux != nullptr) check_moe_groups(N, aux_group_rows);
    cuda::moe_route_backward<MoeLayout>(dlogits, dweight, scores, expert, weight, aux, aux_group_rows, lse, z_scale, N);
  }
  // The experts' projections (W stacked [experts, out, in]; cuda/expert_linear.cuh).
  // offsets on the device; rows: a bound on offsets[experts] (the launch's size).
  void grouped_linear_forward(T* y, const T* x, const T* W, const std::int64_t* offsets, int experts,
                              std::int64_t rows, int in, int out) {
    cuda::expert_linear_forward(y, x, W, offsets, experts, rows, in, out, wgmma_experts_);
  }
  void grouped_linear_backward(T* dx, float* dW, const T* dy, const T* x, const T* W, const std::int64_t* offsets,
                               int experts, std::int64_t rows, int in, int out, bool accumulate_dx = false) {
    cuda::expert_linear_backward(dx, dW, dy, x, W, offsets, experts, rows, in, out, accumulate_dx, wgmma_experts_);
  }

  // n values are rows of one of the spec's MLP widths (SwigluShape); any width that divides n
  // gives the same result, so the first that does picks the kernel.
  void swiglu_forward(T* h, const T* a, const T* b, std::int64_t n) {
    with_mlp_width(n, [&](auto width) {
      constexpr int kWidth = decltype(width)::value;
      cuda::swiglu_forward<kWidth>(h, a, b, n / kWidth);
    });
  }
  void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
    with_mlp_width(n, [&](auto width) {
      constexpr int kWidth = decltype(width)::value;
      cuda::swiglu_backward<kWidth>(da, db, dh, a, b, n / kWidth);
    });
  }
  // The dense MLP's fused gate/up output [rows, 2·d_ff] (model_impl.hpp).
  void swiglu_pair_forward(T* h, const T* ab, std::int64_t rows, int width) {
    check_dense_width(width);
    cuda::swiglu_pair_forward<SwigluShape::kDff>(h, ab, rows);
  }
  void swiglu_pair_backward(T* dab, const T* dh, const T* ab, std::int64_t rows, int width) {
    check_dense_width(width);
    cuda::swiglu_pair_backward<SwigluShape::kDff>(dab, dh, ab, rows);
  }
  // Specialized for d_model and the embedding scale (EmbeddingShape); the model passes those.
  void embedding_forward(T* out, const std::int32_t* tokens, const T* E, int N, int d, double scale) {
    check_embedding_shape(d, scale);
    cuda::embedding_forward<EmbeddingShape>(out, tokens, E, N);
  }
  // Uses the index of the batch last passed to stage_tokens.
  void embedding_backward(float* dE, const std::int32_t*, const T* dout, int, int d, double scale) {
    check_embedding_shape(d, scale);
    cuda::embedding_backward<EmbeddingShape>(dE, index_tokens_.data(), index_offsets_.data(), index_positions_.data(),
                                             num_unique_, dout);
  }
  // Per-row losses and p(target) of `rows` rows (a chunk of the staged batch).
  void cross_entropy_forward(float* losses, float* p_target, const T* logits, const std::int32_t* targets,
                             std::int64_t rows, int V, double alpha) {
    check_logit_shape(V, alpha);
    cuda::cross_entropy_forward<LogitShape>(losses, p_target, logits, targets, rows);
  }
  // acc[0] += Σ α·x, acc[1] += Σ (α·x)² on the device (double, fixed order).
  void add_moments(double* acc, const T* x, std::int64_t n, double alpha) {
    cuda::accumulate_moments(acc, moment_partials_.data(), x, n, alpha);
  }
  // The staged batch's mean loss over its scored rows, read on the host (waits for the GPU).
  // After defer_loss(w) it waits for nothing: w · mean is added to the step accumulator on the
  // device (read by take_deferred_loss) and 0 is returned.
  double mean_loss(const float* losses, std::int64_t N, const double* aux, int n) {
    const double per_row = scored_ > 0 ? 1.0 / double(scored_) : 0.0;
    if (deferred_weight_ >= 0.0) {
      accumulate_losses(step_loss_.data(), losses, N, deferred_weight_ * per_row);
      if (n > 0) add_weighted_sum(step_loss_.data() + 1, aux, n, deferred_weight_);
      deferred_weight_ = -1.0;
      return 0.0;
    }
    sum_losses(loss_sum_.data(), losses, N);
    double sum = 0.0;
    loss_sum_.download(&sum, 1);
    double balancing = 0.0;
    if (n > 0) {
      aux_host_.resize(std::size_t(n));
      to_host(aux_host_.data(), aux, n);
      for (double a : aux_host_) balancing += a;
    }
    return sum * per_row + balancing;
  }
  // The next mean_loss adds weight · (the mean loss) to the step accumulator, and weight · (the
  // balancing losses) to its second entry.
  void defer_loss(double weight) { deferred_weight_ = weight; }
  // The step accumulator: [Σ weight · mean loss, Σ weight · balancing loss] since
  // clear_deferred_loss (device memory, read on the device by the engine's step verdict), and
  // its restart at 0 (queued, no wait).
  double* deferred_loss() { return step_loss_.data(); }
  void clear_deferred_loss() { step_loss_.zero(); }
  void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, int V,
                              double alpha, double loss_scale) {
    check_logit_shape(V, alpha);
    cuda::cross_entropy_backward<LogitShape>(dlogits, logits, targets, N, float(loss_scale), scored_);
  }

 private:
  // Throws unless a call's dimensions are those its kernels were specialized for.
  static void require_specialized(bool matches, const char* kernel, const std::string& specialized,
                                  const std::string& called) {
    if (!matches) {
      throw gc::rt::RuntimeError(std::string(kernel) + ": the kernels are specialized for " + specialized +
                                 ", but were called with " + called);
    }
  }
  template <typename F>
  static void with_stacked_heads(bool queries, F&& f) {
    if (queries) {
      f(cuda::QkNormInStack<true>{});
    } else {
      f(cuda::QkNormInStack<false>{});
    }
  }
  static void check_dense_width(int width) {
    require_specialized(width == SwigluShape::kDff, "swiglu", "d_ff = " + std::to_string(SwigluShape::kDff),
                        std::to_string(width));
  }
  // Groups of rows for the balancing losses: whole (one group) or sequences, at most the batch's.
  void check_moe_groups(int N, int group_rows) const {
    if (group_rows <= 0 || N % group_rows != 0 || N / group_rows > moe_groups_) {
      throw std::runtime_error("CUDA backend: MoE balancing groups of " + std::to_string(group_rows) + " rows over " +
                               std::to_string(N) + " rows exceed the " + std::to_string(moe_groups_) +
                               " sequences prepared");
    }
  }
  static void check_moe_dim(int dim) {
    require_specialized(dim == MoeLayout::kDim, "moe", "rows of " + std::to_string(MoeLayout::kDim),
                        "rows of " + std::to_string(dim));
  }
  static void check_logit_shape(int V, double alpha) {
    require_specialized(V == LogitShape::kVocab && float(alpha) == LogitShape::kScale, "cross_entropy",
                        "V = " + std::to_string(LogitShape::kVocab) + " and the spec's logit scale",
                        "V = " + std::to_string(V) + " (or another scale)");
  }
  static void check_embedding_shape(int d, double scale) {
    require_specialized(d == EmbeddingShape::kDim && float(scale) == EmbeddingShape::kScale, "embedding",
                        "d = " + std::to_string(EmbeddingShape::kDim) + " and the spec's scale",
                        "d = " + std::to_string(d) + " (or another scale)");
  }
  static void check_attention_shape(const AttentionDims& d, double scale) {
    require_specialized(d.heads == AttentionShape::kHeads && d.kv_heads == AttentionShape::kKvHeads &&
                            d.head_dim == AttentionShape::kHeadDim && float(scale) == AttentionShape::kScale,
                        "attention",
                        std::to_string(AttentionShape::kHeads) + " heads, " + std::to_string(AttentionShape::kKvHeads) +
                            " kv heads, head_dim " + std::to_string(AttentionShape::kHeadDim),
                        std::to_string(d.heads) + ", " + std::to_string(d.kv_heads) + ", " +
                            std::to_string(d.head_dim) + " (or another scale)");
  }

  template <class F>
  static void with_mlp_width(std::int64_t n, F&& run) {
    if (n % SwigluShape::kDff == 0) {
      run(std::integral_constant<int, SwigluShape::kDff>{});
      return;
    }
    if constexpr (kMoe) {
      if (n % SwigluShape::kExpertDff == 0) {
        run(std::integral_constant<int, SwigluShape::kExpertDff>{});
        return;
      }
      if constexpr (SwigluShape::kSharedDff > 0) {
        if (n % std::max(SwigluShape::kSharedDff, 1) == 0) {  // max: nvcc evaluates the discarded branch's %
          run(std::integral_constant<int, SwigluShape::kSharedDff>{});
          return;
        }
      }
    }
    throw gc::rt::RuntimeError("swiglu: " + std::to_string(n) + " values are rows of none of the spec's MLP widths");
  }

  template <class F>
  static void with_rope_heads(int heads, F&& run) {
    if (heads == RopeShape::kHeads) {
      run(std::integral_constant<int, RopeShape::kHeads>{});
    } else if (heads == RopeShape::kKvHeads) {
      run(std::integral_constant<int, RopeShape::kKvHeads>{});
    } else {
      throw gc::rt::RuntimeError("rope: no kernel specialized for " + std::to_string(heads) + " heads");
    }
  }

  // The QK-norm kernels exist only in trees with QK-norm.
  template <class F>
  static void with_norm(int dim, F&& run) {
    if (dim == ResidualNorm::kDim) {
      run(ResidualNorm{});
      return;
    }
    if constexpr (kQkNorm) {
      if (dim == QkNorm::kDim) {
        run(QkNorm{});
        return;
      }
    }
    throw gc::rt::RuntimeError("rmsnorm: no kernel specialized for rows of " + std::to_string(dim) + " (this tree's " +
                               "norms are " + std::to_string(ResidualNorm::kDim) + " wide, and " +
                               std::to_string(QkNorm::kDim) + " for QK-norm when the spec has it)");
  }


  void check_staged_rows(int N) const {
    if (N < 0 || std::size_t(N) > tokens_.size()) {
      throw gc::rt::RuntimeError("CUDA backend: a batch of " + std::to_string(N) + " rows, but it was prepared for " +
                                 std::to_string(tokens_.size()));
    }
  }
  int batch_ = 0, seq_len_ = 0, num_unique_ = 0;
  bool wgmma_attention_ = false, wgmma_experts_ = false;  // choose_kernels
  std::int64_t scored_ = 0;  // targets ≥ 0 of the last stage_targets (the loss divisor)
  BlasLt blas_;
  DeviceBuffer<float> cos_, sin_, dg_scratch_, attention_scratch_;
  DeviceBuffer<std::int32_t> tokens_, targets_, index_tokens_, index_offsets_, index_positions_;
  gc::rt::cuda::PinnedUploader<std::int32_t> staging_;  // host → device without a wait
  DeviceBuffer<double> loss_sum_;
  DeviceBuffer<double> moment_partials_;  // accumulate_moments' per-slice sums (logit_std)
  DeviceBuffer<double> step_loss_;  // Σ weight · mean loss of the deferred forwards
  double deferred_weight_ = -1.0;   // ≥ 0: the next mean_loss is deferred with it
  std::vector<double> aux_host_;                // mean_loss's read of the balancing losses (evaluation)
  DeviceBuffer<double> moe_row_total_;          // MoE: Σ_e s per row (sigmoid) or lse² (z-loss)
  int moe_groups_ = 1;                          // sequences of the prepared batch
  DeviceBuffer<std::int64_t> moe_counts_;       // the dispatch's rows per expert
  AlignedLinear<T> linear_;  // the dense projections, padded to widths of 8 where needed
  DeviceBuffer<T> moe_router_grad_;  // bf16: the router's logit gradient as GEMM operand
};

}  // namespace gc::tree::cuda
