// The plan: a spec resolved into everything later stages need, with no
// further decisions left. Pure functions of the Spec, unit-testable.
//
// Weight shapes follow PyTorch/HF: [out, in] for linear layers, [vocab, d]
// for the embedding and LM head, and [n_experts, out, in] for stacked expert
// weights (fan_in/fan_out are then those of one expert).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "plan/align_scratch.hpp"
#include "spec/spec.hpp"

namespace gc {

enum class LayerKind { dense, moe };

struct LayerPlan {
  int index = 0;
  LayerKind kind = LayerKind::dense;
  std::int64_t d_ff = 0;  // dense MLP width (0 for MoE layers)
};

struct ParamEntry {
  std::string name;  // HF Llama-style: "model.layers.3.self_attn.q_proj.weight"
  ParamClass cls = ParamClass::norm;
  int layer = -1;  // -1 for tensors outside the layer stack
  std::vector<std::int64_t> shape;
  std::int64_t fan_in = 0, fan_out = 0;
  // Initialization. Norm gains: constant 1 (init_value), std 0.
  Distribution distribution = Distribution::normal;
  double std = 0.0;            // σ of the rule (for trunc_normal: of the untruncated normal)
  double cutoff = 0.0;         // trunc_normal: ±cutoff·σ
  double effective_std = 0.0;  // the standard deviation the samples actually have
  double init_value = 0.0;     // for constant-initialized tensors (norm gains)
  std::string rule;            // how std was derived, e.g. "gamma=1 fan_in=768" or "std=0.02/sqrt(2*n_layers)"
  // Optimization.
  double lr_mult = 1.0;
  double weight_decay = 0.0;  // λ for this tensor (0 when exempt)

  std::int64_t numel() const;
};

struct OptimGroup {
  double lr_mult = 1.0;
  double weight_decay = 0.0;
  std::vector<ParamClass> classes;
  std::int64_t n_tensors = 0;
  std::int64_t n_params = 0;
};

// The generated program lays every tensor out in one flat array, each starting on a
// multiple of this many elements (templates/model/model.hpp kTensorAlign); parameters,
// gradients and AdamW moments all have that layout, gaps included.
inline constexpr std::int64_t kTensorAlignElements = 128;

struct ParamCounts {
  std::int64_t total = 0;
  std::int64_t stored = 0;         // elements of the flat array: Σ numel rounded up to kTensorAlignElements
  std::int64_t embedding = 0;      // token embedding + untied LM head
  std::int64_t non_embedding = 0;  // total − embedding (norm gains included)
  std::int64_t attn_gate = 0;      // gated-attention projections
  std::int64_t active = 0;         // used per token: total minus the unrouted experts
  std::int64_t active_non_embedding = 0;
};

struct FlopCounts {
  // Per token, training (forward + backward = 3 × forward), PaLM convention:
  // 6·N_matmul + 12·n_layers·n_heads·head_dim·seq_len, where N_matmul counts
  // active matmul weights including the LM head (also when tied) and excluding
  // the embedding lookup; attention is counted without the causal discount.
  double matmul_params = 0.0;
  double dense_per_token = 0.0;      // 6·N_matmul
  double attention_per_token = 0.0;  // 12·L·H·d_h·T
  double per_token = 0.0;
  double per_step = 0.0;  // per_token · tokens_per_step
};

struct MemoryEstimate {
  // Bytes for the whole model on one device (ZeRO sharding divides later), counted
  // over the flat array the program allocates (ParamCounts::stored, alignment gaps included).
  double weights = 0.0;         // working weights (bf16 or fp32)
  double master_weights = 0.0;  // fp32 masters (bf16 only)
  double gradients = 0.0;       // fp32
  double optimizer = 0.0;       // AdamW m and v, fp32
  double total = 0.0;           // model state: the four above
  // The CUDA backend's buffers for one micro-batch (activations kept for the
  // backward, backward scratch, logits, kernel scratch, cuBLASLt workspace);
  // the same list the model allocates (templates/model/model_impl.hpp).
  double activations = 0.0;
  double model_buffers = 0.0;  // the model's share of `activations`
  // The in-loop metrics' device scratch (templates/metrics/device_scratch.hpp): reductions,
  // Lanczos vectors, cosine blocks, the update-ratio pass's partials.
  double metrics_scratch = 0.0;
  double device_total() const { return total + activations + metrics_scratch; }
};

struct SchedulePlan {
  std::int64_t total_steps = 0;
  std::int64_t warmup_steps = 0;
  std::int64_t grad_accum = 1;  // global_batch / micro_batch
  std::int64_t tokens_per_step = 0;
  std::int64_t total_tokens = 0;
};

struct MetricPlan {
  std::string name;
  std::int64_t interval = 1;
  std::vector<ParamClass> classes;
  std::vector<std::int64_t> layers;  // resolved: never empty
};

struct Plan {
  Spec spec;
  std::vector<LayerPlan> layers;
  std::vector<ParamEntry> params;
  std::vector<OptimGroup> optim_groups;
  ParamCounts counts;
  FlopCounts flops;
  MemoryEstimate memory;
  SchedulePlan schedule;
  std::vector<MetricPlan> metrics;  // enabled metrics only
  double width_mult = 1.0;
  double embedding_scale = 1.0, attn_scale = 1.0, logit_scale = 1.0;
  std::int64_t head_chunk_rows = 0;  // rows of LM-head logits held at once (head_chunk_rows())
  AlignScratch align_scratch;        // the CUDA backend's padded projections (align_scratch.hpp)
};

// Rows of the LM head's logits (and their gradient) the model holds at once: the whole
// micro-batch when its N×V logits have at most kHeadChunkElements elements, else the largest
// multiple of 64 rows under that bound (at least 64, at most N). The head GEMM and the
// cross-entropy then run chunk by chunk (templates/model/model_impl.hpp). 2^27: about 2048 rows of
// a 64k vocabulary (256 MiB per bf16 buffer); on an H200 the head's three GEMMs took 24.8 ms a step
// at 1.5B in 512-row chunks (2^25) and 19.6 ms in 2048-row ones (the fp32 dW is re-read and
// re-written once per chunk; docs/performance.md, 2026-11-28).
inline constexpr std::int64_t kHeadChunkElements = std::int64_t(1) << 27;
std::int64_t head_chunk_rows(const Spec& spec);
// moe.capacity_factor as assignments per expert and sequence: ceil(factor · seq_len · top_k /
// n_experts); 0 for dropless routing (factor 0) or a dense model.
std::int64_t moe_capacity(const Spec& spec);

// Resolves a validated spec. Reports formula evaluation errors (for example a
// std expression that divides by zero for some layer) and hazard warnings.
std::optional<Plan> make_plan(const Spec& spec, Diagnostics& diags);

}  // namespace gc
