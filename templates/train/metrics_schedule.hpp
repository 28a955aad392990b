// When the trainer measures and records: the analyses of metrics/ (docs/metrics.md) after s
// completed steps, and the per-step records that train_step makes (gradient norms, update
// ratios, MoE routing). Every interval is a spec constant (config.hpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "config.hpp"
#include "metrics/collector.hpp"

namespace gc::tree {

// Which metrics are due after s completed steps: every metric at s = 0, then
// each at multiples of its interval; cosine matrices also at the image steps.
inline metrics::MetricsDue metrics_due_at(std::int64_t s) {
  metrics::MetricsDue d;
  if constexpr (kSinkScoreOn) {
    d.sink_score = s % kSinkScoreEvery == 0;
  }
  if constexpr (kAttentionEntropyOn) {
    d.attention_entropy = s % kAttentionEntropyEvery == 0;
  }
  if constexpr (kActivationRmsOn) {
    d.activation_rms = s % kActivationRmsEvery == 0;
  }
  if constexpr (kRmsnormFactorOn) {
    d.rmsnorm_factor = s % kRmsnormFactorEvery == 0;
  }
  if constexpr (kResidualFlowOn) {
    d.residual_flow = s % kResidualFlowEvery == 0;
  }
  if constexpr (kLogitStdOn) {
    d.logit_std = s % kLogitStdEvery == 0;
  }
  if constexpr (kStableRankOn) {
    d.stable_rank = s % kStableRankEvery == 0;
  }
  if constexpr (kCosineSimilarityOn) {
    d.cosine_images = std::find(kCosineImageSteps.begin(), kCosineImageSteps.end(), s) != kCosineImageSteps.end();
    d.cosine_similarity = s % kCosineSimilarityEvery == 0 || d.cosine_images;
  }
  if constexpr (kEmbeddingCosineOn) {
    d.embedding_cosine = s % kEmbeddingCosineEvery == 0;
  }
  if constexpr (kParamNormOn) {
    d.param_norm = s % kParamNormEvery == 0;
  }
  return d;
}

// The per-step records after s completed steps of a run of `steps` steps (none when the run's
// metrics are off: --no-metrics).
struct StepRecordSchedule {
  bool metrics = true;
  std::int64_t steps = 0;

  bool grad_norm_due(std::int64_t s) const { return kGradNormOn && metrics && (s % kGradNormEvery == 0 || s == 1); }
  bool update_ratio_due(std::int64_t s) const {
    return kUpdateRatioOn && metrics && (s % kUpdateRatioEvery == 0 || s == 1);
  }
  bool moe_routing_due(std::int64_t s) const {
    return kMoe && kMoeRoutingOn && metrics && (s % kMoeRoutingEvery == 0 || s == 1 || s == steps);
  }
  bool any_due(std::int64_t s) const { return grad_norm_due(s) || update_ratio_due(s) || moe_routing_due(s); }
};

}  // namespace gc::tree
