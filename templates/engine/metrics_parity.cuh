// The metrics' parity (engine/parity.cuh runs it after the models' forward pass): every metric
// of docs/metrics.md that a measurement computes, by the CPU reference (cpu::MetricOps,
// metrics::HostWeightStats) and by the device (cuda::MetricOps, cuda::DeviceWeightStats) on the
// same weights and the same batch, compared number by number; also the palette levels of one
// block-averaged cosine heatmap. The error of a number is |cuda − cpu| / max(|cpu|, floor): in
// fp32 the floor (1e-3) keeps a signed mean near zero (the mean row cosine) from reading a
// rounding difference as a large relative one. In bf16 it is 0.1: the device stores activations
// with bf16's 2⁻⁹ relative rounding, so a statistic of small differences carries an absolute
// error of that order (measured: residual flow 0.00121 against the fp32 CPU's 0.00164 on
// tiny_bf16, whose layers move the stream by 0.16 % at initialization).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cpu/metric_ops.hpp"
#include "cuda/metric_ops.cuh"
#include "cuda/weight_stats.cuh"
#include "engine/cpu_model.hpp"
#include "metrics/activation_metrics.hpp"
#include "metrics/weight_stats.hpp"
#include "plan.hpp"

namespace gc::tree::cuda {

struct MetricsParity {
  double worst = 0.0;     // the largest error of any number (see the top comment)
  std::string where;      // which: "metric/key"
  double got = 0.0, ref = 0.0;  // its values: CUDA, CPU
  int numbers = 0;        // how many numbers were compared
  // The largest |cuda − cpu| of a heatmap pixel's palette level (at most 1: an average that
  // lies on a level boundary may round either way).
  double worst_level = 0.0;
  double floor = 1e-3;       // of the relative error (metric_error_floor)
};

// The floor of the relative error (see the top comment).
template <typename T>
constexpr double metric_error_floor() {
  return std::is_same_v<T, float> ? 1e-3 : 0.1;
}

namespace detail {

inline void compare_numbers(const Json& got, const Json& ref, const std::string& where, MetricsParity& out) {
  if (ref.is_number()) {
    const double a = got.is_number() ? got.get<double>() : NAN, b = ref.get<double>();
    const double e = std::fabs(a - b) / std::max(std::fabs(b), out.floor);
    ++out.numbers;
    if (!(e <= out.worst)) {  // NaN counts as the worst
      out.worst = std::isnan(e) ? INFINITY : e;
      out.where = where;
      out.got = a;
      out.ref = b;
    }
  } else if (ref.is_object()) {
    for (auto it = ref.begin(); it != ref.end(); ++it) {
      if (it.key() == "step") continue;
      compare_numbers(got.contains(it.key()) ? got[it.key()] : Json(), it.value(), where + "/" + it.key(), out);
    }
  } else if (ref.is_array()) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      compare_numbers(i < got.size() ? got[i] : Json(), ref[i], where + "/" + std::to_string(i), out);
    }
  }
}

inline void compare_records(const std::vector<Json>& got, const std::vector<Json>& ref, MetricsParity& out) {
  if (got.size() != ref.size()) {
    out.worst = INFINITY;
    out.where = "record count " + std::to_string(got.size()) + " vs " + std::to_string(ref.size());
    return;
  }
  for (std::size_t i = 0; i < ref.size(); ++i) {
    compare_numbers(got[i], ref[i], ref[i].value("metric", std::string("record")), out);
  }
}

}  // namespace detail

// cpu and gpu: the same model on both backends after forward() on the same batch (gpu keeping
// its logits); weights: the fp32 weights both computed from, on the device.
template <typename GpuModel>
MetricsParity metrics_parity(const Model<float>& cpu, const GpuModel& gpu, const float* weights, double floor) {
  MetricsParity out;
  out.floor = floor;
  const metrics::MetricsDue due = metrics::MetricsDue::all();
  // Activations: every layer's statistics from both backends' buffers.
  metrics::ActivationMetrics on_cpu(due), on_gpu(due);
  cpu::MetricOps host_ops;
  MetricOps device_ops;
  device_ops.prepare(gpu.rows(), kHeads);
  on_cpu.add_batch(cpu, host_ops);
  on_gpu.add_batch(gpu, device_ops);
  detail::compare_records(on_gpu.records(0), on_cpu.records(0), out);
  if constexpr (kMoe) {  // the routing records' router entropy, per MoE layer
    for (int l = 0; l < kLayers; ++l) {
      if (!is_moe_layer(l)) continue;
      const std::int64_t rows = cpu.rows();
      detail::compare_numbers(Json(device_ops.router_entropy(gpu.moe_layer(l).scores.data(), rows, kExperts)),
                              Json(host_ops.router_entropy(cpu.moe_layer(l).scores.data(), rows, kExperts)),
                              "router_entropy/" + std::to_string(l), out);
    }
  }
  // Weights: Σx², stable rank, row cosine (every expert of a stacked tensor), the embedding's
  // first rows as "top tokens".
  std::vector<int> top_tokens;
  for (int t = 0; t < std::min(kVocab, 48); ++t) top_tokens.push_back((t * 7) % kVocab);
  metrics::WeightScratch sizes = metrics::WeightScratch::of_plan(int(top_tokens.size()), /*every_metric=*/true);
  // A heatmap that block-averages: 600 of the embedding's rows (with repeats when the
  // vocabulary is smaller) make 512 × 512 pixels.
  std::vector<int> many_rows;
  for (int r = 0; r < 600; ++r) many_rows.push_back(int(std::int64_t(r) * 131 % kVocab));
  sizes.add_cosine(int(many_rows.size()), kDModel);
  BlasLt blas;
  DeviceWeightStats device(sizes, blas);
  device.bind(weights);
  metrics::HostWeightStats host(cpu.params.data());
  // Every matrix of every tensor the weight metrics may measure (each expert of a stacked tensor).
  for (int i = 0; i < kNumParams; ++i) {
    const std::string name = kParams[i].name;
    detail::compare_numbers(Json(device.frobenius_squared(i)), Json(host.frobenius_squared(i)), name + "/Σx²", out);
    if (kParams[i].rank < 2) continue;
    const auto rows = metrics::cosine_rows(metrics::slice_rows(kParams[i]), metrics::kMaxCosineRows);
    for (int e = 0; e < metrics::matrix_count(kParams[i]); ++e) {
      const std::string at = name + "/" + std::to_string(e);
      if (kStableRankTensors[i]) {
        const metrics::StableRank a = device.stable_rank(i, e), b = host.stable_rank(i, e);
        detail::compare_numbers(Json{a.value, a.sigma_max}, Json{b.value, b.sigma_max}, at + "/stable_rank", out);
      }
      if (kCosineSimilarityTensors[i]) {
        const metrics::CosineStats a = device.row_cosine(i, e, rows, nullptr), b = host.row_cosine(i, e, rows, nullptr);
        detail::compare_numbers(Json{a.mean_abs, a.mean, a.max_abs}, Json{b.mean_abs, b.mean, b.max_abs},
                                at + "/row_cosine", out);
      }
    }
  }
  {
    const metrics::CosineStats a = device.row_cosine(kParamEmbed, 0, top_tokens, nullptr);
    const metrics::CosineStats b = host.row_cosine(kParamEmbed, 0, top_tokens, nullptr);
    detail::compare_numbers(Json{a.mean_abs, a.mean, a.max_abs}, Json{b.mean_abs, b.mean, b.max_abs},
                            "embedding_cosine", out);
  }
  std::vector<std::uint8_t> pixels_gpu, pixels_cpu;  // palette levels
  const metrics::CosineStats a = device.row_cosine(kParamEmbed, 0, many_rows, &pixels_gpu);
  const metrics::CosineStats b = host.row_cosine(kParamEmbed, 0, many_rows, &pixels_cpu);
  detail::compare_numbers(Json{a.mean_abs, a.mean, a.max_abs}, Json{b.mean_abs, b.mean, b.max_abs},
                          "embedding row cosine, 600 rows", out);
  if (pixels_gpu.size() != pixels_cpu.size()) {
    out.worst_level = INFINITY;
  } else {
    for (std::size_t i = 0; i < pixels_cpu.size(); ++i) {
      out.worst_level = std::max(out.worst_level, std::fabs(double(pixels_gpu[i]) - double(pixels_cpu[i])));
    }
  }
  return out;
}

}  // namespace gc::tree::cuda
