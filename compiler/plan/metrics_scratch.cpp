// Mirrors templates/metrics/device_scratch.hpp (see metrics_scratch.hpp).
#include "plan/metrics_scratch.hpp"

#include <algorithm>
#include <string>

namespace gc {

namespace {

constexpr std::int64_t kLanczosSteps = 300, kCosineBlockRows = 512, kHeatmapPixels = 512, kNormChunk = 65536,
                       kMaxCosineRows = 4096, kColumnChunkRows = 256;

const MetricSpec* enabled(const Spec& spec, const std::string& name) {
  const auto it = spec.metrics.metrics.find(name);
  return it != spec.metrics.metrics.end() && it->second.enabled ? &it->second : nullptr;
}

// The metric's [metrics.NAME] classes and layers select the tensor (emit's plan.hpp tables).
bool selects(const MetricSpec& m, const ParamEntry& p) {
  if (std::find(m.classes.begin(), m.classes.end(), p.cls) == m.classes.end()) return false;
  return p.layer < 0 || m.layers.empty() || std::find(m.layers.begin(), m.layers.end(), p.layer) != m.layers.end();
}

// A parameter as the weight metrics see it: a 2-D tensor is one matrix, [E, out, in] is E.
std::int64_t slice_rows(const ParamEntry& p) { return p.shape.size() == 3 ? p.shape[1] : p.shape[0]; }
std::int64_t slice_cols(const ParamEntry& p) { return p.shape.size() == 3 ? p.shape[2] : p.numel() / p.shape[0]; }

double activation_bytes(const Spec& spec) {
  const std::int64_t tokens = spec.train.micro_batch * spec.train.seq_len, heads = spec.model.n_heads;
  return 8.0 * double(std::max({2 * tokens, tokens * heads, std::int64_t(2)}) + std::max<std::int64_t>(heads, 3));
}

double weight_bytes(const Spec& spec, const std::vector<ParamEntry>& params) {
  std::int64_t max_numel = 0, gram = 0, middle = 0, k = 0, unit = 0;
  const auto add_cosine = [&](std::int64_t rows, std::int64_t cols) {
    k = std::max(k, rows);
    unit = std::max(unit, rows * cols);
  };
  const MetricSpec* stable = enabled(spec, "stable_rank");
  const MetricSpec* cosine = enabled(spec, "cosine_similarity");
  for (const auto& p : params) {
    max_numel = std::max(max_numel, p.numel());
    if (p.shape.size() < 2) continue;
    const std::int64_t rows = slice_rows(p), cols = slice_cols(p);
    if (stable && selects(*stable, p)) {
      gram = std::max(gram, std::min(rows, cols));
      middle = std::max(middle, std::max(rows, cols));
    }
    if (cosine && selects(*cosine, p)) add_cosine(std::min(rows, kMaxCosineRows), cols);
  }
  if (enabled(spec, "embedding_cosine")) {
    add_cosine(std::min(spec.metrics.embedding_top_tokens, spec.model.vocab_size), spec.model.d_model);
  }
  const std::int64_t pixel_side = std::min(k, kHeatmapPixels);
  const std::int64_t per_pixel = pixel_side > 0 ? (k + pixel_side - 1) / pixel_side : 1;
  const std::int64_t block_rows = std::max(per_pixel, kCosineBlockRows / per_pixel * per_pixel);
  gram = std::max<std::int64_t>(gram, 1);
  middle = std::max<std::int64_t>(middle, 1);
  const std::int64_t side = std::max<std::int64_t>(pixel_side, 1), kk = std::max<std::int64_t>(k, 1);
  const std::int64_t column_partials = std::max((gram + kColumnChunkRows - 1) / kColumnChunkRows * middle,
                                               (middle + kColumnChunkRows - 1) / kColumnChunkRows * gram);
  const std::int64_t doubles = max_numel / kNormChunk + 2 + kLanczosSteps * gram + 2 * gram + middle + column_partials +
                               kLanczosSteps + 4 + 3 * kk;
  const std::int64_t floats = std::max<std::int64_t>(unit, 1) + block_rows * kk;
  return double(8 * doubles + 4 * floats + 4 * kk + side * side);  // + row ids (int), heatmap levels (bytes)
}

// Update ratios: chunk partials over the rank's part of the flat array, per-tensor sums and a
// table of 24-byte rows (templates/cuda/update_ratio.cuh reads the weights in place).
double update_bytes(const std::vector<ParamEntry>& params, std::int64_t lo, std::int64_t hi) {
  const std::int64_t tensors = std::int64_t(params.size());
  return double(8 * 2 * ((hi - lo) / kNormChunk + tensors + 1) + 16 * tensors + 24 * tensors);
}

}  // namespace

double estimate_master_gather_bytes(const Spec& spec, const std::vector<ParamEntry>& params) {
  if (!enabled(spec, "stable_rank") && !enabled(spec, "cosine_similarity") && !enabled(spec, "embedding_cosine") &&
      !enabled(spec, "param_norm")) {
    return 0.0;
  }
  std::int64_t largest = 0;
  for (const auto& p : params) largest = std::max(largest, p.numel());
  return 4.0 * double(largest);
}

double estimate_metrics_scratch_bytes(const Spec& spec, const std::vector<ParamEntry>& params, std::int64_t lo,
                                      std::int64_t hi) {
  return activation_bytes(spec) + weight_bytes(spec, params) + update_bytes(params, lo, hi);
}

}  // namespace gc
