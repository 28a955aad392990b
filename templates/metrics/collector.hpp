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
#include "metrics/activation_stats.hpp"
#include "metrics/heatmap.hpp"
#include "metrics/matrix_stats.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/token_shard.hpp"

namespace gcm {
using Json = nlohmann::json;
}  // namespace gcm

namespace gcm::metrics {

// Which metrics one measurement computes.
struct MetricsDue {
  bool sink_score = false, attention_entropy = false, activation_rms = false, rmsnorm_factor = false,
       residual_flow = false, logit_std = false;
  bool stable_rank = false, cosine_similarity = false, embedding_cosine = false, param_norm = false;
  bool cosine_images = false;  // also save the cosine matrices as PNG heatmaps

  bool any_activation() const {
    return sink_score || attention_entropy || activation_rms || rmsnorm_factor || residual_flow || logit_std;
  }
  bool any_weight() const { return stable_rank || cosine_similarity || embedding_cosine || param_norm; }
  static MetricsDue all() {
    MetricsDue d;
    d.sink_score = d.attention_entropy = d.activation_rms = d.rmsnorm_factor = d.residual_flow = d.logit_std = true;
    d.stable_rank = d.cosine_similarity = d.embedding_cosine = d.param_norm = true;
    return d;
  }
};

inline std::string layer_key(int l) { return std::to_string(l); }

// Activation metrics accumulated over the validation batches of one measurement.
class ActivationMetrics {
 public:
  explicit ActivationMetrics(const MetricsDue& due) : due_(due), sink_(kLayers), entropy_(kLayers), rms_(kLayers) {}

  // Whether the forward passes must track the logits' moments (a model that does not keep its
  // logits: BasicModel::track_logit_moments).
  bool needs_logit_moments() const { return due_.logit_std; }
  // Call after model.forward() on a batch.
  void add_batch(const Model<float>& model) {
    const AttentionDims& dims = model.attention_dims();
    const std::int64_t N = model.rows();
    std::vector<double> per_head(static_cast<std::size_t>(kHeads));
    for (int l = 0; l < kLayers; ++l) {
      const auto& L = model.layer(l);
      if (due_.sink_score && kSinkScoreLayers[l]) {
        // Seed 000 eq. 5 from q·k₁ and each query's log-sum-exp, then the mean over heads.
        cpu::sink_score(per_head.data(), L.qr.data(), L.kr.data(), L.lse.data(), dims, double(kAttnScale));
        for (double s : per_head) sink_[l].add(s);
      }
      if (due_.attention_entropy && kAttentionEntropyLayers[l]) {
        cpu::attention_entropy(per_head.data(), L.qr.data(), L.kr.data(), L.lse.data(), dims, double(kAttnScale));
        for (double s : per_head) entropy_[l].add(s);
      }
      if (due_.activation_rms && kActivationRmsLayers[l]) metrics::add_moments(rms_[l], L.x.data(), N * kDModel);
      if (due_.rmsnorm_factor && kRmsnormFactorLayers[l]) add_layer_norm_factors(l, L, N);
    }
    if (due_.activation_rms) metrics::add_moments(final_rms_, model.final_hidden().data(), N * kDModel);
    if (due_.rmsnorm_factor) {
      metrics::add_norm_factor(norms_["final"], model.final_hidden().data(), N, kDModel, double(kNormEps));
      if constexpr (kEmbeddingNorm) {
        metrics::add_norm_factor(norms_["embedding"], model.embedding_input().data(), N, kDModel, double(kNormEps));
      }
    }
    if (due_.residual_flow) {
      // e = the residual stream entering layer 0 (after the embedding norm, when there is one).
      metrics::add_residual_flow(flow_, model.final_hidden().data(), model.layer(0).x.data(), N, kDModel);
    }
    if (due_.logit_std) {
      if (model.keeps_logits()) {
        metrics::add_moments(logits_, model.logits(), N * kVocab, double(kLogitScale));
      } else {  // chunked head: the sums its forward tracked (needs_logit_moments)
        logits_.sum += model.logit_moments[0];
        logits_.sum_sq += model.logit_moments[1];
        logits_.count += N * kVocab;
      }
    }
  }

  std::vector<Json> records(std::int64_t step) const {
    std::vector<Json> out;
    if (due_.sink_score) out.push_back(per_layer(step, "sink_score", sink_, kSinkScoreLayers));
    if (due_.attention_entropy) out.push_back(per_layer(step, "attention_entropy", entropy_, kAttentionEntropyLayers));
    if (due_.activation_rms) {
      Json values = Json::object();
      for (int l = 0; l < kLayers; ++l) {
        if (kActivationRmsLayers[l]) values[layer_key(l)] = rms_[l].rms();
      }
      values["final"] = final_rms_.rms();
      out.push_back({{"step", step}, {"metric", "activation_rms"}, {"values", values}});
    }
    if (due_.rmsnorm_factor) {
      Json values = Json::object(), eps_free = Json::object();
      for (const auto& [name, f] : norms_) {
        values[name] = f.factor.value();
        eps_free[name] = f.eps_free.value();
      }
      out.push_back({{"step", step}, {"metric", "rmsnorm_factor"}, {"values", values}, {"eps_free", eps_free},
                     {"eps", double(kNormEps)}});
    }
    if (due_.residual_flow) out.push_back({{"step", step}, {"metric", "residual_flow"}, {"value", flow_.value()}});
    if (due_.logit_std) out.push_back({{"step", step}, {"metric", "logit_std"}, {"value", logits_.stddev()}});
    return out;
  }

 private:
  template <typename Layer>
  void add_layer_norm_factors(int l, const Layer& L, std::int64_t N) {
    const std::string p = layer_key(l) + ".";
    const double eps = double(kNormEps);
    metrics::add_norm_factor(norms_[p + "input"], L.x.data(), N, kDModel, eps);
    metrics::add_norm_factor(norms_[p + "post_attention"], L.h2.data(), N, kDModel, eps);
    if constexpr (kNormPlacement == NormPlacement::sandwich) {
      metrics::add_norm_factor(norms_[p + "attn_out"], L.proj.data(), N, kDModel, eps);
      metrics::add_norm_factor(norms_[p + "mlp_out"], L.m.data(), N, kDModel, eps);
    }
  }

  static Json per_layer(std::int64_t step, const char* name, const std::vector<metrics::Mean>& means,
                        const bool* layers) {
    Json values = Json::object();
    for (int l = 0; l < kLayers; ++l) {
      if (layers[l]) values[layer_key(l)] = means[l].value();
    }
    return {{"step", step}, {"metric", name}, {"values", values}};
  }

  MetricsDue due_;
  std::vector<metrics::Mean> sink_, entropy_;
  std::vector<metrics::Moments> rms_;
  metrics::Moments final_rms_, logits_;
  std::map<std::string, metrics::NormFactor> norms_;
  metrics::Mean flow_;
};

// A parameter's matrix view: [shape[0], numel / shape[0]].
inline int matrix_rows(const ParamInfo& p) { return int(p.shape[0]); }
inline int matrix_cols(const ParamInfo& p) { return int(p.numel / p.shape[0]); }

// A stacked expert tensor [E, out, in] is E matrices [out, in]; a 2-D tensor is one.
inline int matrix_count(const ParamInfo& p) { return p.rank == 3 ? int(p.shape[0]) : 1; }
inline int slice_rows(const ParamInfo& p) { return int(p.rank == 3 ? p.shape[1] : p.shape[0]); }
inline int slice_cols(const ParamInfo& p) { return int(p.rank == 3 ? p.shape[2] : p.numel / p.shape[0]); }
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

// Rows a cosine matrix may have before rows are subsampled (evenly spaced).
inline constexpr int kMaxCosineRows = 4096;

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

// Weight metrics of the current parameters (host memory, kParams order).
// image_dir (relative to run_dir) receives the heatmaps when due.cosine_images.
inline std::vector<Json> weight_records(std::int64_t step, const float* params, const MetricsDue& due,
                                        const std::vector<int>& top_tokens, const std::string& run_dir) {
  std::vector<Json> out;
  auto param = [&](int i) { return params + kOffsets.at[i]; };
  std::string image_dir;
  if (due.cosine_images) {
    char name[32];
    std::snprintf(name, sizeof name, "images/step_%06lld", (long long)step);
    image_dir = name;
    std::filesystem::create_directories(std::filesystem::path(run_dir) / image_dir);
  }
  auto save_image = [&](const std::string& tensor, const std::vector<float>& matrix, int k) {
    const std::string rel = image_dir + "/" + tensor + ".png";
    metrics::write_heatmap_png((std::filesystem::path(run_dir) / rel).string(), matrix, k);
    out.push_back({{"step", step}, {"metric", "cosine_image"}, {"tensor", tensor}, {"path", rel}, {"rows", k}});
  };
  if (due.stable_rank) {
    Json values = Json::object(), sigma = Json::object(), unconverged = Json::array();
    for (int i = 0; i < kNumParams; ++i) {
      if (!kStableRankTensors[i] || kParams[i].rank < 2) continue;
      // Expert tensors: the mean over experts under the stacked name, and the first experts by name.
      const ParamInfo& p = kParams[i];
      const int count = matrix_count(p), rows = slice_rows(p), cols = slice_cols(p);
      double sum_value = 0.0, sum_sigma = 0.0;
      for (int e = 0; e < count; ++e) {
        const auto sr = metrics::stable_rank(param(i) + std::int64_t(e) * rows * cols, rows, cols);
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
    std::vector<float> matrix;
    for (int i = 0; i < kNumParams; ++i) {
      if (!kCosineSimilarityTensors[i] || kParams[i].rank < 2) continue;
      const ParamInfo& p = kParams[i];
      if (p.rank == 2) {
        const auto rows = metrics::cosine_rows(matrix_rows(p), kMaxCosineRows);
        const auto c = metrics::row_cosine_stats(param(i), matrix_cols(p), rows, due.cosine_images ? &matrix : nullptr);
        values[p.name] = c.mean_abs;
        mean[p.name] = c.mean;
        if (due.cosine_images) save_image(p.name, matrix, c.rows_used);
        continue;
      }
      // Experts: the mean over experts, and the first experts by name (no images).
      const int count = matrix_count(p), rows = slice_rows(p), cols = slice_cols(p);
      const auto row_ids = metrics::cosine_rows(rows, kMaxCosineRows);
      double sum_abs = 0.0, sum_mean = 0.0;
      for (int e = 0; e < count; ++e) {
        const auto c = metrics::row_cosine_stats(param(i) + std::int64_t(e) * rows * cols, cols, row_ids, nullptr);
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
    std::vector<float> matrix;
    const auto c = metrics::row_cosine_stats(param(kParamEmbed), kDModel, top_tokens,
                                             due.cosine_images ? &matrix : nullptr);
    out.push_back({{"step", step}, {"metric", "embedding_cosine"}, {"value", c.mean_abs}, {"mean", c.mean},
                   {"top_tokens", c.rows_used}});
    if (due.cosine_images) save_image("embedding_top_tokens", matrix, c.rows_used);
  }
  if (due.param_norm) {
    const Json values = per_class_norm(kParamNormTensors, [&](int i) {
      return metrics::frobenius_squared(param(i), kParams[i].numel);
    });
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

}  // namespace gcm::metrics
