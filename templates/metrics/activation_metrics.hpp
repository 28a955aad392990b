// The activation analyses of one measurement (docs/metrics.md): sink score, attention entropy,
// activation RMS, effective RMSNorm factor, residual flow and logit std, accumulated over the
// validation batches as sums (metrics/activation_stats.hpp), so that a mean over several batches
// weights every token equally. The same code drives both backends: the per-batch statistics
// come from the backend's metric ops (cpu/metric_ops.hpp on the CPU, cuda/metric_ops.cuh on a
// GPU, where they are reduced on the device and only a few numbers per layer come back).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config.hpp"
#include "metrics/activation_stats.hpp"
#include "plan.hpp"
#include "vocabulary.hpp"

namespace gc::tree {
using Json = nlohmann::json;
}  // namespace gc::tree

namespace gc::tree::metrics {

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
  // Call after model.forward() on a batch. M is the model on either backend and `ops` that
  // backend's statistics (cpu::MetricOps on the CPU, reading host memory; cuda::MetricOps on a GPU,
  // reducing on the device): which buffers feed which metric is decided here, once.
  template <typename M, typename Ops>
  void add_batch(const M& model, Ops& ops) {
    const AttentionDims& dims = model.attention_dims();
    const std::int64_t N = model.rows();
    per_head_.resize(static_cast<std::size_t>(kHeads));
    for (int l = 0; l < kLayers; ++l) {
      const auto& L = model.layer(l);
      if (due_.sink_score && kSinkScoreLayers[l]) {
        // Seed 000 eq. 5 from q·k₁ and each query's log-sum-exp, then the mean over heads.
        timed("sink_score", [&] {
          ops.sink_score(per_head_.data(), L.qr.data(), L.kr.data(), L.lse.data(), dims, double(kAttnScale));
        });
        for (double s : per_head_) sink_[l].add(s);
      }
      if (due_.attention_entropy && kAttentionEntropyLayers[l]) {
        timed("attention_entropy", [&] {
          ops.attention_entropy(per_head_.data(), L.qr.data(), L.kr.data(), L.lse.data(), dims, double(kAttnScale));
        });
        for (double s : per_head_) entropy_[l].add(s);
      }
      if (due_.activation_rms && kActivationRmsLayers[l]) {
        timed("activation_rms", [&] { ops.add_moments(rms_[l], L.x.data(), N * kDModel, 1.0); });
      }
      if (due_.rmsnorm_factor && kRmsnormFactorLayers[l]) {
        timed("rmsnorm_factor", [&] { add_layer_norm_factors(l, L, N, ops); });
      }
    }
    if (due_.activation_rms) ops.add_moments(final_rms_, model.final_hidden().data(), N * kDModel, 1.0);
    if (due_.rmsnorm_factor) {
      ops.add_norm_factor(norms_["final"], model.final_hidden().data(), N, kDModel, double(kNormEps));
      if constexpr (kEmbeddingNorm) {
        ops.add_norm_factor(norms_["embedding"], model.embedding_input().data(), N, kDModel, double(kNormEps));
      }
    }
    if (due_.residual_flow) {
      // e = the residual stream entering layer 0 (after the embedding norm, when there is one).
      ops.add_residual_flow(flow_, model.final_hidden().data(), model.layer(0).x.data(), N, kDModel);
    }
    if (due_.logit_std) {
      if (model.keeps_logits()) {
        ops.add_moments(logits_, model.logits(), N * kVocab, double(kLogitScale));
      } else {  // chunked head: the sums its forward tracked (needs_logit_moments)
        double sums[2] = {0.0, 0.0};
        ops.read_doubles(sums, model.logit_moments.data(), 2);
        logits_.sum += sums[0];
        logits_.sum_sq += sums[1];
        logits_.count += N * kVocab;
      }
    }
  }

  // Seconds inside each metric's statistics over the batches so far (a measurement record's
  // parts; an operation that returns numbers has waited for its device work).
  const std::map<std::string, double>& seconds() const { return seconds_; }

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
  template <typename F>
  void timed(const char* metric, F&& statistics) {
    const auto t0 = std::chrono::steady_clock::now();
    statistics();
    seconds_[metric] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  template <typename Layer, typename Ops>
  void add_layer_norm_factors(int l, const Layer& L, std::int64_t N, Ops& ops) {
    const std::string p = layer_key(l) + ".";
    const double eps = double(kNormEps);
    ops.add_norm_factor(norms_[p + "input"], L.x.data(), N, kDModel, eps);
    ops.add_norm_factor(norms_[p + "post_attention"], L.h2.data(), N, kDModel, eps);
    if constexpr (kNormPlacement == NormPlacement::sandwich) {
      ops.add_norm_factor(norms_[p + "attn_out"], L.proj.data(), N, kDModel, eps);
      ops.add_norm_factor(norms_[p + "mlp_out"], L.m.data(), N, kDModel, eps);
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
  std::vector<double> per_head_;  // one layer's per-head values, reused
  std::map<std::string, double> seconds_;
};

}  // namespace gc::tree::metrics
