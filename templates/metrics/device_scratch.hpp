// What the metrics hold on a GPU, in elements and bytes: the scratch of cuda/metric_ops.cuh
// (activations), cuda/weight_stats.cuh (weights) and cuda/update_ratio.cuh (update ratios). The
// CUDA classes allocate exactly these sizes, once, before training (Engine::prepare_metrics); the
// memory plan counts the same (compiler/plan/metrics_scratch.cpp; kPlannedDeviceBytes and
// `gcompile explain`), and train/trainer_metrics.hpp re-counts the update-ratio partials for a
// ZeRO-1 shard. Plain C++: the trainer reads it without the CUDA headers.
#pragma once

#include <algorithm>
#include <cstdint>

#include "config.hpp"
#include "metrics/heatmap.hpp"
#include "metrics/weight_stats.hpp"
#include "model/model.hpp"
#include "plan.hpp"

namespace gc::tree::metrics {

inline constexpr int kLanczosSteps = 300;      // spectral_norm's max_steps, on both backends
inline constexpr int kCosineBlockRows = 512;   // rows of a cosine matrix per GEMM on the device
inline constexpr std::int64_t kNormChunk = 65536;  // cuda/adamw.cuh's chunk of a Σ x²
inline constexpr int kColumnChunkRows = 256;       // rows per partial of Wᵀx in the Lanczos steps

// Activation statistics: one double (or pair) per row of the largest per-row pass (a token's
// moments, a query's sink score or entropy per head), and the few totals.
struct ActivationScratch {
  std::int64_t rows = 0, totals = 0;  // doubles
  static ActivationScratch of(std::int64_t tokens, int heads) {
    return {std::max<std::int64_t>({2 * tokens, tokens * heads, 2}), std::max<std::int64_t>(heads, 3)};
  }
  std::int64_t bytes() const { return 8 * (rows + totals); }
};

// Weight metrics: sized for the largest tensor each enabled metric measures (the plan's masks).
struct WeightScratch {
  std::int64_t max_numel = 0;   // Σ x²'s chunk partials
  int max_gram = 0;             // the largest min(rows, cols) of a stable rank: Lanczos vectors
  int max_side = 0;             // the largest max(rows, cols) of a stable rank: the Gram product's middle
  int max_cosine_rows = 0;      // k of a cosine matrix
  int max_cosine_cols = 0;
  std::int64_t max_unit = 0;    // k × cols of the unit rows

  // top_tokens: the embedding cosine's rows (0 when it is off). every_metric: size for every
  // weight metric whatever the spec enables (./analyze and ./parity measure them all).
  static WeightScratch of_plan(int top_tokens, bool every_metric = false) {
    const bool stable_rank = every_metric || kStableRankOn, cosine = every_metric || kCosineSimilarityOn;
    WeightScratch s;
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      s.max_numel = std::max(s.max_numel, p.numel);
      if (p.rank < 2) continue;
      const int rows = slice_rows(p), cols = slice_cols(p);
      if (stable_rank && kStableRankTensors[i]) {
        s.max_gram = std::max(s.max_gram, std::min(rows, cols));
        s.max_side = std::max(s.max_side, std::max(rows, cols));
      }
      if (cosine && kCosineSimilarityTensors[i]) s.add_cosine(std::min(rows, kMaxCosineRows), cols);
    }
    if ((every_metric || kEmbeddingCosineOn) && top_tokens > 0) s.add_cosine(top_tokens, kDModel);
    return s;
  }
  void add_cosine(int k, int cols) {
    max_cosine_rows = std::max(max_cosine_rows, k);
    max_cosine_cols = std::max(max_cosine_cols, cols);
    max_unit = std::max(max_unit, std::int64_t(k) * cols);
  }
  // Element counts of each buffer (at least one element each).
  std::int64_t norm_doubles() const { return max_numel / kNormChunk + 2; }
  std::int64_t gram() const { return std::max(max_gram, 1); }
  std::int64_t middle() const { return std::max(max_side, 1); }
  std::int64_t k() const { return std::max(max_cosine_rows, 1); }
  std::int64_t side() const { return std::max(std::min(max_cosine_rows, kHeatmapPixels), 1); }
  // Wᵀx's partials: row chunks × columns, for either orientation of a stable-rank matrix.
  std::int64_t column_partials() const {
    const std::int64_t chunks_of_gram = (gram() + kColumnChunkRows - 1) / kColumnChunkRows;
    const std::int64_t chunks_of_middle = (middle() + kColumnChunkRows - 1) / kColumnChunkRows;
    return std::max(chunks_of_gram * middle(), chunks_of_middle * gram());
  }
  // C's rows per product: whole heatmap pixel rows, about kCosineBlockRows of them.
  int block_rows() const {
    const int pixel_side = std::min(max_cosine_rows, kHeatmapPixels);
    const int per_pixel = pixel_side > 0 ? (max_cosine_rows + pixel_side - 1) / pixel_side : 1;
    return std::max(per_pixel, kCosineBlockRows / per_pixel * per_pixel);
  }
  std::int64_t bytes() const {
    const std::int64_t doubles = norm_doubles() + kLanczosSteps * gram() + 2 * gram() + middle() + column_partials() +
                                 kLanczosSteps + 4 + 3 * k();
    const std::int64_t floats = std::max<std::int64_t>(max_unit, 1) + std::int64_t(block_rows()) * k();
    return 8 * doubles + 4 * floats + 4 * k() + side() * side();  // + row ids (int), heatmap levels (bytes)
  }
};

// Update ratios (cuda/update_ratio.cuh): a pass before AdamW over the flat array a rank updates
// (its ZeRO-1 shard, or everything) sums each tensor's Δθ² and θ² into chunk partials; no copy
// of the weights. Its table (one AdamWTensor row, 24 bytes, per tensor), partials and sums.
struct UpdateScratch {
  std::int64_t elements = 0;
  static UpdateScratch of_range(std::int64_t lo, std::int64_t hi) { return {hi - lo}; }
  std::int64_t partial_doubles() const { return 2 * (elements / kNormChunk + kNumParams + 1); }
  std::int64_t bytes() const { return 8 * partial_doubles() + 16 * std::int64_t(kNumParams) + 24 * kNumParams; }
};

// ZeRO-1 under bf16: a rank holds a shard of the fp32 masters, so the weight metrics assemble
// each tensor on the device (cuda_engine.cu gathered_master): the largest tensor, in fp32.
inline std::int64_t master_gather_bytes() {
  if (!(kStableRankOn || kCosineSimilarityOn || kEmbeddingCosineOn || kParamNormOn)) return 0;
  std::int64_t largest = 0;
  for (int i = 0; i < kNumParams; ++i) largest = std::max(largest, kParams[i].numel);
  return 4 * largest;
}

// The embedding cosine's rows as planned (a run may find fewer distinct tokens).
inline int planned_top_tokens() { return kEmbeddingCosineOn ? std::min(kEmbeddingTopTokens, kVocab) : 0; }

// Everything prepare_metrics allocates on one rank whose update ratios cover [lo, hi).
inline std::int64_t metrics_scratch_bytes(std::int64_t tokens, std::int64_t lo, std::int64_t hi) {
  return ActivationScratch::of(tokens, kHeads).bytes() + WeightScratch::of_plan(planned_top_tokens()).bytes() +
         UpdateScratch::of_range(lo, hi).bytes();
}

}  // namespace gc::tree::metrics
