// Token-level comparison of two models on the same tokens (seed 000 §2.5,
// §4.7). Model a plays "small initialization", b "standard":
//
//   Δp_t      = p_a(y_t | x_<t) − p_b(y_t | x_<t)
//   Δsym p_t  = 2 (p_a − p_b) / (p_a + p_b)            in [−2, 2]; 0 when both are 0
//   d_t       = (ℓ_a(y_t) + ℓ_b(y_t)) / 2               difficulty, ℓ = −log p
//
// Tokens sorted by d_t fall into ten equal-sized difficulty bins (decile 1 =
// easiest); each bin reports the mean and median Δsym p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace gc::tree::analysis {

inline double delta_sym_p(double pa, double pb) { return pa + pb > 0.0 ? 2.0 * (pa - pb) / (pa + pb) : 0.0; }

// Median of v (v is reordered).
inline double median(std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(mid), v.end());
  const double hi = v[mid];
  if (v.size() % 2) return hi;
  const double lo = *std::max_element(v.begin(), v.begin() + std::ptrdiff_t(mid));
  return 0.5 * (lo + hi);
}

struct Decile {
  int index = 0;  // 1..10, 1 = easiest
  std::int64_t count = 0;
  double difficulty_min = 0.0, difficulty_max = 0.0;
  double mean = 0.0, median = 0.0;  // of Δsym p
};

struct Histogram {
  std::vector<double> edges;  // bins + 1 edges over [lo, hi]
  std::vector<std::int64_t> counts;
};

struct TokenComparison {
  std::int64_t tokens = 0;
  double mean_loss_a = 0.0, mean_loss_b = 0.0;
  double mean_delta_p = 0.0, mean_delta_sym_p = 0.0, median_delta_sym_p = 0.0;
  double fraction_improved = 0.0;  // share of tokens with Δsym p > 0
  std::vector<double> delta_sym;   // per token, in input order
  std::vector<Decile> deciles;
  Histogram histogram;
};

inline Histogram histogram(const std::vector<double>& v, double lo, double hi, int bins) {
  Histogram h;
  for (int i = 0; i <= bins; ++i) h.edges.push_back(lo + (hi - lo) * double(i) / bins);
  h.counts.assign(std::size_t(bins), 0);
  for (double x : v) {
    const int b = std::clamp(int(std::floor((x - lo) / (hi - lo) * bins)), 0, bins - 1);  // hi falls in the last bin
    ++h.counts[std::size_t(b)];
  }
  return h;
}

// logp_a, logp_b: natural-log probabilities of the target tokens, same order.
inline TokenComparison compare_tokens(const std::vector<double>& logp_a, const std::vector<double>& logp_b) {
  TokenComparison out;
  const std::size_t n = logp_a.size();
  out.tokens = std::int64_t(n);
  if (n == 0) return out;
  std::vector<double> difficulty(n);
  out.delta_sym.resize(n);
  double sum_dp = 0.0, sum_ds = 0.0, loss_a = 0.0, loss_b = 0.0;
  std::int64_t improved = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const double pa = std::exp(logp_a[t]), pb = std::exp(logp_b[t]);
    out.delta_sym[t] = delta_sym_p(pa, pb);
    difficulty[t] = -0.5 * (logp_a[t] + logp_b[t]);
    sum_dp += pa - pb;
    sum_ds += out.delta_sym[t];
    loss_a -= logp_a[t];
    loss_b -= logp_b[t];
    improved += out.delta_sym[t] > 0.0;
  }
  out.mean_delta_p = sum_dp / double(n);
  out.mean_delta_sym_p = sum_ds / double(n);
  out.mean_loss_a = loss_a / double(n);
  out.mean_loss_b = loss_b / double(n);
  out.fraction_improved = double(improved) / double(n);
  std::vector<double> all = out.delta_sym;
  out.median_delta_sym_p = median(all);
  out.histogram = histogram(out.delta_sym, -2.0, 2.0, 40);

  // Ten equal-sized bins by difficulty (stable: ties keep token order).
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return difficulty[a] < difficulty[b]; });
  for (int k = 0; k < 10; ++k) {
    const std::size_t begin = n * std::size_t(k) / 10, end = n * std::size_t(k + 1) / 10;
    Decile d;
    d.index = k + 1;
    d.count = std::int64_t(end - begin);
    if (begin < end) {
      std::vector<double> values;
      for (std::size_t i = begin; i < end; ++i) values.push_back(out.delta_sym[order[i]]);
      d.difficulty_min = difficulty[order[begin]];
      d.difficulty_max = difficulty[order[end - 1]];
      d.mean = std::accumulate(values.begin(), values.end(), 0.0) / double(values.size());
      d.median = median(values);
    }
    out.deciles.push_back(d);
  }
  return out;
}

// Indices of the k tokens with the largest Δsym p (ties: earlier token first).
inline std::vector<std::size_t> largest_gains(const std::vector<double>& delta_sym, std::size_t k) {
  std::vector<std::size_t> order(delta_sym.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  k = std::min(k, order.size());
  std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(), [&](std::size_t a, std::size_t b) {
    return delta_sym[a] > delta_sym[b] || (delta_sym[a] == delta_sym[b] && a < b);
  });
  order.resize(k);
  return order;
}

}  // namespace gc::tree::analysis
