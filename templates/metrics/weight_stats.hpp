// What the weight metrics (metrics/collector.hpp weight_records) measure of one parameter
// tensor, asked of the memory that holds the weights: HostWeightStats below reads fp32
// parameters in host memory (the CPU backend, ./analyze without a GPU); cuda/weight_stats.cuh
// reads the GPU's fp32 master weights where they lie, so that only numbers and block-averaged
// heatmaps cross to the host. Tensors are numbered as kParams; a 2-D tensor is one matrix, a
// stacked expert tensor [E, out, in] is E matrices (metrics/collector.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "metrics/heatmap.hpp"
#include "metrics/matrix_stats.hpp"
#include "model/model.hpp"
#include "plan.hpp"

namespace gc::tree::metrics {

// A parameter's matrix view: [shape[0], numel / shape[0]].
inline int matrix_rows(const ParamInfo& p) { return int(p.shape[0]); }
inline int matrix_cols(const ParamInfo& p) { return int(p.numel / p.shape[0]); }

// A stacked expert tensor [E, out, in] is E matrices [out, in]; a 2-D tensor is one.
inline int matrix_count(const ParamInfo& p) { return p.rank == 3 ? int(p.shape[0]) : 1; }
inline int slice_rows(const ParamInfo& p) { return int(p.rank == 3 ? p.shape[1] : p.shape[0]); }
inline int slice_cols(const ParamInfo& p) { return int(p.rank == 3 ? p.shape[2] : p.numel / p.shape[0]); }

// Rows a cosine matrix may have before rows are subsampled (evenly spaced).
inline constexpr int kMaxCosineRows = 4096;

class WeightStats {
 public:
  virtual ~WeightStats() = default;
  // Σ x² over tensor i.
  virtual double frobenius_squared(int tensor) = 0;
  // Seed 000 eq. 7 of matrix `matrix` of tensor i (slice_rows × slice_cols).
  virtual StableRank stable_rank(int tensor, int matrix) = 0;
  // Seed 000 eq. 6 over the chosen rows of matrix `matrix` of tensor i (its rows of
  // slice_cols values; a 2-D tensor's matrix_cols). When `levels` is given it receives the
  // heatmap: the cosine matrix (diagonal 1) block-averaged to side × side pixels, side =
  // min(rows.size(), kHeatmapPixels), as palette levels (metrics/heatmap.hpp, one byte a pixel).
  virtual CosineStats row_cosine(int tensor, int matrix, const std::vector<int>& rows,
                                 std::vector<std::uint8_t>* levels) = 0;
};

// The weights in host memory (kParams order, kOffsets), measured by matrix_stats.hpp.
class HostWeightStats final : public WeightStats {
 public:
  explicit HostWeightStats(const float* params) : params_(params) {}
  double frobenius_squared(int tensor) override {
    return metrics::frobenius_squared(params_ + kOffsets.at[tensor], kParams[tensor].numel);
  }
  StableRank stable_rank(int tensor, int matrix) override {
    const ParamInfo& p = kParams[tensor];
    return metrics::stable_rank(slice(tensor, matrix), slice_rows(p), slice_cols(p));
  }
  CosineStats row_cosine(int tensor, int matrix, const std::vector<int>& rows,
                         std::vector<std::uint8_t>* levels) override {
    std::vector<float> full;
    const CosineStats c = row_cosine_stats(slice(tensor, matrix), slice_cols(kParams[tensor]), rows,
                                           levels ? &full : nullptr);
    if (levels) *levels = heatmap_levels(block_average(full, c.rows_used));
    return c;
  }

 private:
  const float* slice(int tensor, int matrix) const {
    const ParamInfo& p = kParams[tensor];
    return params_ + kOffsets.at[tensor] + std::int64_t(matrix) * slice_rows(p) * slice_cols(p);
  }
  const float* params_;
};

// Another WeightStats, timed per kind of question (the trainer's measurement records). Each call
// returns numbers on the host, so on a GPU its time includes the device work.
class TimedWeightStats final : public WeightStats {
  // Runs one question, adding its time to `seconds`.
  template <class F>
  static auto timed(double& seconds, F&& question) {
    const auto t0 = std::chrono::steady_clock::now();
    auto answer = question();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return answer;
  }

 public:
  explicit TimedWeightStats(WeightStats& inner) : inner_(inner) {}
  double frobenius_squared(int tensor) override {
    return timed(frobenius_s, [&] { return inner_.frobenius_squared(tensor); });
  }
  StableRank stable_rank(int tensor, int matrix) override {
    return timed(stable_rank_s, [&] { return inner_.stable_rank(tensor, matrix); });
  }
  CosineStats row_cosine(int tensor, int matrix, const std::vector<int>& rows,
                         std::vector<std::uint8_t>* levels) override {
    return timed(cosine_s, [&] { return inner_.row_cosine(tensor, matrix, rows, levels); });
  }

  double frobenius_s = 0.0, stable_rank_s = 0.0, cosine_s = 0.0;  // seconds inside each kind

 private:
  WeightStats& inner_;
};

}  // namespace gc::tree::metrics
