// The metric computations of templates/metrics against definitions written out
// naively in the test (double precision, straight from the seed equations), on
// random inputs with known answers where possible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "kernels/kernel_test_util.hpp"
#include "metrics/activation_stats.hpp"
#include "metrics/heatmap.hpp"
#include "metrics/matrix_stats.hpp"

namespace kt = gc::test::kernels;

namespace {

using namespace gc::tree::metrics;

// Orthonormal columns (k of them, length n) by Gram-Schmidt on random vectors.
std::vector<std::vector<double>> orthonormal(int n, int k, unsigned seed) {
  std::vector<std::vector<double>> q;
  for (int j = 0; j < k; ++j) {
    auto v = kt::random_normal(std::size_t(n), seed + unsigned(j));
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& b : q) {
        const double c = std::inner_product(v.begin(), v.end(), b.begin(), 0.0);
        for (int i = 0; i < n; ++i) v[i] -= c * b[i];
      }
    }
    const double norm = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    for (double& x : v) x /= norm;
    q.push_back(v);
  }
  return q;
}

// W = U diag(s) Vᵀ, [rows, cols], with the given singular values.
std::vector<double> with_singular_values(int rows, int cols, const std::vector<double>& s, unsigned seed) {
  const int k = int(s.size());
  const auto U = orthonormal(rows, k, seed), V = orthonormal(cols, k, seed + 1000);
  std::vector<double> W(std::size_t(rows) * cols, 0.0);
  for (int j = 0; j < k; ++j) {
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) W[std::size_t(r) * cols + c] += s[j] * U[j][r] * V[j][c];
    }
  }
  return W;
}

TEST(MetricsStableRank, RecoversTheTopSingularValueEvenWithoutASpectralGap) {
  // Singular values spread like a random matrix's, with the top two 1e-4 apart:
  // power iteration would need ~10^4 steps here.
  std::vector<double> s = kt::random_vector(60, 7, 0.05, 0.9);
  for (double& x : s) x = std::fabs(x);
  s.push_back(1.0);
  s.push_back(0.9999);
  for (auto [rows, cols] : {std::pair{80, 120}, std::pair{120, 80}}) {
    const auto W = with_singular_values(rows, cols, s, 3);
    const StableRank sr = stable_rank(W.data(), rows, cols);
    double frob = 0.0;
    for (double x : s) frob += x * x;
    EXPECT_TRUE(sr.converged);
    EXPECT_NEAR(sr.sigma_max, 1.0, 1e-9) << rows << "x" << cols;
    EXPECT_NEAR(sr.value, frob, 1e-7 * frob);
    EXPECT_LT(sr.iterations, 80);
  }
}

TEST(MetricsStableRank, RankOneMatrixHasStableRankOneAndZeroMatrixZero) {
  const auto W = with_singular_values(30, 20, {2.5}, 11);
  const StableRank sr = stable_rank(W.data(), 30, 20);
  EXPECT_NEAR(sr.value, 1.0, 1e-12);
  EXPECT_NEAR(sr.sigma_max, 2.5, 1e-12);
  const std::vector<float> zeros(30 * 20, 0.0f);
  EXPECT_EQ(stable_rank(zeros.data(), 30, 20).value, 0.0);
}

TEST(MetricsStableRank, GaussianMatrixMatchesTheSpectrumFromAFullEigendecomposition) {
  // Reference: the Gram matrix's largest eigenvalue by cyclic Jacobi rotations (exact to rounding).
  const int rows = 48, cols = 32;
  const auto W = kt::random_normal(std::size_t(rows) * cols, 21);
  std::vector<double> G(std::size_t(cols) * cols, 0.0);
  for (int i = 0; i < cols; ++i) {
    for (int j = 0; j < cols; ++j) {
      for (int r = 0; r < rows; ++r) G[i * cols + j] += W[r * cols + i] * W[r * cols + j];
    }
  }
  for (int sweep = 0; sweep < 30; ++sweep) {
    for (int p = 0; p < cols; ++p) {
      for (int q = p + 1; q < cols; ++q) {
        const double apq = G[p * cols + q];
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (G[q * cols + q] - G[p * cols + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < cols; ++k) {
          const double gkp = G[k * cols + p], gkq = G[k * cols + q];
          G[k * cols + p] = c * gkp - s * gkq;
          G[k * cols + q] = s * gkp + c * gkq;
        }
        for (int k = 0; k < cols; ++k) {
          const double gpk = G[p * cols + k], gqk = G[q * cols + k];
          G[p * cols + k] = c * gpk - s * gqk;
          G[q * cols + k] = s * gpk + c * gqk;
        }
      }
    }
  }
  double top = 0.0;
  for (int i = 0; i < cols; ++i) top = std::max(top, G[i * cols + i]);
  std::vector<float> Wf(W.begin(), W.end());
  const StableRank sr = stable_rank(Wf.data(), rows, cols);
  EXPECT_NEAR(sr.sigma_max * sr.sigma_max, top, 1e-5 * top);
}

TEST(MetricsCosine, MatchesTheDefinitionPairByPairIncludingAZeroRow) {
  const int rows = 40, cols = 24;
  auto W = kt::random_vector(std::size_t(rows) * cols, 5);
  for (int c = 0; c < cols; ++c) W[7 * cols + c] = 0.0;  // a dead unit
  std::vector<int> all(rows);
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> matrix;
  const CosineStats got = row_cosine_stats(W.data(), cols, all, &matrix);
  double sum = 0, sum_abs = 0, max_abs = 0;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < rows; ++j) {
      double dot = 0, ni = 0, nj = 0;
      for (int c = 0; c < cols; ++c) {
        dot += W[i * cols + c] * W[j * cols + c];
        ni += W[i * cols + c] * W[i * cols + c];
        nj += W[j * cols + c] * W[j * cols + c];
      }
      const double cij = (ni > 0 && nj > 0) ? dot / std::sqrt(ni * nj) : 0.0;  // eq. 6
      if (i == j) {
        EXPECT_EQ(matrix[i * rows + j], 1.0f);
        continue;
      }
      EXPECT_NEAR(matrix[i * rows + j], cij, 2e-6);
      sum += cij;
      sum_abs += std::fabs(cij);
      max_abs = std::max(max_abs, std::fabs(cij));
    }
  }
  const double pairs = double(rows) * (rows - 1);
  EXPECT_NEAR(got.mean, sum / pairs, 1e-6);
  EXPECT_NEAR(got.mean_abs, sum_abs / pairs, 1e-6);
  EXPECT_NEAR(got.max_abs, max_abs, 1e-6);
  EXPECT_EQ(got.rows_used, rows);
}

TEST(MetricsCosine, AlignedRowsGiveOneAndLargeMatricesAreSubsampledEvenly) {
  // Condensation in its extreme form: every row a positive multiple of one direction.
  const int rows = 10, cols = 8;
  const auto dir = kt::random_vector(cols, 9);
  std::vector<double> W;
  for (int r = 0; r < rows; ++r) {
    for (double x : dir) W.push_back(x * (r + 1));
  }
  const auto c = row_cosine_stats(W.data(), cols, cosine_rows(rows, 100));
  EXPECT_NEAR(c.mean, 1.0, 1e-6);
  EXPECT_NEAR(c.mean_abs, 1.0, 1e-6);
  const auto picked = cosine_rows(10000, 4096);
  ASSERT_EQ(picked.size(), 4096u);
  EXPECT_EQ(picked.front(), 0);
  EXPECT_LT(picked.back(), 10000);
  EXPECT_TRUE(std::is_sorted(picked.begin(), picked.end()));
  EXPECT_EQ(std::adjacent_find(picked.begin(), picked.end()), picked.end());  // no row twice
}

TEST(MetricsActivations, ResidualFlowNormFactorAndMomentsMatchTheDefinitions) {
  const int N = 13, D = 17;
  const auto h = kt::random_vector(std::size_t(N) * D, 1, 0.01, 0.2);
  const auto e = kt::random_vector(std::size_t(N) * D, 2, 0.01, 0.2);
  Mean flow;
  add_residual_flow(flow, h.data(), e.data(), N, D);
  NormFactor f;
  const double eps = 1e-3;  // comparable to σ²(h): the factor is visibly below its ε-free value
  add_norm_factor(f, h.data(), N, D, eps);
  Moments m;
  add_moments(m, h.data(), std::int64_t(N) * D, 2.0);
  double flow_sum = 0, factor_sum = 0, free_sum = 0, s = 0, sq = 0;
  for (int t = 0; t < N; ++t) {
    double diff = 0, base = 0, ms = 0;
    for (int i = 0; i < D; ++i) {
      diff += std::pow(h[t * D + i] - e[t * D + i], 2);
      base += std::pow(e[t * D + i], 2);
      ms += h[t * D + i] * h[t * D + i] / D;
      s += 2 * h[t * D + i];
      sq += 4 * h[t * D + i] * h[t * D + i];
    }
    flow_sum += std::sqrt(diff) / std::sqrt(base);
    factor_sum += 1 / std::sqrt(ms + eps);
    free_sum += 1 / std::sqrt(ms);
  }
  EXPECT_NEAR(flow.value(), flow_sum / N, 1e-12);
  EXPECT_NEAR(f.factor.value(), factor_sum / N, 1e-10);
  EXPECT_NEAR(f.eps_free.value(), free_sum / N, 1e-10);
  EXPECT_LT(f.factor.value(), f.eps_free.value());
  const double n = double(N) * D;
  EXPECT_NEAR(m.rms(), std::sqrt(sq / n), 1e-12);
  EXPECT_NEAR(m.stddev(), std::sqrt(sq / n - (s / n) * (s / n)), 1e-12);
}

TEST(MetricsHeatmap, DivergingColorsRunBlueWhiteRed) {
  std::uint8_t rgb[3];
  diverging_color(0.0, rgb);
  EXPECT_EQ(rgb[0], 255);
  EXPECT_EQ(rgb[1], 255);
  EXPECT_EQ(rgb[2], 255);
  diverging_color(1.0, rgb);
  EXPECT_GT(rgb[0], rgb[2]);
  diverging_color(-1.0, rgb);
  EXPECT_GT(rgb[2], rgb[0]);
  diverging_color(-7.0, rgb);  // clamped
  std::uint8_t lo[3];
  diverging_color(-1.0, lo);
  EXPECT_EQ(std::vector<int>(rgb, rgb + 3), std::vector<int>(lo, lo + 3));
}

}  // namespace
