// Experiment constants. Every value here is a knob: the specializer replaces
// the gc::knob(...) call with the spec's value, so the generated config.hpp
// holds plain literals and the compiler folds them into every kernel. The
// defaults below make the templates compile (and be tested) as they are.
#pragma once

#include <cstdint>

#include "gc/knob.hpp"
#include "vocabulary.hpp"

namespace gc::tree {

// --- experiment identity, seed, data and provenance, and the run's schedule: defined
// in experiment.cpp, the one source file (with plan_init.cpp) that differs between trees
// of a sweep over init, seed, learning rate, step count or the cadence of logs,
// evaluations, checkpoints and metrics, so their builds share every other compiled
// object and their specialization (none of these values reaches a kernel).
extern const char* const kExperimentName;
extern const std::uint64_t kSeed;
extern const char* const kTrainData;
extern const char* const kValData;
extern const char* const kVocabFile;
extern const char* const kSpecHash;
extern const char* const kGcompileVersion;
extern const std::uint64_t kAnchorSeed;  // data.anchor.seed (data.format = "anchor")
// The learning-rate schedule (train/schedule.hpp): peak, decay shape, floor, warm-up and total steps.
extern const double kLr;
extern const Decay kDecay;
extern const double kMinLrRatio;
extern const std::int64_t kWarmupSteps;
extern const std::int64_t kTotalSteps;
// Cadences in steps (0: never): evaluations (on kEvalBatches validation batches), checkpoints, log lines.
extern const int kEvalEvery;
extern const int kEvalBatches;
extern const int kCheckpointEvery;
extern const int kLogEvery;
// Each metric's interval in steps (train/metrics_schedule.hpp; its on/off switch is below).
extern const std::int64_t kSinkScoreEvery;
extern const std::int64_t kResidualFlowEvery;
extern const std::int64_t kRmsnormFactorEvery;
extern const std::int64_t kCosineSimilarityEvery;
extern const std::int64_t kStableRankEvery;
extern const std::int64_t kEmbeddingCosineEvery;
extern const std::int64_t kParamNormEvery;
extern const std::int64_t kGradNormEvery;
extern const std::int64_t kUpdateRatioEvery;
extern const std::int64_t kActivationRmsEvery;
extern const std::int64_t kAttentionEntropyEvery;
extern const std::int64_t kLogitStdEvery;
extern const std::int64_t kMoeRoutingEvery;

// --- model (seed 000 Table 2 shapes: d_model, heads, head_dim, d_ff)
inline constexpr int kVocab = gc::knob<int>("model.vocab_size", 256);
inline constexpr int kDModel = gc::knob<int>("model.d_model", 64);
inline constexpr int kLayers = gc::knob<int>("model.n_layers", 2);
inline constexpr int kHeads = gc::knob<int>("model.n_heads", 4);
inline constexpr int kKvHeads = gc::knob<int>("model.n_kv_heads", 2);
inline constexpr int kHeadDim = gc::knob<int>("model.head_dim", 16);
inline constexpr int kDff = gc::knob<int>("plan.dense_d_ff", 128);  // dense MLP layers (moe.dense_d_ff in MoE models)
inline constexpr int kMaxSeqLen = gc::knob<int>("model.max_seq_len", 64);
// RMSNorm ε (seed 000 eq. 2); the norm accumulates in double, so 1e-12 matters.
inline constexpr float kNormEps = gc::knob<float>("model.norm_eps", 1e-5f);
inline constexpr NormPlacement kNormPlacement = gc::knob<NormPlacement>("model.norm_placement", NormPlacement::pre);
inline constexpr bool kEmbeddingNorm = gc::knob<bool>("model.embedding_norm", false);
inline constexpr bool kQkNorm = gc::knob<bool>("model.qk_norm", false);
inline constexpr bool kTieEmbeddings = gc::knob<bool>("model.tie_embeddings", false);
inline constexpr double kRopeTheta = gc::knob<double>("model.rope_theta", 10000.0);
// Gated attention (seed 000 eq. 3-4): sigmoid gate on each head's output.
inline constexpr GatedAttention kGatedAttention =
    gc::knob<GatedAttention>("model.gated_attention", GatedAttention::none);
// Forward multipliers, evaluated by the planner from the spec's formulas.
inline constexpr float kEmbeddingScale = gc::knob<float>("plan.embedding_scale", 1.0f);
inline constexpr float kAttnScale = gc::knob<float>("plan.attn_scale", 0.25f);
inline constexpr float kLogitScale = gc::knob<float>("plan.logit_scale", 1.0f);

// --- mixture of experts (seed 000 Table 3; model/moe_block.hpp). A dense model
// has kMoe = false and one expert of width 1: every MoE branch is pruned.
inline constexpr bool kMoe = gc::knob<bool>("plan.moe", false);
inline constexpr int kExperts = gc::knob<int>("plan.moe_experts", 1);
inline constexpr int kTopK = gc::knob<int>("plan.moe_top_k", 1);
inline constexpr int kExpertDff = gc::knob<int>("plan.moe_expert_d_ff", 1);
inline constexpr int kSharedDff = gc::knob<int>("plan.moe_shared_d_ff", 0);  // n_shared_experts · shared_d_ff
inline constexpr RouterScoring kRouterScoring =
    gc::knob<RouterScoring>("plan.moe_router_scoring", RouterScoring::softmax);
inline constexpr LoadBalance kLoadBalance = gc::knob<LoadBalance>("plan.moe_load_balance", LoadBalance::aux_loss);
inline constexpr double kLoadBalanceCoef = gc::knob<double>("plan.moe_load_balance_coef", 0.01);
inline constexpr bool kNormTopkProb = gc::knob<bool>("plan.moe_norm_topk_prob", false);
// Router z-loss and the sequence-wise balancing loss coefficients (0: off; cpu/moe.hpp has the math).
inline constexpr double kMoeZLoss = gc::knob<double>("plan.moe_z_loss", 0.0);
inline constexpr double kMoeSeqAuxLoss = gc::knob<double>("plan.moe_seq_aux_loss", 0.0);
// moe.capacity_factor as assignments per expert and sequence (0: dropless; compiler/plan's moe_capacity).
inline constexpr int kMoeCapacity = gc::knob<int>("plan.moe_capacity", 0);

// --- processes: distributed.backend = "none" refuses a launch as several ranks
// (a data-parallel job otherwise splits each step's micro-batches, runtime/comm.hpp);
// "nccl" trains on GPUs only (refuses a multi-rank job on the CPU backend).
inline constexpr bool kDistributedNone = gc::knob<bool>("plan.distributed_none", false);
inline constexpr bool kDistributedNccl = gc::knob<bool>("plan.distributed_nccl", false);
// distributed.zero_stage: 1 shards the optimizer state over the ranks (engine/zero.hpp).
inline constexpr int kZeroStage = gc::knob<int>("distributed.zero_stage", 0);
// distributed.bucket_mb: on GPUs, gradients are reduced in buckets of at least this many MiB of
// fp32 while the backward pass goes on (engine/cuda_engine.cu).
inline constexpr double kBucketMb = gc::knob<double>("distributed.bucket_mb", 25.0);
// distributed.expert_parallel: ranks per expert-parallel group (model/expert_parallel.hpp;
// train --expert-parallel overrides it).
inline constexpr int kExpertParallel = gc::knob<int>("distributed.expert_parallel", 1);
// The rows a rank's experts may receive per MoE layer, as a multiple of a rank's own assignments
// (0: the dropless worst case, expert_parallel times them); train --expert-exchange-factor.
inline constexpr double kExpertExchangeFactor = gc::knob<double>("distributed.expert_exchange_factor", 0.0);

// --- optimizer (AdamW with decoupled weight decay, seed 003 eq. 1; the peak lr is with the
// schedule above, per-tensor lr multipliers and decay come from the parameter table in plan.hpp)
inline constexpr double kBeta1 = gc::knob<double>("optim.beta1", 0.9);
inline constexpr double kBeta2 = gc::knob<double>("optim.beta2", 0.95);
inline constexpr double kAdamEps = gc::knob<double>("optim.eps", 1e-8);
inline constexpr double kGradClip = gc::knob<double>("optim.grad_clip", 1.0);

// --- the anchor-function task (data.format = "anchor"; runtime/anchor.hpp): one target per
// sequence, at the last position, and its accuracies at every evaluation.
inline constexpr bool kAnchorTask = gc::knob<bool>("plan.anchor_task", false);
inline constexpr int kAnchorHeldFirst = gc::knob<int>("plan.anchor_held_first", 4);
inline constexpr int kAnchorHeldSecond = gc::knob<int>("plan.anchor_held_second", 3);
inline constexpr int kAnchorEvalSequences = gc::knob<int>("plan.anchor_eval_sequences", 1);

// --- training
inline constexpr int kSeqLen = gc::knob<int>("train.seq_len", 32);
inline constexpr int kMicroBatch = gc::knob<int>("train.micro_batch", 4);
inline constexpr int kGradAccum = gc::knob<int>("plan.grad_accum", 1);
inline constexpr Precision kPrecision = gc::knob<Precision>("train.precision", Precision::fp32);

// --- metrics ([metrics.NAME]; docs/metrics.md): on or off (each interval is with the
// schedule above). A metric that is off is pruned from the generated code; its layers
// and classes are tables in plan.hpp.
inline constexpr bool kSinkScoreOn = gc::knob<bool>("metrics.sink_score.enabled", true);
inline constexpr bool kResidualFlowOn = gc::knob<bool>("metrics.residual_flow.enabled", true);
inline constexpr bool kRmsnormFactorOn = gc::knob<bool>("metrics.rmsnorm_factor.enabled", true);
inline constexpr bool kCosineSimilarityOn = gc::knob<bool>("metrics.cosine_similarity.enabled", true);
inline constexpr bool kStableRankOn = gc::knob<bool>("metrics.stable_rank.enabled", true);
inline constexpr bool kEmbeddingCosineOn = gc::knob<bool>("metrics.embedding_cosine.enabled", true);
inline constexpr bool kParamNormOn = gc::knob<bool>("metrics.param_norm.enabled", true);
inline constexpr bool kGradNormOn = gc::knob<bool>("metrics.grad_norm.enabled", true);
inline constexpr bool kUpdateRatioOn = gc::knob<bool>("metrics.update_ratio.enabled", true);
inline constexpr bool kActivationRmsOn = gc::knob<bool>("metrics.activation_rms.enabled", true);
inline constexpr bool kAttentionEntropyOn = gc::knob<bool>("metrics.attention_entropy.enabled", true);
inline constexpr bool kLogitStdOn = gc::knob<bool>("metrics.logit_std.enabled", true);
inline constexpr bool kInitialLossOn = gc::knob<bool>("metrics.initial_loss.enabled", true);
inline constexpr bool kMoeRoutingOn = gc::knob<bool>("metrics.moe_routing.enabled", true);
inline constexpr int kEmbeddingTopTokens = gc::knob<int>("metrics.embedding_cosine.top_tokens", 350);

// Derived shapes.
inline constexpr int kQDim = kHeads * kHeadDim;
inline constexpr int kKvDim = kKvHeads * kHeadDim;
inline constexpr int kGateDim = kGatedAttention == GatedAttention::elementwise ? kQDim
                                : kGatedAttention == GatedAttention::headwise  ? kHeads
                                                                               : 0;
static_assert(kHeads % kKvHeads == 0, "n_heads must be divisible by n_kv_heads");
static_assert(kTopK >= 1 && kTopK <= kExperts, "moe.top_k must be between 1 and moe.n_experts");
static_assert(kSeqLen <= kMaxSeqLen, "seq_len exceeds max_seq_len");

}  // namespace gc::tree
