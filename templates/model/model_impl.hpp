// BasicModel<Backend> member definitions (included by model.hpp). Backward
// mirrors the forward in reverse; every parameter gradient accumulates (+=),
// so calls over micro-batches sum. `ops_` is the backend: each call below is
// one kernel (or one GEMM) on the CPU or on the GPU.
#pragma once

#include "model/model.hpp"  // self-contained when parsed alone

#include <algorithm>

namespace gc::tree {

namespace detail {
inline constexpr bool kGated = kGatedAttention != GatedAttention::none;
inline constexpr bool kSandwich = kNormPlacement == NormPlacement::sandwich;

// Whether every dense layer stores W_up right after W_gate (no alignment gap between them), so
// that the two are one [2·d_ff, d_model] matrix [W_gate; W_up]: the MLP's two input projections
// are then one GEMM forward and one each for dx and dW backward, writing rows [a | b].
constexpr bool gate_up_stacked() {
  for (int l = 0; l < kNumLayers; ++l) {
    const LayerParams& P = kLayerParams[l];
    if (P.mlp_gate < 0) continue;  // an MoE layer
    if (P.mlp_up != P.mlp_gate + 1 || kOffsets.at[P.mlp_up] != kOffsets.at[P.mlp_gate] + kParams[P.mlp_gate].numel) {
      return false;
    }
  }
  return true;
}
inline constexpr bool kGateUpStacked = gate_up_stacked();

// Whether every layer stores k_proj right after q_proj and v_proj right after k_proj (no
// alignment gap): [W_q; W_k; W_v] is then one [(H + 2·KV)·hd, d_model] matrix and the three
// projections are one GEMM forward and one each for dx and dW backward. Without QK-norm,
// qkv_rope_forward splits the stacked output (one scratch buffer for all layers) into RoPE(q),
// RoPE(k) and v (the RoPE pass the separate projections need anyway, plus a copy of v) and
// qkv_rope_backward stacks the gradients. With QK-norm each layer keeps its stacked output (the
// norm's backward reads q and k): the norm reads q's and k's heads inside it and writes their
// gradients back into the stacked gradient, and only v is copied out and back.
constexpr bool qkv_stacked() {
  for (int l = 0; l < kNumLayers; ++l) {
    const LayerParams& P = kLayerParams[l];
    if (P.k != P.q + 1 || P.v != P.k + 1) return false;
    if (kOffsets.at[P.k] != kOffsets.at[P.q] + kParams[P.q].numel ||
        kOffsets.at[P.v] != kOffsets.at[P.k] + kParams[P.k].numel) {
      return false;
    }
  }
  return true;
}
inline constexpr bool kQkvStacked = qkv_stacked();
inline constexpr int kQkvDim = kQDim + 2 * kKvDim;  // a row of the stacked projection

// The step profile's names (profile/step_profile.hpp).
using PC = profile::Category;
using profile::kBwd;
using profile::kFwd;
}  // namespace detail

template <typename Backend>
BasicModel<Backend>::BasicModel(int batch, int seq_len, int head_rows, State state)
    : B_(batch),
      T_(seq_len),
      N_(batch * seq_len),
      head_rows_(std::clamp(head_rows, 1, std::max(batch * seq_len, 1))),
      dims_{batch, seq_len, kHeads, kKvHeads, kHeadDim} {
  const std::int64_t N = N_, D = kDModel, F = kDff;
  ops_.prepare(batch, seq_len);
  if (state == State::allocate) {  // state, not counted in buffer_bytes()
    Backend::allocate(params, kOffsets.at[kNumParams]);
    Backend::allocate(grads, state_.total());
  }
  allocate(e_, N * D);
  allocate(e_norm_, N * D);
  if constexpr (kEmbeddingNorm) {
    allocate(rstd_e_, N);
  }
  layers_.resize(kLayers);
  if constexpr (kMoe) {
    const auto alloc = [this](auto& buf, std::int64_t n) { allocate(buf, n); };
    moe_.resize(kLayers);
    for (int l = 0; l < kLayers; ++l) {
      if (is_moe_layer(l)) allocate_moe_layer(moe_[std::size_t(l)], N, T_, alloc);
    }
    allocate_moe_scratch(moe_scratch_, N, alloc);
    allocate(aux_, kLayers);
    aux_host_.assign(std::size_t(kLayers), 0.0);
  }
  bool any_dense = false;
  for (int l = 0; l < kLayers; ++l) {
    Layer& L = layers_[std::size_t(l)];
    for (auto* buf : {&L.x, &L.a, &L.h2, &L.b, &L.proj, &L.m}) allocate(*buf, N * D);
    for (auto* buf : {&L.rstd_a, &L.rstd_b}) allocate(*buf, N);
    if constexpr (detail::kQkvStacked) {  // q and k live in the stacked output only
      if constexpr (kQkNorm) {
        allocate(L.qkv, N * detail::kQkvDim);
      }
      for (auto* buf : {&L.qr, &L.o}) allocate(*buf, N * kQDim);
      for (auto* buf : {&L.v, &L.kr}) allocate(*buf, N * kKvDim);
    } else {
      for (auto* buf : {&L.q, &L.qr, &L.o}) allocate(*buf, N * kQDim);
      for (auto* buf : {&L.k, &L.v, &L.kr}) allocate(*buf, N * kKvDim);
    }
    allocate(L.lse, std::int64_t(B_) * kHeads * seq_len);
    if (!is_moe_layer(l)) {
      allocate(L.uw, 2 * N * F);
      allocate(L.s, N * F);
      any_dense = true;
    }
    if constexpr (kQkNorm) {
      allocate(L.qn, N * kQDim);
      allocate(L.kn, N * kKvDim);
      allocate(L.rstd_q, N * kHeads);
      allocate(L.rstd_k, N * kKvHeads);
    }
    if constexpr (detail::kGated) {
      allocate(L.z, N * kGateDim);
      allocate(L.og, N * kQDim);
    }
    if constexpr (detail::kSandwich) {
      allocate(L.pn, N * D);
      allocate(L.mn, N * D);
      allocate(L.rstd_p, N);
      allocate(L.rstd_m, N);
    }
  }
  allocate(h_final_, N * D);
  allocate(f_, N * D);
  allocate(rstd_f_, N);
  allocate(logits_, std::int64_t(head_rows_) * kVocab);
  allocate(logit_moments, 2);
  allocate(losses_, N);
  allocate(p_target_, N);
  for (auto* buf : {&dh_, &dx_, &dd_}) allocate(*buf, N * D);
  if constexpr (detail::kQkvStacked) {
    if constexpr (!kQkNorm) {
      allocate(qkv_, N * detail::kQkvDim);
    }
    allocate(dqkv_, N * detail::kQkvDim);
    for (auto* buf : {&dqr_, &do_}) allocate(*buf, N * kQDim);
    for (auto* buf : {&dkr_, &dv_}) allocate(*buf, N * kKvDim);
  } else {
    for (auto* buf : {&dq_, &dqr_, &do_}) allocate(*buf, N * kQDim);
    for (auto* buf : {&dk_, &dkr_, &dv_}) allocate(*buf, N * kKvDim);
  }
  allocate(dz_, N * std::max(kGateDim, 1));
  if (any_dense) {
    allocate(dff_ab_, 2 * N * F);
    allocate(dff_s_, N * F);
  }
  allocate(dlogits_, std::int64_t(head_rows_) * kVocab);
}

// m = SwiGLU(b·Wgateᵀ, b·Wupᵀ)·Wdownᵀ.
// With W_gate and W_up stacked (detail::kGateUpStacked), uw holds rows [a | b] from one GEMM;
// else its first half is a [N, d_ff] and its second half b.
template <typename Backend>
void BasicModel<Backend>::dense_mlp_forward(Layer& L, const LayerParams& P) {
  using detail::PC, detail::kFwd;
  const int N = N_, D = kDModel;
  const double NF = double(N) * kDff;
  if constexpr (detail::kGateUpStacked) {
    timed_gemm(PC::gemm_mlp_in, kFwd, N, D, 2 * kDff,
               [&] { ops_.linear_forward(L.uw.data(), L.b.data(), param(P.mlp_gate), N, D, 2 * kDff); });
    timed_op(PC::swiglu, "swiglu_pair_forward", kFwd, 3 * NF,
             [&] { ops_.swiglu_pair_forward(L.s.data(), L.uw.data(), N, kDff); });
  } else {
    Act* a = L.uw.data();
    Act* b = a + std::int64_t(N) * kDff;
    timed_gemm(PC::gemm_mlp_in, kFwd, N, D, kDff, [&] { ops_.linear_forward(a, L.b.data(), param(P.mlp_gate), N, D, kDff); });
    timed_gemm(PC::gemm_mlp_in, kFwd, N, D, kDff, [&] { ops_.linear_forward(b, L.b.data(), param(P.mlp_up), N, D, kDff); });
    timed_op(PC::swiglu, "swiglu_forward", kFwd, 3 * NF,
             [&] { ops_.swiglu_forward(L.s.data(), a, b, std::int64_t(N) * kDff); });
  }
  timed_gemm(PC::gemm_mlp_down, kFwd, N, kDff, D,
             [&] { ops_.linear_forward(L.m.data(), L.s.data(), param(P.mlp_down), N, kDff, D); });
}

// dx_ = dL/db (overwritten) from dm = dL/dm.
template <typename Backend>
void BasicModel<Backend>::dense_mlp_backward(Layer& L, const LayerParams& P, const Act* dm) {
  using detail::PC, detail::kBwd;
  const int N = N_, D = kDModel;
  const double NF = double(N) * kDff;
  timed_gemm(PC::gemm_mlp_down, kBwd, N, kDff, D, [&] {
    ops_.linear_backward(dff_s_.data(), grad(P.mlp_down), dm, L.s.data(), param(P.mlp_down), N, kDff, D);
  });
  if constexpr (detail::kGateUpStacked) {
    // The gradients are stacked like the weights: grad(P.mlp_gate) spans both.
    timed_op(PC::swiglu, "swiglu_pair_backward", kBwd, 5 * NF,
             [&] { ops_.swiglu_pair_backward(dff_ab_.data(), dff_s_.data(), L.uw.data(), N, kDff); });
    timed_gemm(PC::gemm_mlp_in, kBwd, N, D, 2 * kDff, [&] {
      ops_.linear_backward(dx_.data(), grad(P.mlp_gate), dff_ab_.data(), L.b.data(), param(P.mlp_gate), N, D, 2 * kDff);
    });
  } else {
    const std::int64_t half = std::int64_t(N) * kDff;
    Act* da = dff_ab_.data();
    Act* db = da + half;
    timed_op(PC::swiglu, "swiglu_backward", kBwd, 5 * NF,
             [&] { ops_.swiglu_backward(da, db, dff_s_.data(), L.uw.data(), L.uw.data() + half, half); });
    timed_gemm(PC::gemm_mlp_in, kBwd, N, D, kDff, [&] {
      ops_.linear_backward(dx_.data(), grad(P.mlp_gate), da, L.b.data(), param(P.mlp_gate), N, D, kDff);
    });
    timed_gemm(PC::gemm_mlp_in, kBwd, N, D, kDff, [&] {
      ops_.linear_backward(dx_.data(), grad(P.mlp_up), db, L.b.data(), param(P.mlp_up), N, D, kDff, true);
    });
  }
}

template <typename Backend>
void BasicModel<Backend>::forward_layer(int l, const Act* h_in, Act* h_out) {
  using detail::PC, detail::kFwd;
  Layer& L = layers_[l];
  const LayerParams& P = kLayerParams[l];
  const int N = N_, D = kDModel;
  const double ND = double(N) * D;
  timed_op(PC::norm, "rmsnorm_forward", kFwd, 2 * ND,
           [&] { ops_.rmsnorm_forward(L.a.data(), L.rstd_a.data(), h_in, param(P.input_norm), N, D); });
  if constexpr (detail::kQkvStacked && kQkNorm) {
    // param(P.q) is [W_q; W_k; W_v]: one GEMM; the norm reads q's and k's heads in its rows.
    Act* qkv = L.qkv.data();
    timed_gemm(PC::gemm_qkv, kFwd, N, D, detail::kQkvDim,
               [&] { ops_.linear_forward(qkv, L.a.data(), param(P.q), N, D, detail::kQkvDim); });
    timed_op(PC::norm, "stacked_heads_rmsnorm_forward", kFwd, 2.0 * N * kQDim, [&] {
      ops_.stacked_heads_rmsnorm_forward(L.qn.data(), L.rstd_q.data(), qkv, param(P.q_norm), N, true);
    });
    timed_op(PC::norm, "stacked_heads_rmsnorm_forward", kFwd, 2.0 * N * kKvDim, [&] {
      ops_.stacked_heads_rmsnorm_forward(L.kn.data(), L.rstd_k.data(), qkv + kQDim, param(P.k_norm), N, false);
    });
    timed_op(PC::rope, "rope_forward", kFwd, 2.0 * N * kQDim, [&] { ops_.rope_forward(L.qr.data(), L.qn.data(), kHeads); });
    timed_op(PC::rope, "rope_forward", kFwd, 2.0 * N * kKvDim,
             [&] { ops_.rope_forward(L.kr.data(), L.kn.data(), kKvHeads); });
    timed_op(PC::other, "qkv_v_forward", kFwd, 2.0 * N * kKvDim, [&] { ops_.qkv_v_forward(L.v.data(), qkv); });
  } else if constexpr (detail::kQkvStacked) {
    // One GEMM, then RoPE(q), RoPE(k) and v out of its rows.
    timed_gemm(PC::gemm_qkv, kFwd, N, D, detail::kQkvDim,
               [&] { ops_.linear_forward(qkv_.data(), L.a.data(), param(P.q), N, D, detail::kQkvDim); });
    timed_op(PC::rope, "qkv_rope_forward", kFwd, 2.0 * N * detail::kQkvDim,
             [&] { ops_.qkv_rope_forward(L.qr.data(), L.kr.data(), L.v.data(), qkv_.data()); });
  } else {
    timed_gemm(PC::gemm_qkv, kFwd, N, D, kQDim, [&] { ops_.linear_forward(L.q.data(), L.a.data(), param(P.q), N, D, kQDim); });
    timed_gemm(PC::gemm_qkv, kFwd, N, D, kKvDim,
               [&] { ops_.linear_forward(L.k.data(), L.a.data(), param(P.k), N, D, kKvDim); });
    timed_gemm(PC::gemm_qkv, kFwd, N, D, kKvDim,
               [&] { ops_.linear_forward(L.v.data(), L.a.data(), param(P.v), N, D, kKvDim); });
    const Act* q = L.q.data();
    const Act* k = L.k.data();
    if constexpr (kQkNorm) {
      // One gain per head dimension: an RMSNorm over rows of head_dim.
      timed_op(PC::norm, "rmsnorm_forward", kFwd, 2.0 * N * kQDim, [&] {
        ops_.rmsnorm_forward(L.qn.data(), L.rstd_q.data(), q, param(P.q_norm), std::int64_t(N) * kHeads, kHeadDim);
      });
      timed_op(PC::norm, "rmsnorm_forward", kFwd, 2.0 * N * kKvDim, [&] {
        ops_.rmsnorm_forward(L.kn.data(), L.rstd_k.data(), k, param(P.k_norm), std::int64_t(N) * kKvHeads, kHeadDim);
      });
      q = L.qn.data();
      k = L.kn.data();
    }
    timed_op(PC::rope, "rope_forward", kFwd, 2.0 * N * kQDim, [&] { ops_.rope_forward(L.qr.data(), q, kHeads); });
    timed_op(PC::rope, "rope_forward", kFwd, 2.0 * N * kKvDim, [&] { ops_.rope_forward(L.kr.data(), k, kKvHeads); });
  }
  profile::timed(ops_.profiler, {PC::attention, "attention_forward", kFwd, attention_flops(kFwd)}, [&] {
    ops_.attention_forward(L.o.data(), L.lse.data(), L.qr.data(), L.kr.data(), L.v.data(), dims_, double(kAttnScale));
  });
  const Act* attn_out = L.o.data();
  if constexpr (detail::kGated) {
    timed_gemm(PC::gemm_attn_gate, kFwd, N, D, kGateDim,
               [&] { ops_.linear_forward(L.z.data(), L.a.data(), param(P.gate), N, D, kGateDim); });
    timed_op(PC::gate, "gate_forward", kFwd, double(N) * (2 * kQDim + kGateDim),
             [&] { ops_.template gate_forward<kGatedAttention>(L.og.data(), L.o.data(), L.z.data(), N); });
    attn_out = L.og.data();
  }
  timed_gemm(PC::gemm_attn_out, kFwd, N, kQDim, D,
             [&] { ops_.linear_forward(L.proj.data(), attn_out, param(P.o), N, kQDim, D); });
  const Act* branch = L.proj.data();
  if constexpr (detail::kSandwich) {
    timed_op(PC::norm, "rmsnorm_forward", kFwd, 2 * ND,
             [&] { ops_.rmsnorm_forward(L.pn.data(), L.rstd_p.data(), branch, param(P.attn_out_norm), N, D); });
    branch = L.pn.data();
  }
  // h2 = h + branch and b = RMSNorm(h2), fused on the GPU.
  timed_op(PC::norm, "add_rmsnorm_forward", kFwd, 4 * ND, [&] {
    ops_.add_rmsnorm_forward(L.h2.data(), L.b.data(), L.rstd_b.data(), h_in, branch, param(P.post_attn_norm), N, D);
  });
  if constexpr (kMoe) {
    if (is_moe_layer(l)) {
      moe_forward(ops_, moe_[std::size_t(l)], moe_scratch_, L.m.data(), L.b.data(), moe_params(l),
                  ModelWeights{this}, N, T_, aux_.data() + l,
                  exchange_experts_ ? expert_exchange_ : nullptr);
    } else {
      dense_mlp_forward(L, P);
    }
  } else {
    dense_mlp_forward(L, P);
  }
  branch = L.m.data();
  if constexpr (detail::kSandwich) {
    timed_op(PC::norm, "rmsnorm_forward", kFwd, 2 * ND,
             [&] { ops_.rmsnorm_forward(L.mn.data(), L.rstd_m.data(), branch, param(P.mlp_out_norm), N, D); });
    branch = L.mn.data();
  }
  timed_op(PC::other, "add", kFwd, 3 * ND, [&] { Backend::add(h_out, L.h2.data(), branch, std::int64_t(N) * D); });
}

template <typename Backend>
double BasicModel<Backend>::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  return forward_impl(tokens, targets, nullptr);
}

template <typename Backend>
double BasicModel<Backend>::forward_backward(const std::int32_t* tokens, const std::int32_t* targets,
                                             double loss_scale) {
  const double objective = forward_impl(tokens, targets, &loss_scale);
  backward(loss_scale);
  return objective;
}

// Logits = f·Wlmᵀ (α is applied by the cross-entropy kernels), per-row losses and p(target),
// head_rows_ rows at a time through one chunk buffer. With fused_loss_scale (forward_backward)
// each chunk's backward follows at once: dlogits, its rows of dL/df (dd_) and the head's
// gradient, so the logits are never recomputed.
template <typename Backend>
void BasicModel<Backend>::head_forward(const double* fused_loss_scale) {
  if (track_logit_moments_) Backend::zero(logit_moments);
  for (int r0 = 0; r0 < N_; r0 += head_rows_) {
    const int rows = std::min(head_rows_, N_ - r0);
    head_chunk_logits(r0, rows);
    timed_op(detail::PC::lm_head_ce, "cross_entropy_forward", detail::kFwd, double(rows) * kVocab, [&] {
      ops_.cross_entropy_forward(losses_.data() + r0, p_target_.data() + r0, logits_.data(), targets_ + r0, rows,
                                 kVocab, double(kLogitScale));
    });
    if (track_logit_moments_) {
      timed_op(detail::PC::measuring, "add_moments", detail::kFwd, double(rows) * kVocab, [&] {
        ops_.add_moments(logit_moments.data(), logits_.data(), std::int64_t(rows) * kVocab, double(kLogitScale));
      });
    }
    if (fused_loss_scale != nullptr) head_chunk_backward(r0, rows, *fused_loss_scale);
  }
  head_backward_done_ = fused_loss_scale != nullptr;
}

// logits_ = f[r0 .. r0+rows)·Wlmᵀ (the chunk's logits, without α).
template <typename Backend>
void BasicModel<Backend>::head_chunk_logits(int r0, int rows) {
  timed_gemm(detail::PC::lm_head_ce, detail::kFwd, rows, kDModel, kVocab, [&] {
    ops_.linear_forward(logits_.data(), f_.data() + std::int64_t(r0) * kDModel, head_weight(), rows, kDModel, kVocab);
  });
}

// Rows r0 .. r0+rows of dL/df into dd_ and the head's gradient (+=), from the chunk's logits in logits_.
template <typename Backend>
void BasicModel<Backend>::head_chunk_backward(int r0, int rows, double loss_scale) {
  using detail::PC, detail::kBwd;
  const int D = kDModel;
  timed_op(PC::lm_head_ce, "cross_entropy_backward", kBwd, 2.0 * rows * kVocab, [&] {
    ops_.cross_entropy_backward(dlogits_.data(), logits_.data(), targets_ + r0, rows, kVocab, double(kLogitScale),
                                loss_scale);
  });
  timed_gemm(PC::lm_head_ce, kBwd, rows, D, kVocab, [&] {
    ops_.linear_backward(dd_.data() + std::int64_t(r0) * D, head_grad(), dlogits_.data(),
                         f_.data() + std::int64_t(r0) * D, head_weight(), rows, D, kVocab);
  });
}

template <typename Backend>
void BasicModel<Backend>::use_weight_layout(const StateLayout& layout) {
  if constexpr (kMoe) {
    if (!layout.is_whole() && expert_exchange_ == nullptr) {
      throw std::logic_error("an expert-block weight layout needs the expert exchange (attach_expert_exchange first)");
    }
  }
  params = Buffer<Act>();                   // released before the new array exists
  Backend::allocate(params, layout.total());  // zero: the alignment gaps stay so
  weights_ = layout;
}

template <typename Backend>
double BasicModel<Backend>::forward_impl(const std::int32_t* tokens, const std::int32_t* targets,
                                         const double* fused_loss_scale) {
  using detail::PC, detail::kFwd;
  const int N = N_, D = kDModel;
  const double ND = double(N) * D;
  // Training forwards run the experts on their owners; every forward does when this rank holds
  // its own experts' weights only.
  exchange_experts_ = expert_exchange_ != nullptr && (fused_loss_scale != nullptr || !weights_.is_whole());
  if constexpr (kMoe) {
    Backend::zero(aux_);  // each MoE layer adds its balancing losses to its entry
  }
  timed_op(PC::other, "stage_batch", kFwd, 0.0, [&] {
    tokens_ = ops_.stage_tokens(tokens, N);
    targets_ = ops_.stage_targets(targets, N);
  });
  timed_op(PC::embedding, "embedding_forward", kFwd, 2 * ND,
           [&] { ops_.embedding_forward(e_.data(), tokens_, param(kParamEmbed), N, D, double(kEmbeddingScale)); });
  if constexpr (kEmbeddingNorm) {
    timed_op(PC::norm, "rmsnorm_forward", kFwd, 2 * ND,
             [&] { ops_.rmsnorm_forward(e_norm_.data(), rstd_e_.data(), e_.data(), param(kParamEmbedNorm), N, D); });
  } else {
    timed_op(PC::other, "copy", kFwd, 2 * ND, [&] { Backend::copy(e_norm_.data(), e_.data(), std::int64_t(N) * D); });
  }
  timed_op(PC::other, "copy", kFwd, 2 * ND,
           [&] { Backend::copy(layers_[0].x.data(), e_norm_.data(), std::int64_t(N) * D); });
  for (int l = 0; l < kLayers; ++l) {
    Act* out = l + 1 < kLayers ? layers_[l + 1].x.data() : h_final_.data();
    forward_layer(l, layers_[l].x.data(), out);
  }
  timed_op(PC::norm, "rmsnorm_forward", kFwd, 2 * ND,
           [&] { ops_.rmsnorm_forward(f_.data(), rstd_f_.data(), h_final_.data(), param(kParamFinalNorm), N, D); });
  head_forward(fused_loss_scale);
  // The mean cross-entropy plus the balancing losses (0 while the backend defers the loss to the
  // device: engine/cuda_engine.cu).
  double objective = 0.0;
  timed_op(PC::lm_head_ce, "mean_loss", kFwd, double(N), [&] {
    objective = ops_.mean_loss(losses_.data(), N, kMoe ? aux_.data() : nullptr, kMoe ? kLayers : 0);
  });
  return objective;
}

template <typename Backend>
void BasicModel<Backend>::backward_layer(int l, Act* dh, double loss_scale) {
  using detail::PC, detail::kBwd;
  Layer& L = layers_[l];
  const LayerParams& P = kLayerParams[l];
  const int N = N_, D = kDModel;
  const double ND = double(N) * D;
  // MLP branch: h_out = h2 + [norm](SwiGLU(b·Wgate, b·Wup)·Wdown).
  const Act* dm = dh;
  if constexpr (detail::kSandwich) {
    timed_op(PC::norm, "rmsnorm_backward", kBwd, 3 * ND, [&] {
      ops_.rmsnorm_backward(dd_.data(), grad(P.mlp_out_norm), dh, L.m.data(), param(P.mlp_out_norm), L.rstd_m.data(),
                            N, D);
    });
    dm = dd_.data();
  }
  if constexpr (kMoe) {
    if (is_moe_layer(l)) {
      moe_backward(ops_, moe_[std::size_t(l)], moe_scratch_, dx_.data(), dm, L.b.data(), moe_params(l),
                   ModelWeights{this}, [this](int i, std::int64_t from) { return grad_from(i, from); }, N,
                   T_, loss_scale,
                   expert_exchange_);
    } else {
      dense_mlp_backward(L, P, dm);
    }
  } else {
    (void)loss_scale;  // only the MoE balancing loss reads it here
    dense_mlp_backward(L, P, dm);
  }
  timed_op(PC::norm, "rmsnorm_backward", kBwd, 4 * ND, [&] {
    ops_.rmsnorm_backward(dh, grad(P.post_attn_norm), dx_.data(), L.h2.data(), param(P.post_attn_norm),
                          L.rstd_b.data(), N, D, true);  // dh is now dL/dh2
  });

  // Attention branch: h2 = x + [norm](gate ⊙ SDPA(RoPE(q), RoPE(k), v)·Wo).
  const Act* dp = dh;
  if constexpr (detail::kSandwich) {
    timed_op(PC::norm, "rmsnorm_backward", kBwd, 3 * ND, [&] {
      ops_.rmsnorm_backward(dd_.data(), grad(P.attn_out_norm), dh, L.proj.data(), param(P.attn_out_norm),
                            L.rstd_p.data(), N, D);
    });
    dp = dd_.data();
  }
  const Act* attn_out = L.o.data();
  if constexpr (detail::kGated) {
    attn_out = L.og.data();
  }
  timed_gemm(PC::gemm_attn_out, kBwd, N, kQDim, D,
             [&] { ops_.linear_backward(do_.data(), grad(P.o), dp, attn_out, param(P.o), N, kQDim, D); });
  if constexpr (detail::kGated) {
    timed_op(PC::gate, "gate_backward", kBwd, double(N) * (3 * kQDim + 2 * kGateDim), [&] {
      ops_.template gate_backward<kGatedAttention>(do_.data(), dz_.data(), do_.data(), L.o.data(), L.z.data(), N);
    });
  }
  profile::timed(ops_.profiler, {PC::attention, "attention_backward", kBwd, attention_flops(kBwd)}, [&] {
    ops_.attention_backward(dqr_.data(), dkr_.data(), dv_.data(), do_.data(), L.o.data(), L.lse.data(), L.qr.data(),
                            L.kr.data(), L.v.data(), dims_, double(kAttnScale));
  });
  if constexpr (detail::kQkvStacked) {
    // The gradients stacked like the weights: grad(P.q) spans W_q, W_k and W_v.
    if constexpr (kQkNorm) {
      timed_op(PC::rope, "rope_backward", kBwd, 2.0 * N * kQDim,
               [&] { ops_.rope_backward(dqr_.data(), dqr_.data(), kHeads); });  // in place: dL/dqn
      timed_op(PC::rope, "rope_backward", kBwd, 2.0 * N * kKvDim,
               [&] { ops_.rope_backward(dkr_.data(), dkr_.data(), kKvHeads); });
      const Act* qkv = L.qkv.data();
      timed_op(PC::norm, "stacked_heads_rmsnorm_backward", kBwd, 3.0 * N * kQDim, [&] {
        ops_.stacked_heads_rmsnorm_backward(dqkv_.data(), grad(P.q_norm), dqr_.data(), qkv, param(P.q_norm),
                                            L.rstd_q.data(), N, true);
      });
      timed_op(PC::norm, "stacked_heads_rmsnorm_backward", kBwd, 3.0 * N * kKvDim, [&] {
        ops_.stacked_heads_rmsnorm_backward(dqkv_.data() + kQDim, grad(P.k_norm), dkr_.data(), qkv + kQDim,
                                            param(P.k_norm), L.rstd_k.data(), N, false);
      });
      timed_op(PC::other, "qkv_v_backward", kBwd, 2.0 * N * kKvDim, [&] { ops_.qkv_v_backward(dqkv_.data(), dv_.data()); });
    } else {
      timed_op(PC::rope, "qkv_rope_backward", kBwd, 2.0 * N * detail::kQkvDim,
               [&] { ops_.qkv_rope_backward(dqkv_.data(), dqr_.data(), dkr_.data(), dv_.data()); });
    }
    timed_gemm(PC::gemm_qkv, kBwd, N, D, detail::kQkvDim, [&] {
      ops_.linear_backward(dx_.data(), grad(P.q), dqkv_.data(), L.a.data(), param(P.q), N, D, detail::kQkvDim);
    });
  } else {
    timed_op(PC::rope, "rope_backward", kBwd, 2.0 * N * kQDim, [&] { ops_.rope_backward(dq_.data(), dqr_.data(), kHeads); });
    timed_op(PC::rope, "rope_backward", kBwd, 2.0 * N * kKvDim,
             [&] { ops_.rope_backward(dk_.data(), dkr_.data(), kKvHeads); });
    const Act* dq = dq_.data();
    const Act* dk = dk_.data();
    if constexpr (kQkNorm) {
      timed_op(PC::norm, "rmsnorm_backward", kBwd, 3.0 * N * kQDim, [&] {
        ops_.rmsnorm_backward(dqr_.data(), grad(P.q_norm), dq_.data(), L.q.data(), param(P.q_norm), L.rstd_q.data(),
                              std::int64_t(N) * kHeads, kHeadDim);
      });
      timed_op(PC::norm, "rmsnorm_backward", kBwd, 3.0 * N * kKvDim, [&] {
        ops_.rmsnorm_backward(dkr_.data(), grad(P.k_norm), dk_.data(), L.k.data(), param(P.k_norm), L.rstd_k.data(),
                              std::int64_t(N) * kKvHeads, kHeadDim);
      });
      dq = dqr_.data();
      dk = dkr_.data();
    }
    timed_gemm(PC::gemm_qkv, kBwd, N, D, kQDim,
               [&] { ops_.linear_backward(dx_.data(), grad(P.q), dq, L.a.data(), param(P.q), N, D, kQDim); });
    timed_gemm(PC::gemm_qkv, kBwd, N, D, kKvDim,
               [&] { ops_.linear_backward(dx_.data(), grad(P.k), dk, L.a.data(), param(P.k), N, D, kKvDim, true); });
    timed_gemm(PC::gemm_qkv, kBwd, N, D, kKvDim, [&] {
      ops_.linear_backward(dx_.data(), grad(P.v), dv_.data(), L.a.data(), param(P.v), N, D, kKvDim, true);
    });
  }
  if constexpr (detail::kGated) {
    timed_gemm(PC::gemm_attn_gate, kBwd, N, D, kGateDim, [&] {
      ops_.linear_backward(dx_.data(), grad(P.gate), dz_.data(), L.a.data(), param(P.gate), N, D, kGateDim, true);
    });
  }
  timed_op(PC::norm, "rmsnorm_backward", kBwd, 4 * ND, [&] {
    ops_.rmsnorm_backward(dh, grad(P.input_norm), dx_.data(), L.x.data(), param(P.input_norm), L.rstd_a.data(), N, D,
                          true);  // dh is now dL/dx
  });
}

template <typename Backend>
void BasicModel<Backend>::backward(double loss_scale) {
  const int N = N_, D = kDModel;
  if (!head_backward_done_) {
    for (int r0 = 0; r0 < N; r0 += head_rows_) {
      const int rows = std::min(head_rows_, N - r0);
      if (!keeps_logits()) head_chunk_logits(r0, rows);  // the buffer holds another chunk (or the last one)
      head_chunk_backward(r0, rows, loss_scale);
    }
  }
  head_backward_done_ = false;
  const double ND = double(N) * D;
  timed_op(detail::PC::norm, "rmsnorm_backward", detail::kBwd, 3 * ND, [&] {
    ops_.rmsnorm_backward(dh_.data(), grad(kParamFinalNorm), dd_.data(), h_final_.data(), param(kParamFinalNorm),
                          rstd_f_.data(), N, D);
  });
  if (on_layer_grads_done) on_layer_grads_done(kLayers);  // the final norm and an untied LM head
  for (int l = kLayers - 1; l >= 0; --l) {
    backward_layer(l, dh_.data(), loss_scale);
    if (on_layer_grads_done) on_layer_grads_done(l);
  }
  const Act* de = dh_.data();
  if constexpr (kEmbeddingNorm) {
    timed_op(detail::PC::norm, "rmsnorm_backward", detail::kBwd, 3 * ND, [&] {
      ops_.rmsnorm_backward(dd_.data(), grad(kParamEmbedNorm), dh_.data(), e_.data(), param(kParamEmbedNorm),
                            rstd_e_.data(), N, D);
    });
    de = dd_.data();
  }
  timed_op(detail::PC::embedding, "embedding_backward", detail::kBwd, 3 * ND,
           [&] { ops_.embedding_backward(grad(kParamEmbed), tokens_, de, N, D, double(kEmbeddingScale)); });
}

}  // namespace gc::tree
