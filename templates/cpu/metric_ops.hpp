// The CPU backend's statistics for the activation metrics (metrics/activation_metrics.hpp
// add_batch) and the router entropy of the MoE records: the reference implementations of
// metrics/activation_stats.hpp and cpu/attention.hpp over host memory. cuda/metric_ops.cuh is
// its peer over device buffers, reduced on the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "cpu/attention.hpp"
#include "metrics/activation_stats.hpp"
#include "vocabulary.hpp"

namespace gc::tree::cpu {

struct MetricOps {
  // Per head: the mean over queries of seed 000 eq. 5's sink score / the attention entropy.
  template <typename T, typename S>
  void sink_score(double* per_head, const T* q, const T* k, const S* lse, const AttentionDims& d, double scale) {
    cpu::sink_score(per_head, q, k, lse, d, scale);
  }
  template <typename T, typename S>
  void attention_entropy(double* per_head, const T* q, const T* k, const S* lse, const AttentionDims& d,
                         double scale) {
    cpu::attention_entropy(per_head, q, k, lse, d, scale);
  }
  template <typename T>
  void add_moments(metrics::Moments& out, const T* x, std::int64_t n, double scale) {
    metrics::add_moments(out, x, n, scale);
  }
  template <typename T>
  void add_norm_factor(metrics::NormFactor& out, const T* h, std::int64_t rows, int dim, double eps) {
    metrics::add_norm_factor(out, h, rows, dim, eps);
  }
  template <typename T>
  void add_residual_flow(metrics::Mean& out, const T* h_last, const T* e, std::int64_t rows, int dim) {
    metrics::add_residual_flow(out, h_last, e, rows, dim);
  }
  void read_doubles(double* out, const double* src, int n) { std::copy(src, src + n, out); }
  // The mean router entropy of scores[rows, experts] (metrics/activation_stats.hpp).
  double router_entropy(const float* scores, std::int64_t rows, int experts) {
    return metrics::router_entropy(scores, rows, experts);
  }
};

}  // namespace gc::tree::cpu
