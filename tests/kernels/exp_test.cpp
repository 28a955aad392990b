// cpu/exp.hpp's exp_fixed against the C library's exp: a few ulp on the whole range, the edge
// cases exp has (0 → 1, −∞ → 0, NaN → NaN, gradual underflow), and one result per input.
#include "cpu/exp.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

using gc::tree::cpu::exp_fixed;

double ulps(double a, double b) { return std::abs(a - b) / (std::nextafter(std::abs(b), INFINITY) - std::abs(b)); }

TEST(KernelExp, WithinThreeUlpOfExpOverTheNormalRange) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> wide(-708.0, 709.7), narrow(-20.0, 20.0);
  double worst = 0.0, at = 0.0;
  for (int i = 0; i < 400000; ++i) {
    const double x = i % 2 ? wide(rng) : narrow(rng);
    const double u = ulps(exp_fixed(x), std::exp(x));
    if (u > worst) worst = u, at = x;
  }
  EXPECT_LE(worst, 3.0) << "at x = " << at;
  for (double x : {-1e-300, 1e-300, 1e-10, -1e-10, 0.5 * std::log(2.0), -0.5 * std::log(2.0), 1.0, -1.0, 700.0}) {
    EXPECT_LE(ulps(exp_fixed(x), std::exp(x)), 3.0) << x;
  }
}

TEST(KernelExp, EdgesBehaveAsExp) {
  EXPECT_EQ(exp_fixed(0.0), 1.0);
  EXPECT_EQ(exp_fixed(-INFINITY), 0.0);
  EXPECT_EQ(exp_fixed(-2000.0), 0.0);
  EXPECT_TRUE(std::isnan(exp_fixed(std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::isfinite(exp_fixed(1000.0)));  // clamped: 1.8e308, not ∞
  EXPECT_GT(exp_fixed(1000.0), 1e308);
  // Subnormal results, gradually: within a few of the smallest steps of exp's.
  for (double x = -744.0; x < -708.0; x += 0.37) {
    EXPECT_NEAR(exp_fixed(x), std::exp(x), 4 * std::exp(x) * 1e-15 + 4 * std::numeric_limits<double>::denorm_min()) << x;
  }
}

// A loop over an array (vectorized by the compiler) gives each element the bits of the scalar call.
TEST(KernelExp, ALoopGivesTheScalarResults) {
  std::vector<double> x(1027), y(x.size());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-50.0, 50.0);
  for (double& v : x) v = u(rng);
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = exp_fixed(x[i]);
  for (std::size_t i = 0; i < x.size(); ++i) {
    volatile double xi = x[i];  // a scalar call the vectorizer cannot join
    ASSERT_EQ(y[i], exp_fixed(xi)) << i;
  }
}

}  // namespace
