// The token-level comparison (seed 000 §2.5) against the definitions computed
// naively: sort by difficulty, split in ten, mean and median of each bin.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "analysis/token_compare.hpp"
#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using namespace gc::tree::analysis;

double naive_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

TEST(TokenCompare, MatchesTheDefinitionsOnRandomProbabilities) {
  const std::size_t n = 1237;  // not a multiple of 10
  std::vector<double> la, lb;
  for (double x : kt::random_vector(n, 3, 0.01, 6.0)) la.push_back(-std::fabs(x));
  for (double x : kt::random_vector(n, 4, 0.01, 6.0)) lb.push_back(-std::fabs(x));
  const TokenComparison c = compare_tokens(la, lb);
  ASSERT_EQ(c.tokens, std::int64_t(n));
  std::vector<double> ds(n), diff(n);
  double sum_dp = 0, sum_ds = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const double pa = std::exp(la[t]), pb = std::exp(lb[t]);
    ds[t] = 2 * (pa - pb) / (pa + pb);
    diff[t] = 0.5 * (-la[t] - lb[t]);
    sum_dp += pa - pb;
    sum_ds += ds[t];
    EXPECT_NEAR(c.delta_sym[t], ds[t], 1e-15);
  }
  EXPECT_NEAR(c.mean_delta_p, sum_dp / n, 1e-14);
  EXPECT_NEAR(c.mean_delta_sym_p, sum_ds / n, 1e-14);
  EXPECT_DOUBLE_EQ(c.median_delta_sym_p, naive_median(ds));
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return diff[a] < diff[b]; });
  ASSERT_EQ(c.deciles.size(), 10u);
  std::int64_t total = 0;
  for (int k = 0; k < 10; ++k) {
    std::vector<double> bin;
    for (std::size_t i = n * k / 10; i < n * (k + 1) / 10; ++i) bin.push_back(ds[order[i]]);
    const Decile& d = c.deciles[k];
    EXPECT_EQ(d.count, std::int64_t(bin.size()));
    double mean = 0;
    for (double x : bin) mean += x / bin.size();
    EXPECT_NEAR(d.mean, mean, 1e-13);
    EXPECT_DOUBLE_EQ(d.median, naive_median(bin));
    if (k > 0) {
      EXPECT_GE(d.difficulty_min, c.deciles[k - 1].difficulty_max);
    }
    total += d.count;
  }
  EXPECT_EQ(total, std::int64_t(n));
  std::int64_t in_hist = 0;
  for (auto count : c.histogram.counts) in_hist += count;
  EXPECT_EQ(in_hist, std::int64_t(n));
  ASSERT_EQ(c.histogram.edges.size(), 41u);
  EXPECT_EQ(c.histogram.edges.front(), -2.0);
  EXPECT_EQ(c.histogram.edges.back(), 2.0);
}

TEST(TokenCompare, EdgeValuesAndTheLargestGains) {
  EXPECT_EQ(delta_sym_p(0.0, 0.0), 0.0);
  EXPECT_EQ(delta_sym_p(1.0, 0.0), 2.0);
  EXPECT_EQ(delta_sym_p(0.0, 1.0), -2.0);
  const Histogram h = histogram({-2.0, 2.0, 0.0, 5.0}, -2.0, 2.0, 4);
  EXPECT_EQ(h.counts, (std::vector<std::int64_t>{1, 0, 1, 2}));  // 2.0 and beyond fall in the last bin
  const std::vector<double> gains = {0.1, 1.5, -0.3, 1.5, 0.7};
  EXPECT_EQ(largest_gains(gains, 3), (std::vector<std::size_t>{1, 3, 4}));
  EXPECT_EQ(largest_gains(gains, 99).size(), 5u);
  const TokenComparison same = compare_tokens({-1.0, -2.0}, {-1.0, -2.0});
  EXPECT_EQ(same.mean_delta_sym_p, 0.0);
  EXPECT_EQ(same.fraction_improved, 0.0);
}

}  // namespace
