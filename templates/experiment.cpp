// What names this experiment, where its data is and the run's schedule, as knobs:
// the values a sweep over init, seed, learning rate, steps or cadences changes
// (with plan_init.cpp), kept out of the headers so every other object file of
// the tree is the same across the sweep's points and is compiled once (ccache),
// and the other templates' specialization is reused (docs/architecture.md).
#include "config.hpp"
#include "gc/knob.hpp"

namespace gc::tree {

// --- experiment
constexpr const char* kExperimentName = gc::knob<const char*>("experiment.name", "template");
constexpr std::uint64_t kSeed = gc::knob<std::uint64_t>("experiment.seed", 1234);

// --- data and provenance (resolved by gcompile when it generates the tree)
constexpr const char* kTrainData = gc::knob<const char*>("plan.train_data", "");
constexpr const char* kValData = gc::knob<const char*>("plan.val_data", "");
constexpr const char* kVocabFile = gc::knob<const char*>("plan.vocab_file", "");
constexpr const char* kSpecHash = gc::knob<const char*>("plan.spec_hash", "");
constexpr const char* kGcompileVersion = gc::knob<const char*>("plan.gcompile_version", "");
constexpr std::uint64_t kAnchorSeed = gc::knob<std::uint64_t>("plan.anchor_seed", 0);

// --- the learning-rate schedule (train/schedule.hpp)
constexpr double kLr = gc::knob<double>("optim.lr", 1e-3);
constexpr Decay kDecay = gc::knob<Decay>("schedule.decay", Decay::cosine);
constexpr double kMinLrRatio = gc::knob<double>("schedule.min_lr_ratio", 0.1);
constexpr std::int64_t kWarmupSteps = gc::knob<std::int64_t>("plan.warmup_steps", 2);
constexpr std::int64_t kTotalSteps = gc::knob<std::int64_t>("plan.total_steps", 20);

// --- cadences in steps: evaluations, checkpoints, log lines, and each metric
constexpr int kEvalEvery = gc::knob<int>("train.eval_every", 10);
constexpr int kEvalBatches = gc::knob<int>("train.eval_batches", 2);
constexpr int kCheckpointEvery = gc::knob<int>("train.checkpoint_every", 10);
constexpr int kLogEvery = gc::knob<int>("train.log_every", 1);
constexpr std::int64_t kSinkScoreEvery = gc::knob<std::int64_t>("metrics.sink_score.interval", 100);
constexpr std::int64_t kResidualFlowEvery = gc::knob<std::int64_t>("metrics.residual_flow.interval", 100);
constexpr std::int64_t kRmsnormFactorEvery = gc::knob<std::int64_t>("metrics.rmsnorm_factor.interval", 100);
constexpr std::int64_t kCosineSimilarityEvery = gc::knob<std::int64_t>("metrics.cosine_similarity.interval", 500);
constexpr std::int64_t kStableRankEvery = gc::knob<std::int64_t>("metrics.stable_rank.interval", 500);
constexpr std::int64_t kEmbeddingCosineEvery = gc::knob<std::int64_t>("metrics.embedding_cosine.interval", 500);
constexpr std::int64_t kParamNormEvery = gc::knob<std::int64_t>("metrics.param_norm.interval", 10);
constexpr std::int64_t kGradNormEvery = gc::knob<std::int64_t>("metrics.grad_norm.interval", 10);
constexpr std::int64_t kUpdateRatioEvery = gc::knob<std::int64_t>("metrics.update_ratio.interval", 10);
constexpr std::int64_t kActivationRmsEvery = gc::knob<std::int64_t>("metrics.activation_rms.interval", 100);
constexpr std::int64_t kAttentionEntropyEvery = gc::knob<std::int64_t>("metrics.attention_entropy.interval", 100);
constexpr std::int64_t kLogitStdEvery = gc::knob<std::int64_t>("metrics.logit_std.interval", 100);
constexpr std::int64_t kMoeRoutingEvery = gc::knob<std::int64_t>("metrics.moe_routing.interval", 10);

}  // namespace gc::tree
