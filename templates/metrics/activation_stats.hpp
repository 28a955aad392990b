// Statistics of activations [N tokens, D features], accumulated over batches
// as sums so that a mean over several validation batches weights every token
// equally. All in double.
//
//   residual flow ratio     ‖h_L − e‖₂ / ‖e‖₂ per token           (seed 000 §2.4, App. A)
//   RMSNorm factor          (σ²(h) + ε)^-1/2, σ²(h) = mean_i h_i²  (seed 000 eq. 2, Fig. 1c)
//   its ε-free value        σ²(h)^-1/2
//   RMS                     sqrt(mean h²)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/moments.hpp"

namespace gc::tree::metrics {

// A running mean of per-token values.
struct Mean {
  double sum = 0.0;
  std::int64_t count = 0;
  void add(double x) {
    sum += x;
    ++count;
  }
  double value() const { return count ? sum / double(count) : 0.0; }
};

// Mean over tokens of ‖h_t − e_t‖₂ / ‖e_t‖₂ (tokens with e_t = 0 are skipped).
template <typename T>
void add_residual_flow(Mean& out, const T* h_last, const T* e, std::int64_t N, int D) {
  for (std::int64_t t = 0; t < N; ++t) {
    double diff = 0.0, base = 0.0;
    for (int i = 0; i < D; ++i) {
      const double ei = double(e[t * D + i]);
      const double d = double(h_last[t * D + i]) - ei;
      diff += d * d;
      base += ei * ei;
    }
    if (base > 0.0) out.add(std::sqrt(diff / base));
  }
}

// The effective RMSNorm factor of an input h, with and without ε, averaged over tokens.
struct NormFactor {
  Mean factor, eps_free;
};

template <typename T>
void add_norm_factor(NormFactor& out, const T* h, std::int64_t N, int D, double eps) {
  for (std::int64_t t = 0; t < N; ++t) {
    double ms = 0.0;
    for (int i = 0; i < D; ++i) ms += double(h[t * D + i]) * double(h[t * D + i]);
    ms /= double(D);
    out.factor.add(1.0 / std::sqrt(ms + eps));
    if (ms > 0.0) out.eps_free.add(1.0 / std::sqrt(ms));
  }
}

// Sum of squares and count, for RMS and standard deviation.
struct Moments {
  double sum = 0.0, sum_sq = 0.0;
  std::int64_t count = 0;
  double rms() const { return count ? std::sqrt(sum_sq / double(count)) : 0.0; }
  double stddev() const {
    if (count < 2) return 0.0;
    const double mean = sum / double(count);
    return std::sqrt(std::max(sum_sq / double(count) - mean * mean, 0.0));
  }
};

template <typename T>
void add_moments(Moments& out, const T* x, std::int64_t n, double scale = 1.0) {
  double sums[2] = {0.0, 0.0};  // serial: the same sum whatever the thread count
  core::add_scaled_moments(sums, x, n, scale);
  out.sum += sums[0];
  out.sum_sq += sums[1];
  out.count += n;
}

// The router entropy of the MoE records: the mean over rows of −Σ_e p ln p with p the scores
// normalized per row (scores [rows, experts] on the host; cuda/metric_ops.cuh reduces the same
// on the device).
inline double router_entropy(const float* scores, std::int64_t rows, int experts) {
  double total = 0.0;
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* s = scores + t * experts;
    double sum = 0.0, h = 0.0;
    for (int e = 0; e < experts; ++e) sum += double(s[e]);
    for (int e = 0; e < experts; ++e) {
      const double p = double(s[e]) / sum;
      if (p > 0.0) h -= p * std::log(p);
    }
    total += h;
  }
  return rows > 0 ? total / double(rows) : 0.0;
}

}  // namespace gc::tree::metrics
