// The dense Llama-style decoder: forward and backward of the whole model,
// composed once from a backend's kernels (cpu/backend.hpp, cuda/backend.cuh),
// so both backends run the same sequence of operations. Every shape, ε, scale
// and feature switch comes from config.hpp (knobs) and plan.hpp (the
// parameter table), so after specialization only the code this experiment
// runs remains. Model<T>, the CPU model, is engine/cpu_model.hpp.
//
// Layer l (pre-norm; sandwich adds the bracketed norms):
//   a = RMSNorm(h)                          (seed 000 eq. 2, ε = kNormEps)
//   q, k, v = a·Wq, a·Wk, a·Wv; [QK-norm per head]; RoPE on q, k
//   o = causal SDPA(q, k, v)                (GQA: head h reads kv head h / (H/KV))
//   o = σ(a·Wg) ⊙ o                         (gated attention, seed 000 eq. 3-4)
//   h = h + [RMSNorm](o·Wo)
//   b = RMSNorm(h);  h = h + [RMSNorm](SwiGLU(b·Wgate, b·Wup)·Wdown)
//     (an MoE layer: h = h + [RMSNorm](MoE(b)), model/moe_block.hpp)
// Embedding: e = kEmbeddingScale · E[token], then [RMSNorm] (embedding norm).
// Head: logits = kLogitScale · RMSNorm(h_L)·Wlm (Wlm = E when tied), computed kHeadChunkRows
// rows at a time (plan.hpp): the N×V logits and their gradient are never held whole unless
// they fit (model_impl.hpp, head_forward).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "core/philox.hpp"
#include "model/moe_block.hpp"
#include "model/moe_steps.hpp"
#include "model/param_offsets.hpp"
#include "model/state_layout.hpp"
#include "profile/step_profile.hpp"
#include "plan.hpp"

namespace gc::tree {

static_assert(kNumLayers == kLayers, "plan.hpp and config.hpp disagree on n_layers");

// Fills the parameters from the table with the counter-based RNG: tensor i
// uses Philox stream i, so values are independent of thread count and match
// the CUDA backend's initialization. `layout` says which elements the array holds
// (model/state_layout.hpp: every tensor whole, or of an expert tensor a rank's own block under
// expert parallelism); each gets the value it has in the whole tensor.
template <typename T>
void init_parameters(T* params, std::uint64_t seed, const StateLayout& layout = StateLayout::whole()) {
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    T* out = params + layout.at(i);
    const std::int64_t n = layout.held(i), first = layout.first(i);
    switch (p.init) {
      case InitKind::normal: core::fill_normal(out, n, kInitStd[i], seed, std::uint32_t(i), first); break;
      case InitKind::trunc_normal:
        core::fill_truncated_normal(out, n, kInitStd[i], p.cutoff, seed, std::uint32_t(i), first);
        break;
      case InitKind::uniform: core::fill_uniform(out, n, kInitStd[i], seed, std::uint32_t(i), first); break;
      case InitKind::ones:
        for (std::int64_t j = 0; j < n; ++j) out[j] = T(1);
        break;
    }
  }
}

// head_rows for a model that keeps every row's logits (the greedy sample, probes, analyze, parity).
inline constexpr int kKeepLogits = std::numeric_limits<int>::max();

template <typename Backend>
class BasicModel {
 public:
  using Ops = Backend;
  using Act = typename Backend::Act;    // activations, working weights
  using Grad = typename Backend::Grad;  // parameter gradients
  using Stat = typename Backend::Stat;  // rstd, lse
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;

  // Whether the constructor allocates the weight and gradient arrays: an engine that may still
  // change where a rank keeps them (ZeRO-1's padding, an expert block) defers them to its first
  // initialize or upload (allocate_gradients; the weights the engine itself or use_weight_layout),
  // so the whole arrays never exist beside the final ones.
  enum class State { allocate, defer };
  // head_rows: rows of LM-head logits held at once (the plan's kHeadChunkRows; clamped to
  // [1, N]; kKeepLogits keeps them all).
  BasicModel(int batch, int seq_len, int head_rows = kHeadChunkRows, State state = State::allocate);

  Buffer<Act> params;  // flat, in weight_layout() (kOffsets' unless an engine splits the experts)
  Buffer<Grad> grads;  // flat, in state_layout()
  // Tensor i from the first element this rank holds: all of a tensor, except an expert tensor's
  // own block under an expert-block weight layout (weight_layout()).
  Act* param(int i) { return params.data() + weights_.at(i); }
  const Act* param(int i) const { return params.data() + weights_.at(i); }
  // Tensor i from its element `from` on, which this rank must hold.
  Act* param_from(int i, std::int64_t from) { return params.data() + weights_.slot_of(i, from, "weights"); }
  // Where this rank keeps the weights (model/state_layout.hpp). Expert parallelism sets its
  // expert block (both engines, before their initialize or upload fill it): the old array is
  // released, then the new one allocated, zero, so that the two never exist together; from then
  // on every forward runs the experts on their owners (attach_expert_exchange first).
  const StateLayout& weight_layout() const { return weights_; }
  void use_weight_layout(const StateLayout& layout);
  // The MoE block's view of the weights (model/moe_block.hpp): W(i) is param(i), W(i, from)
  // param_from(i, from) (an owner's block of an expert tensor, from its first expert's element).
  struct ModelWeights {
    BasicModel* model;
    Act* operator()(int i) const { return model->param(i); }
    Act* operator()(int i, std::int64_t from) const { return model->param_from(i, from); }
  };
  // Tensor i's gradients from the first element this rank holds (all of a tensor, except an
  // expert tensor's own block under an expert-block layout).
  Grad* grad(int i) { return grads.data() + state_.at(i); }
  // Tensor i's gradients from its element `from` on, which this rank must hold.
  Grad* grad_from(int i, std::int64_t from) { return grads.data() + state_.slot_of(i, from, "gradients"); }
  // Where this rank keeps the gradients (model/state_layout.hpp; whole unless an engine under
  // expert parallelism sets its expert block): the buffer is reallocated, zero.
  const StateLayout& state_layout() const { return state_; }
  void use_state_layout(const StateLayout& layout) {
    state_ = layout;
    grads = Buffer<Grad>();  // release the old array before allocating the new one
    allocate_gradients();
  }
  // The gradient array in state_layout(), zero, unless it exists (a model built with
  // State::defer has none until this or use_state_layout).
  void allocate_gradients() {
    if (grads.size() == 0) Backend::allocate(grads, state_.total());
  }

  // Mean cross-entropy of next-token prediction plus the MoE balancing loss
  // (aux_loss(); 0 for a dense model): the objective backward() differentiates.
  // Keeps the activations. tokens and targets are host arrays of rows() entries.
  double forward(const std::int32_t* tokens, const std::int32_t* targets);
  // forward, then backward(loss_scale); returns forward's objective. The head's backward runs
  // inside the forward, chunk by chunk, so a chunk's logits are computed once.
  double forward_backward(const std::int32_t* tokens, const std::int32_t* targets, double loss_scale);
  // Σ over MoE layers of L_aux from the last forward, read on the host (on a GPU a wait: the
  // training step reads it on the device instead, through the backend's mean_loss).
  double aux_loss() const {
    if constexpr (kMoe) {
      Backend::to_host(aux_host_.data(), aux_.data(), kLayers);
      double total = 0.0;
      for (double a : aux_host_) total += a;
      return total;
    } else {
      return 0.0;
    }
  }
  // An MoE layer's routing state (load, selection bias); only for is_moe_layer(l).
  MoeLayer<Backend>& moe_layer(int l) { return moe_[std::size_t(l)]; }
  const MoeLayer<Backend>& moe_layer(int l) const { return moe_[std::size_t(l)]; }
  // Adds dL/dθ · loss_scale to grads (call after forward; when the head is chunked, its logits
  // are recomputed chunk by chunk).
  void backward(double loss_scale = 1.0);
  // Called by backward() once layer l's parameter gradients are final (l = kLayers − 1 … 0, in
  // that order, as the work is queued; first l = kLayers: the final norm and an untied LM head),
  // so that a data-parallel engine can start reducing them while the rest of the backward pass
  // runs. Unset: nothing is called.
  std::function<void(int)> on_layer_grads_done;
  // Expert parallelism (model/expert_parallel.hpp): from now on the training forward and
  // backward run each MoE layer's experts on their owners in x's group, and the buffers for the
  // rows this rank's experts compute grow to the bound of exchange_capacity_rows (counted in
  // buffer_bytes()). Evaluation forwards keep every expert local while the weights are whole
  // (use_weight_layout splits them: then every forward exchanges).
  void attach_expert_exchange(ExpertExchange<Act>* x) {
    if constexpr (kMoe) {
      // The exchange's bounds (exchange_capacity_rows, a slotted route's slot) count kSeqLen-row
      // sequences, which a capacity bounds per sequence: a model of other sequences would overrun them.
      if (T_ != kSeqLen) {
        throw std::logic_error("expert parallelism needs the training model's sequences of " + std::to_string(kSeqLen) +
                               " rows, not " + std::to_string(T_));
      }
      expert_exchange_ = x;
      const std::int64_t slot =
          chosen_slot_rows(x->route, x->rows_on_device(), std::int64_t(N_) * kTopK, x->ranks(), x->receive_factor);
      allocate_expert_parallel(moe_, moe_scratch_, N_, x->ranks(), x->receive_factor, slot, [this](auto& buf, std::int64_t n) {
        using U = std::remove_const_t<std::remove_pointer_t<decltype(buf.data())>>;
        buffer_bytes_ += (n - std::int64_t(buf.size())) * std::int64_t(sizeof(U));
        Backend::allocate(buf, n);
      });
    } else {
      (void)x;
    }
  }
  // The backend instance (its device state: the CUDA engine defers the loss through it).
  Backend& backend() { return ops_; }
  const Backend& backend() const { return ops_; }
  void zero_grads() { Backend::zero(grads); }

  // Backend memory: host pointers on the CPU, device pointers on CUDA. logits(): every row's
  // when keeps_logits(), else the last chunk's rows only (see head_rows).
  const Act* logits() const { return logits_.data(); }
  bool keeps_logits() const { return head_rows_ == N_; }
  int head_rows() const { return head_rows_; }
  // While on, forward() sums α·logit and (α·logit)² over all N×V logits into logit_moments
  // (the logit_std metric of a model that does not keep its logits).
  void track_logit_moments(bool on) { track_logit_moments_ = on; }
  Buffer<double> logit_moments;  // [Σ α·z, Σ (α·z)²] of the last tracked forward
  const Stat* token_losses() const { return losses_.data(); }
  const Stat* target_probs() const { return p_target_.data(); }
  int rows() const { return N_; }
  // Bytes of every buffer besides params and grads (planned as kPlannedModelBufferBytes).
  std::int64_t buffer_bytes() const { return buffer_bytes_; }

  // Per-layer activations the backward pass and the metrics read, in forward order
  // (the names of the layer formula at the top of this file; N rows each):
  //   x     the residual stream entering the layer (h)           [N, d]
  //   a     RMSNorm(x), the attention's input                     [N, d]
  //   qkv   the stacked [q | k | v] projection (under QK-norm)     [N, (H + 2·KV)·hd]
  //   q k v the separate projections (empty when stacked)         [N, H·hd] / [N, KV·hd]
  //   qn kn q and k after QK-norm                                   as q, k
  //   qr kr q and k after RoPE (what attention reads)               as q, k
  //   o     the attention output (before the gate)                 [N, H·hd]
  //   z og  the gate's pre-activation a·Wg, and σ(z) ⊙ o             [N, gate dim] / [N, H·hd]
  //   proj  the output projection (o or og)·Wo                     [N, d]
  //   pn    RMSNorm(proj) (sandwich norm)                           [N, d]
  //   h2    the residual stream after attention, x + (proj or pn)  [N, d]
  //   b     RMSNorm(h2), the MLP's input                           [N, d]
  //   uw    the stacked [b·Wgate | b·Wup]                           [N, 2·d_ff]
  //   s     SwiGLU(b·Wgate, b·Wup)                                  [N, d_ff]
  //   m     the MLP (or MoE block) output s·Wdown                   [N, d]
  //   mn    RMSNorm(m) (sandwich norm)                              [N, d]
  // Statistics: rstd_a, rstd_q, rstd_k, rstd_p, rstd_b, rstd_m are the 1/RMS of the norms that
  // produce a, qn, kn, pn, b and mn; lse is the attention's log-sum-exp [B, H, T].
  // Stacked projections (detail::kQkvStacked): q and k are empty, and qkv holds the layer's
  // stacked output under QK-norm (without it, the shared qkv_ passes it on).
  struct Layer {
    Buffer<Act> x, a, qkv, q, k, v, qn, kn, qr, kr, o, z, og, proj, pn, h2, b, uw, s, m, mn;
    Buffer<Stat> rstd_a, rstd_q, rstd_k, lse, rstd_p, rstd_b, rstd_m;
  };
  const Layer& layer(int l) const { return layers_[l]; }
  const Buffer<Act>& embedding_input() const { return e_; }  // scaled embedding, before the embedding norm
  const Buffer<Act>& embedding_output() const { return e_norm_; }
  const AttentionDims& attention_dims() const { return dims_; }
  const Buffer<Act>& final_hidden() const { return h_final_; }

 private:
  void forward_layer(int l, const Act* h_in, Act* h_out);
  void backward_layer(int l, Act* dh, double loss_scale);  // dh: in = dL/dh_out, out = dL/dh_in
  void dense_mlp_forward(Layer& L, const LayerParams& P);
  void dense_mlp_backward(Layer& L, const LayerParams& P, const Act* dm);
  double forward_impl(const std::int32_t* tokens, const std::int32_t* targets, const double* fused_loss_scale);
  void head_forward(const double* fused_loss_scale);
  void head_chunk_logits(int r0, int rows);
  void head_chunk_backward(int r0, int rows, double loss_scale);
  const Act* head_weight() {
    if constexpr (kTieEmbeddings) {
      return param(kParamEmbed);
    } else {
      return param(kParamLmHead);
    }
  }
  Grad* head_grad() {
    if constexpr (kTieEmbeddings) {
      return grad(kParamEmbed);
    } else {
      return grad(kParamLmHead);
    }
  }
  template <typename U>
  void allocate(Buffer<U>& buf, std::int64_t n) {
    Backend::allocate(buf, n);
    buffer_bytes_ += n * std::int64_t(sizeof(U));
  }
  // Runs call() as one timed op of the step profile (train --profile; profile/step_profile.hpp):
  // a GEMM y[rows, out] = x[rows, in]·Wᵀ (its FLOPs), or a memory-bound op that moves `elements`
  // activations (its bytes). Without a profiler: just call().
  template <typename F>
  void timed_gemm(profile::Category c, profile::Pass p, std::int64_t rows, std::int64_t in, std::int64_t out, F&& call) {
    profile::timed(ops_.profiler, profile::gemm(c, p, rows, in, out), call);
  }
  template <typename F>
  void timed_op(profile::Category c, const char* op, profile::Pass p, double elements, F&& call) {
    profile::timed(ops_.profiler, profile::memory(c, op, p, elements * double(sizeof(Act))), call);
  }
  // Causal attention's FLOPs: QKᵀ and PV, 2·T²·hd each per head, half of them under the mask;
  // the backward does 2.5 times that (five products to two: the FlashAttention convention).
  double attention_flops(profile::Pass p) const {
    const double forward = 2.0 * double(B_) * kHeads * double(T_) * double(T_) * kHeadDim;
    return p == profile::Pass::backward ? 2.5 * forward : forward;
  }

  Backend ops_;
  StateLayout state_ = StateLayout::whole();
  StateLayout weights_ = StateLayout::whole();
  std::int64_t buffer_bytes_ = 0;
  int B_, T_, N_;
  int head_rows_;                    // rows of logits_ and dlogits_
  bool head_backward_done_ = false;  // the last forward ran the head's backward (forward_backward)
  bool track_logit_moments_ = false;
  AttentionDims dims_;
  const std::int32_t* tokens_ = nullptr;   // backend memory
  const std::int32_t* targets_ = nullptr;
  Buffer<Act> e_, e_norm_;  // embedding (scaled), after the embedding norm
  Buffer<Stat> rstd_e_;
  std::vector<Layer> layers_;
  std::vector<MoeLayer<Backend>> moe_;  // per layer; allocated for MoE layers only
  Buffer<double> aux_;                  // each layer's balancing losses of the last forward (0: dense)
  mutable std::vector<double> aux_host_;  // aux_loss()'s copy (sized once: no allocation per call)
  MoeScratch<Backend> moe_scratch_;
  ExpertExchange<Act>* expert_exchange_ = nullptr;  // expert parallelism (attach_expert_exchange)
  bool exchange_experts_ = false;  // the current forward runs the experts on their owners
  Buffer<Act> h_final_, f_, logits_;
  // The stacked Q/K/V projection of the layer being run forward (detail::kQkvStacked): split into
  // each layer's RoPE(q), RoPE(k) and v at once, so one buffer serves every layer.
  Buffer<Act> qkv_;
  Buffer<Stat> rstd_f_, losses_, p_target_;
  // Backward scratch.
  Buffer<Act> dh_, dx_, dd_, dqkv_, dq_, dk_, dv_, dqr_, dkr_, do_, dz_, dff_ab_, dff_s_, dlogits_;
};

}  // namespace gc::tree

#include "model/model_impl.hpp"
