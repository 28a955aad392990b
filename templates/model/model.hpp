// The dense Llama-style decoder on the CPU backend: forward and backward of
// the whole model, composed from the kernels in cpu/. Every shape, ε, scale
// and feature switch comes from config.hpp (knobs) and plan.hpp (the
// parameter table), so after specialization only the code this experiment
// runs remains. Templated on the scalar type: float for training, double for
// the finite-difference gradient check.
//
// Layer l (pre-norm; sandwich adds the bracketed norms):
//   a = RMSNorm(h)                          (seed 000 eq. 2, ε = kNormEps)
//   q, k, v = a·Wq, a·Wk, a·Wv; [QK-norm per head]; RoPE on q, k
//   o = causal SDPA(q, k, v)                (GQA: head h reads kv head h / (H/KV))
//   o = σ(a·Wg) ⊙ o                         (gated attention, seed 000 eq. 3-4)
//   h = h + [RMSNorm](o·Wo)
//   b = RMSNorm(h);  h = h + [RMSNorm](SwiGLU(b·Wgate, b·Wup)·Wdown)
// Embedding: e = kEmbeddingScale · E[token], then [RMSNorm] (embedding norm).
// Head: logits = kLogitScale · RMSNorm(h_L)·Wlm (Wlm = E when tied).
#pragma once

#include <cstdint>
#include <vector>

#include "config.hpp"
#include "cpu/attention.hpp"
#include "cpu/cross_entropy.hpp"
#include "cpu/embedding.hpp"
#include "cpu/gate.hpp"
#include "cpu/linear.hpp"
#include "cpu/philox.hpp"
#include "cpu/rmsnorm.hpp"
#include "cpu/rope.hpp"
#include "cpu/swiglu.hpp"
#include "plan.hpp"

namespace gcm {

static_assert(kNumLayers == kLayers, "plan.hpp and config.hpp disagree on n_layers");

// Offsets of each tensor in the flat parameter (and gradient) array.
struct ParamOffsets {
  std::int64_t at[kNumParams + 1] = {};
  constexpr ParamOffsets() {
    for (int i = 0; i < kNumParams; ++i) at[i + 1] = at[i] + kParams[i].numel;
  }
};
inline constexpr ParamOffsets kOffsets{};

// Fills the parameters from the table with the counter-based RNG: tensor i
// uses Philox stream i, so values are independent of thread count and match
// the CUDA backend's initialization.
template <typename T>
void init_parameters(T* params, std::uint64_t seed) {
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    T* out = params + kOffsets.at[i];
    switch (p.init) {
      case InitKind::normal: cpu::fill_normal(out, p.numel, p.std, seed, std::uint32_t(i)); break;
      case InitKind::trunc_normal:
        cpu::fill_truncated_normal(out, p.numel, p.std, p.cutoff, seed, std::uint32_t(i));
        break;
      case InitKind::uniform: cpu::fill_uniform(out, p.numel, p.std, seed, std::uint32_t(i)); break;
      case InitKind::ones:
        for (std::int64_t j = 0; j < p.numel; ++j) out[j] = T(1);
        break;
    }
  }
}

template <typename T>
class Model {
 public:
  Model(int batch, int seq_len);

  std::vector<T> params, grads;  // flat, in kParams order
  T* param(int i) { return params.data() + kOffsets.at[i]; }
  T* grad(int i) { return grads.data() + kOffsets.at[i]; }

  // Mean cross-entropy of next-token prediction; keeps the activations.
  double forward(const std::int32_t* tokens, const std::int32_t* targets);
  // Adds dL/dθ · loss_scale to grads (call after forward).
  void backward(double loss_scale = 1.0);
  void zero_grads() { std::fill(grads.begin(), grads.end(), T(0)); }

  const T* logits() const { return logits_.data(); }
  const T* token_losses() const { return losses_.data(); }
  const T* target_probs() const { return p_target_.data(); }
  int rows() const { return N_; }

  // Per-layer activations the metrics read (q·k after RoPE and the lse).
  struct Layer {
    std::vector<T> x, a, rstd_a, q, k, v, qn, kn, rstd_q, rstd_k, qr, kr, o, lse, z, og, proj, pn, rstd_p, h2, b,
        rstd_b, u, w, s, m, mn, rstd_m;
  };
  const Layer& layer(int l) const { return layers_[l]; }
  const std::vector<T>& embedding_input() const { return e_; }  // scaled embedding, before the embedding norm
  const std::vector<T>& embedding_output() const { return e_norm_; }
  const cpu::AttentionDims& attention_dims() const { return dims_; }
  const std::vector<T>& final_hidden() const { return h_final_; }

 private:
  void forward_layer(int l, const T* h_in, T* h_out);
  void backward_layer(int l, T* dh);  // dh: in = dL/dh_out, out = dL/dh_in

  int B_, T_, N_;
  cpu::AttentionDims dims_;
  std::vector<T> cos_, sin_;
  const std::int32_t* tokens_ = nullptr;
  const std::int32_t* targets_ = nullptr;
  std::vector<T> e_, e_norm_, rstd_e_;  // embedding (scaled), after the embedding norm
  std::vector<Layer> layers_;
  std::vector<T> h_final_, f_, rstd_f_, logits_, losses_, p_target_;
  // Backward scratch.
  std::vector<T> dh_, dx_, dd_, dq_, dk_, dv_, dqr_, dkr_, do_, dz_, dff_a_, dff_b_, dff_s_, dlogits_;
};

}  // namespace gcm

#include "model/model_impl.hpp"
