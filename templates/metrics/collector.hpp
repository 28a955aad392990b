// The papers' analyses as metrics.jsonl records (docs/metrics.md). Shared by
// ./train (scheduled by the spec's [metrics] section) and ./analyze (every
// metric, from a checkpoint). Each record is
//
//   {"step": S, "metric": NAME, "value": x}                 scalar metrics
//   {"step": S, "metric": NAME, "values": {KEY: x, ...}}    per layer ("0", "1", ...),
//                                                            per norm, per tensor or per class
//
// plus metric-specific extra fields. Which layers and tensors are measured
// comes from plan.hpp (the spec's layers and classes).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config.hpp"
#include "metrics/activation_metrics.hpp"
#include "metrics/heatmap.hpp"
#include "metrics/matrix_stats.hpp"
#include "metrics/weight_stats.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/token_shard.hpp"

namespace gc::tree::metrics {

// Experts whose matrices are also recorded one by one, beside the mean over all.
inline constexpr int kNamedExperts = 2;
// "model.layers.1.mlp.experts.up_proj.weight", expert 3 -> "model.layers.1.mlp.experts.3.up_proj.weight"
// (Hugging Face's per-expert naming).
inline std::string expert_name(const char* stacked, int expert) {
  std::string name = stacked;
  const std::size_t at = name.find("experts.");
  if (at != std::string::npos) name.insert(at + 8, std::to_string(expert) + ".");
  return name;
}

// Per-class ‖·‖₂ of the tensors selected by mask; `squares(i)` is Σx² of tensor i.
template <typename F>
Json per_class_norm(const bool* mask, F squares) {
  std::map<std::string, double> sums;
  for (int i = 0; i < kNumParams; ++i) {
    if (mask[i]) sums[kParams[i].cls] += squares(i);
  }
  Json values = Json::object();
  for (const auto& [cls, s] : sums) values[cls] = std::sqrt(s);
  return values;
}

// Weight metrics of the current parameters, measured where they lie (metrics/weight_stats.hpp).
// image_dir (relative to run_dir) receives the heatmaps when due.cosine_images.
inline std::vector<Json> weight_records(std::int64_t step, WeightStats& weights, const MetricsDue& due,
                                        const std::vector<int>& top_tokens, const std::string& run_dir) {
  std::vector<Json> out;
  std::string image_dir;
  if (due.cosine_images) {
    char name[32];
    std::snprintf(name, sizeof name, "images/step_%06lld", (long long)step);
    image_dir = name;
    std::filesystem::create_directories(std::filesystem::path(run_dir) / image_dir);
  }
  std::vector<std::uint8_t> levels;
  auto save_image = [&](const std::string& tensor, int k) {
    const std::string rel = image_dir + "/" + tensor + ".png";
    const int side = std::min(k, kHeatmapPixels);
    metrics::write_heatmap_png((std::filesystem::path(run_dir) / rel).string(), levels, side);
    out.push_back({{"step", step}, {"metric", "cosine_image"}, {"tensor", tensor}, {"path", rel}, {"rows", k}});
  };
  if (due.stable_rank) {
    Json values = Json::object(), sigma = Json::object(), unconverged = Json::array();
    for (int i = 0; i < kNumParams; ++i) {
      if (!kStableRankTensors[i] || kParams[i].rank < 2) continue;
      // Expert tensors: the mean over experts under the stacked name, and the first experts by name.
      const ParamInfo& p = kParams[i];
      const int count = matrix_count(p);
      double sum_value = 0.0, sum_sigma = 0.0;
      for (int e = 0; e < count; ++e) {
        const StableRank sr = weights.stable_rank(i, e);
        sum_value += sr.value;
        sum_sigma += sr.sigma_max;
        const std::string name = p.rank == 3 ? expert_name(p.name, e) : std::string(p.name);
        if (!sr.converged) unconverged.push_back(name);
        if (p.rank == 3 && e < kNamedExperts) {
          values[name] = sr.value;
          sigma[name] = sr.sigma_max;
        }
      }
      values[p.name] = sum_value / count;
      sigma[p.name] = sum_sigma / count;
    }
    Json r = {{"step", step}, {"metric", "stable_rank"}, {"values", values}, {"sigma_max", sigma}};
    if (!unconverged.empty()) r["unconverged"] = unconverged;
    out.push_back(r);
  }
  if (due.cosine_similarity) {
    Json values = Json::object(), mean = Json::object();
    for (int i = 0; i < kNumParams; ++i) {
      if (!kCosineSimilarityTensors[i] || kParams[i].rank < 2) continue;
      const ParamInfo& p = kParams[i];
      if (p.rank == 2) {
        const auto rows = metrics::cosine_rows(matrix_rows(p), kMaxCosineRows);
        const CosineStats c = weights.row_cosine(i, 0, rows, due.cosine_images ? &levels : nullptr);
        values[p.name] = c.mean_abs;
        mean[p.name] = c.mean;
        if (due.cosine_images && c.rows_used >= 2) save_image(p.name, c.rows_used);
        continue;
      }
      // Experts: the mean over experts, and the first experts by name (no images).
      const int count = matrix_count(p);
      const auto row_ids = metrics::cosine_rows(slice_rows(p), kMaxCosineRows);
      double sum_abs = 0.0, sum_mean = 0.0;
      for (int e = 0; e < count; ++e) {
        const CosineStats c = weights.row_cosine(i, e, row_ids, nullptr);
        sum_abs += c.mean_abs;
        sum_mean += c.mean;
        if (e < kNamedExperts) {
          values[expert_name(p.name, e)] = c.mean_abs;
          mean[expert_name(p.name, e)] = c.mean;
        }
      }
      values[p.name] = sum_abs / count;
      mean[p.name] = sum_mean / count;
    }
    out.push_back({{"step", step}, {"metric", "cosine_similarity"}, {"values", values}, {"mean", mean}});
  }
  if (due.embedding_cosine && !top_tokens.empty()) {
    // Seed 003 §5.3: the embeddings of the most frequent tokens.
    const CosineStats c = weights.row_cosine(kParamEmbed, 0, top_tokens, due.cosine_images ? &levels : nullptr);
    out.push_back({{"step", step}, {"metric", "embedding_cosine"}, {"value", c.mean_abs}, {"mean", c.mean},
                   {"top_tokens", c.rows_used}});
    if (due.cosine_images && c.rows_used >= 2) save_image("embedding_top_tokens", c.rows_used);
  }
  if (due.param_norm) {
    const Json values = per_class_norm(kParamNormTensors, [&](int i) { return weights.frobenius_squared(i); });
    out.push_back({{"step", step}, {"metric", "param_norm"}, {"values", values}});
  }
  return out;
}

// Token ids by descending frequency in the first max_tokens tokens of the
// shards (ties by id), at most k of them.
inline std::vector<int> most_frequent_tokens(const std::string& source, int k,
                                             std::uint64_t max_tokens = std::uint64_t(1) << 26) {
  std::vector<std::uint64_t> counts(std::size_t(kVocab), 0);
  std::uint64_t seen = 0;
  for (const auto& path : gc::rt::expand_shard_paths(source)) {
    const auto shard = gc::rt::TokenShard::open(path, kVocab);
    const std::uint64_t n = std::min<std::uint64_t>(shard.size(), max_tokens - seen);
    for (std::uint64_t i = 0; i < n; ++i) ++counts[shard.token(i)];
    seen += n;
    if (seen >= max_tokens) break;
  }
  std::vector<int> ids;
  for (int t = 0; t < kVocab; ++t) {
    if (counts[t] > 0) ids.push_back(t);
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return counts[a] > counts[b]; });
  if (int(ids.size()) > k) ids.resize(std::size_t(k));
  return ids;
}

}  // namespace gc::tree::metrics
