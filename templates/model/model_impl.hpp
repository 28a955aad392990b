// Model<T> member definitions (included by model.hpp). Backward mirrors the
// forward in reverse; every parameter gradient accumulates (+=), so calls
// over micro-batches sum.
#pragma once

#include "model/model.hpp"  // self-contained when parsed alone

#include <algorithm>

namespace gcm {

namespace detail {
inline constexpr cpu::GateMode kGateKernel =
    kGatedAttention == GatedAttention::headwise ? cpu::GateMode::headwise : cpu::GateMode::elementwise;
inline constexpr bool kGated = kGatedAttention != GatedAttention::none;
inline constexpr bool kSandwich = kNormPlacement == NormPlacement::sandwich;

template <typename T>
void add(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
}  // namespace detail

template <typename T>
Model<T>::Model(int batch, int seq_len)
    : B_(batch), T_(seq_len), N_(batch * seq_len), dims_{batch, seq_len, kHeads, kKvHeads, kHeadDim} {
  const std::int64_t N = N_, D = kDModel, F = kDff;
  params.assign(std::size_t(kOffsets.at[kNumParams]), T(0));
  grads.assign(params.size(), T(0));
  cos_.resize(std::size_t(seq_len) * kHeadDim / 2);
  sin_.resize(cos_.size());
  cpu::rope_table(cos_.data(), sin_.data(), seq_len, kHeadDim, kRopeTheta);
  e_.resize(N * D);
  if constexpr (kEmbeddingNorm) {
    e_norm_.resize(N * D);
    rstd_e_.resize(N);
  }
  layers_.resize(kLayers);
  for (auto& L : layers_) {
    for (auto* buf : {&L.x, &L.a, &L.h2, &L.b, &L.proj, &L.m}) buf->resize(N * D);
    for (auto* buf : {&L.rstd_a, &L.rstd_b}) buf->resize(N);
    for (auto* buf : {&L.q, &L.qr, &L.o}) buf->resize(N * kQDim);
    for (auto* buf : {&L.k, &L.v, &L.kr}) buf->resize(N * kKvDim);
    L.lse.resize(std::size_t(B_) * kHeads * seq_len);
    for (auto* buf : {&L.u, &L.w, &L.s}) buf->resize(N * F);
    if constexpr (kQkNorm) {
      L.qn.resize(N * kQDim);
      L.kn.resize(N * kKvDim);
      L.rstd_q.resize(N * kHeads);
      L.rstd_k.resize(N * kKvHeads);
    }
    if constexpr (detail::kGated) {
      L.z.resize(N * kGateDim);
      L.og.resize(N * kQDim);
    }
    if constexpr (detail::kSandwich) {
      L.pn.resize(N * D);
      L.mn.resize(N * D);
      L.rstd_p.resize(N);
      L.rstd_m.resize(N);
    }
  }
  h_final_.resize(N * D);
  f_.resize(N * D);
  rstd_f_.resize(N);
  logits_.resize(N * kVocab);
  losses_.resize(N);
  p_target_.resize(N);
  for (auto* buf : {&dh_, &dx_, &dd_}) buf->resize(N * D);
  for (auto* buf : {&dq_, &dqr_, &do_}) buf->resize(N * kQDim);
  for (auto* buf : {&dk_, &dkr_, &dv_}) buf->resize(N * kKvDim);
  dz_.resize(N * std::max(kGateDim, 1));
  for (auto* buf : {&dff_a_, &dff_b_, &dff_s_}) buf->resize(N * F);
  dlogits_.resize(N * kVocab);
}

template <typename T>
void Model<T>::forward_layer(int l, const T* h_in, T* h_out) {
  Layer& L = layers_[l];
  const LayerParams& P = kLayerParams[l];
  const int N = N_, D = kDModel;
  cpu::rmsnorm_forward(L.a.data(), L.rstd_a.data(), h_in, param(P.input_norm), N, D, kNormEps);
  cpu::linear_forward(L.q.data(), L.a.data(), param(P.q), (const T*)nullptr, N, D, kQDim);
  cpu::linear_forward(L.k.data(), L.a.data(), param(P.k), (const T*)nullptr, N, D, kKvDim);
  cpu::linear_forward(L.v.data(), L.a.data(), param(P.v), (const T*)nullptr, N, D, kKvDim);
  const T* q = L.q.data();
  const T* k = L.k.data();
  if constexpr (kQkNorm) {
    cpu::rmsnorm_heads_forward(L.qn.data(), L.rstd_q.data(), q, param(P.q_norm), N, kHeads, kHeadDim, kNormEps);
    cpu::rmsnorm_heads_forward(L.kn.data(), L.rstd_k.data(), k, param(P.k_norm), N, kKvHeads, kHeadDim, kNormEps);
    q = L.qn.data();
    k = L.kn.data();
  }
  cpu::rope_forward(L.qr.data(), q, cos_.data(), sin_.data(), B_, T_, kHeads, kHeadDim);
  cpu::rope_forward(L.kr.data(), k, cos_.data(), sin_.data(), B_, T_, kKvHeads, kHeadDim);
  cpu::attention_forward(L.o.data(), L.lse.data(), L.qr.data(), L.kr.data(), L.v.data(), dims_, double(kAttnScale));
  const T* attn_out = L.o.data();
  if constexpr (detail::kGated) {
    cpu::linear_forward(L.z.data(), L.a.data(), param(P.gate), (const T*)nullptr, N, D, kGateDim);
    cpu::gate_forward<detail::kGateKernel>(L.og.data(), L.o.data(), L.z.data(), N, kHeads, kHeadDim);
    attn_out = L.og.data();
  }
  cpu::linear_forward(L.proj.data(), attn_out, param(P.o), (const T*)nullptr, N, kQDim, D);
  const T* branch = L.proj.data();
  if constexpr (detail::kSandwich) {
    cpu::rmsnorm_forward(L.pn.data(), L.rstd_p.data(), branch, param(P.attn_out_norm), N, D, kNormEps);
    branch = L.pn.data();
  }
  detail::add(L.h2.data(), h_in, branch, std::int64_t(N) * D);

  cpu::rmsnorm_forward(L.b.data(), L.rstd_b.data(), L.h2.data(), param(P.post_attn_norm), N, D, kNormEps);
  cpu::linear_forward(L.u.data(), L.b.data(), param(P.mlp_gate), (const T*)nullptr, N, D, kDff);
  cpu::linear_forward(L.w.data(), L.b.data(), param(P.mlp_up), (const T*)nullptr, N, D, kDff);
  cpu::swiglu_forward(L.s.data(), L.u.data(), L.w.data(), std::int64_t(N) * kDff);
  cpu::linear_forward(L.m.data(), L.s.data(), param(P.mlp_down), (const T*)nullptr, N, kDff, D);
  branch = L.m.data();
  if constexpr (detail::kSandwich) {
    cpu::rmsnorm_forward(L.mn.data(), L.rstd_m.data(), branch, param(P.mlp_out_norm), N, D, kNormEps);
    branch = L.mn.data();
  }
  detail::add(h_out, L.h2.data(), branch, std::int64_t(N) * D);
}

template <typename T>
double Model<T>::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  const int N = N_, D = kDModel;
  tokens_ = tokens;
  targets_ = targets;
  cpu::embedding_forward(e_.data(), tokens, param(kParamEmbed), N, D, T(kEmbeddingScale));
  const T* h = e_.data();
  if constexpr (kEmbeddingNorm) {
    cpu::rmsnorm_forward(e_norm_.data(), rstd_e_.data(), e_.data(), param(kParamEmbedNorm), N, D, kNormEps);
    h = e_norm_.data();
  } else {
    e_norm_ = e_;
  }
  std::copy(h, h + std::int64_t(N) * D, layers_[0].x.begin());
  for (int l = 0; l < kLayers; ++l) {
    T* out = l + 1 < kLayers ? layers_[l + 1].x.data() : h_final_.data();
    forward_layer(l, layers_[l].x.data(), out);
  }
  cpu::rmsnorm_forward(f_.data(), rstd_f_.data(), h_final_.data(), param(kParamFinalNorm), N, D, kNormEps);
  const T* head = nullptr;
  if constexpr (kTieEmbeddings) {
    head = param(kParamEmbed);
  } else {
    head = param(kParamLmHead);
  }
  cpu::linear_forward(logits_.data(), f_.data(), head, (const T*)nullptr, N, D, kVocab);
  return cpu::cross_entropy_forward(losses_.data(), p_target_.data(), logits_.data(), targets, N, kVocab,
                                    double(kLogitScale));
}

template <typename T>
void Model<T>::backward_layer(int l, T* dh) {
  Layer& L = layers_[l];
  const LayerParams& P = kLayerParams[l];
  const int N = N_, D = kDModel;
  // MLP branch: h_out = h2 + [norm](SwiGLU(b·Wgate, b·Wup)·Wdown).
  const T* dm = dh;
  if constexpr (detail::kSandwich) {
    cpu::rmsnorm_backward(dd_.data(), grad(P.mlp_out_norm), dh, L.m.data(), param(P.mlp_out_norm), L.rstd_m.data(),
                          N, D);
    dm = dd_.data();
  }
  cpu::linear_backward(dff_s_.data(), grad(P.mlp_down), (T*)nullptr, dm, L.s.data(), param(P.mlp_down), N, kDff, D);
  cpu::swiglu_backward(dff_a_.data(), dff_b_.data(), dff_s_.data(), L.u.data(), L.w.data(), std::int64_t(N) * kDff);
  cpu::linear_backward(dx_.data(), grad(P.mlp_gate), (T*)nullptr, dff_a_.data(), L.b.data(), param(P.mlp_gate), N, D,
                       kDff);
  cpu::linear_backward(dx_.data(), grad(P.mlp_up), (T*)nullptr, dff_b_.data(), L.b.data(), param(P.mlp_up), N, D, kDff,
                       true);
  cpu::rmsnorm_backward(dh, grad(P.post_attn_norm), dx_.data(), L.h2.data(), param(P.post_attn_norm),
                        L.rstd_b.data(), N, D, true);  // dh is now dL/dh2

  // Attention branch: h2 = x + [norm](gate ⊙ SDPA(RoPE(q), RoPE(k), v)·Wo).
  const T* dp = dh;
  if constexpr (detail::kSandwich) {
    cpu::rmsnorm_backward(dd_.data(), grad(P.attn_out_norm), dh, L.proj.data(), param(P.attn_out_norm),
                          L.rstd_p.data(), N, D);
    dp = dd_.data();
  }
  const T* attn_out = L.o.data();
  if constexpr (detail::kGated) {
    attn_out = L.og.data();
  }
  cpu::linear_backward(do_.data(), grad(P.o), (T*)nullptr, dp, attn_out, param(P.o), N, kQDim, D);
  if constexpr (detail::kGated) {
    cpu::gate_backward<detail::kGateKernel>(do_.data(), dz_.data(), do_.data(), L.o.data(), L.z.data(), N, kHeads,
                                            kHeadDim);
  }
  cpu::attention_backward(dqr_.data(), dkr_.data(), dv_.data(), do_.data(), L.o.data(), L.lse.data(), L.qr.data(),
                          L.kr.data(), L.v.data(), dims_, double(kAttnScale));
  cpu::rope_backward(dq_.data(), dqr_.data(), cos_.data(), sin_.data(), B_, T_, kHeads, kHeadDim);
  cpu::rope_backward(dk_.data(), dkr_.data(), cos_.data(), sin_.data(), B_, T_, kKvHeads, kHeadDim);
  const T* dq = dq_.data();
  const T* dk = dk_.data();
  if constexpr (kQkNorm) {
    cpu::rmsnorm_heads_backward(dqr_.data(), grad(P.q_norm), dq_.data(), L.q.data(), param(P.q_norm),
                                L.rstd_q.data(), N, kHeads, kHeadDim);
    cpu::rmsnorm_heads_backward(dkr_.data(), grad(P.k_norm), dk_.data(), L.k.data(), param(P.k_norm),
                                L.rstd_k.data(), N, kKvHeads, kHeadDim);
    dq = dqr_.data();
    dk = dkr_.data();
  }
  cpu::linear_backward(dx_.data(), grad(P.q), (T*)nullptr, dq, L.a.data(), param(P.q), N, D, kQDim);
  cpu::linear_backward(dx_.data(), grad(P.k), (T*)nullptr, dk, L.a.data(), param(P.k), N, D, kKvDim, true);
  cpu::linear_backward(dx_.data(), grad(P.v), (T*)nullptr, dv_.data(), L.a.data(), param(P.v), N, D, kKvDim, true);
  if constexpr (detail::kGated) {
    cpu::linear_backward(dx_.data(), grad(P.gate), (T*)nullptr, dz_.data(), L.a.data(), param(P.gate), N, D, kGateDim,
                         true);
  }
  cpu::rmsnorm_backward(dh, grad(P.input_norm), dx_.data(), L.x.data(), param(P.input_norm), L.rstd_a.data(), N, D,
                        true);  // dh is now dL/dx
}

template <typename T>
void Model<T>::backward(double loss_scale) {
  const int N = N_, D = kDModel;
  cpu::cross_entropy_backward(dlogits_.data(), logits_.data(), targets_, N, kVocab, double(kLogitScale), loss_scale);
  T* head = nullptr;
  T* dhead = nullptr;
  if constexpr (kTieEmbeddings) {
    head = param(kParamEmbed);
    dhead = grad(kParamEmbed);
  } else {
    head = param(kParamLmHead);
    dhead = grad(kParamLmHead);
  }
  cpu::linear_backward(dd_.data(), dhead, (T*)nullptr, dlogits_.data(), f_.data(), head, N, D, kVocab);
  cpu::rmsnorm_backward(dh_.data(), grad(kParamFinalNorm), dd_.data(), h_final_.data(), param(kParamFinalNorm),
                        rstd_f_.data(), N, D);
  for (int l = kLayers - 1; l >= 0; --l) backward_layer(l, dh_.data());
  const T* de = dh_.data();
  if constexpr (kEmbeddingNorm) {
    cpu::rmsnorm_backward(dd_.data(), grad(kParamEmbedNorm), dh_.data(), e_.data(), param(kParamEmbedNorm),
                          rstd_e_.data(), N, D);
    de = dd_.data();
  }
  cpu::embedding_backward(grad(kParamEmbed), tokens_, de, N, D, T(kEmbeddingScale));
}

}  // namespace gcm
