#include "cpu/rmsnorm.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::rmsnorm_backward;
using gc::tree::cpu::rmsnorm_forward;

// Naive seed 000 eq. 2 in double.
std::vector<double> reference_rmsnorm(const std::vector<double>& x, const std::vector<double>& g, int rows, int dim,
                                      double eps) {
  std::vector<double> y(x.size());
  for (int r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int j = 0; j < dim; ++j) {
      ms += x[r * dim + j] * x[r * dim + j] / dim;
    }
    for (int j = 0; j < dim; ++j) {
      y[r * dim + j] = g[j] * x[r * dim + j] / std::sqrt(ms + eps);
    }
  }
  return y;
}

double rms(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) {
    s += double(x) * x;
  }
  return std::sqrt(s / v.size());
}

TEST(KernelRmsNorm, ForwardFloatMatchesDoubleReference) {
  const int rows = 7, dim = 10;
  const double eps = 1e-5;
  const auto x = kt::random_vector(rows * dim, 1), g = kt::random_vector(dim, 2);
  const auto ref = reference_rmsnorm(x, g, rows, dim, eps);
  const auto xf = kt::cast<float>(x), gf = kt::cast<float>(g);
  std::vector<float> y(ref.size()), rstd(rows);
  rmsnorm_forward(y.data(), rstd.data(), xf.data(), gf.data(), rows, dim, eps);
  const double err = kt::rel_error(y, ref);
  kt::report("rmsnorm forward fp32", err);
  EXPECT_LT(err, kt::kForwardTol);
}

TEST(KernelRmsNorm, BackwardMatchesFiniteDifferences) {
  const int rows = 5, dim = 10;
  const double eps = 1e-5;
  auto x = kt::random_vector(rows * dim, 3), g = kt::random_vector(dim, 4);
  const auto r = kt::random_vector(rows * dim, 5);
  std::vector<double> y(x.size()), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), rows, dim, eps);
    return kt::dot(r, y);
  };
  loss();  // fills rstd for the backward
  const auto dx_prior = kt::random_vector(x.size(), 6), dg_prior = kt::random_vector(dim, 7);
  std::vector<double> dx = dx_prior, dg = dg_prior;
  rmsnorm_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), rows, dim,
                   /*accumulate_dx=*/true);
  const double err_x = kt::rel_error(kt::minus(dx, dx_prior), kt::numeric_grad(x, loss));
  const double err_g = kt::rel_error(kt::minus(dg, dg_prior), kt::numeric_grad(g, loss));
  kt::report("rmsnorm backward dx vs FD", err_x);
  kt::report("rmsnorm backward dg vs FD", err_g);
  EXPECT_LT(err_x, kt::kGradTol);
  EXPECT_LT(err_g, kt::kGradTol);
}

// Seed 000 §4.6: with hidden states of RMS 1e-4, ε = 1e-5 dominates mean(x²) = 1e-8 and the
// output RMS collapses to sqrt(1e-8 / (1e-5 + 1e-8)) ≈ 0.0316; with ε = 1e-12 it stays ≈ 1.
TEST(KernelRmsNorm, TinyEpsilonKeepsUnitRmsForTinyInputs) {
  const int rows = 16, dim = 64;
  const auto xf = kt::cast<float>(kt::random_normal(rows * dim, 8, 1e-4));
  std::vector<float> g(dim, 1.0f), y(xf.size()), rstd(rows);
  double input_ms = 0.0;
  for (float v : xf) {
    input_ms += double(v) * v / xf.size();
  }

  rmsnorm_forward(y.data(), rstd.data(), xf.data(), g.data(), rows, dim, 1e-12);
  const double rms_small_eps = rms(y);
  kt::report("rmsnorm eps=1e-12, RMS 1e-4: |RMS(y) - 1|", std::fabs(rms_small_eps - 1.0));
  EXPECT_NEAR(rms_small_eps, 1.0, 1e-3);

  rmsnorm_forward(y.data(), rstd.data(), xf.data(), g.data(), rows, dim, 1e-5);
  EXPECT_NEAR(rms(y), std::sqrt(input_ms / (input_ms + 1e-5)), 1e-3);
  EXPECT_LT(rms(y), 0.05);

  // RMS 1e-6: mean(x²) ≈ ε, so ε = 1e-12 still changes the output (RMS ≈ 1/sqrt(2)); the fp32
  // kernel agrees with the float64 formula.
  const auto tiny = kt::random_normal(rows * dim, 9, 1e-6);
  const auto tiny_f = kt::cast<float>(tiny);
  const std::vector<double> ones(dim, 1.0);
  rmsnorm_forward(y.data(), rstd.data(), tiny_f.data(), g.data(), rows, dim, 1e-12);
  const double err = kt::rel_error(y, reference_rmsnorm(kt::cast<double>(tiny_f), ones, rows, dim, 1e-12));
  kt::report("rmsnorm forward fp32, RMS 1e-6, eps=1e-12", err);
  EXPECT_LT(err, kt::kForwardTol);
  EXPECT_GT(rms(y), 0.6);
  EXPECT_LT(rms(y), 0.8);
}

// γ = 1, ε = 1e-12 hazard (DESIGN §4): the Jacobian is ~1/RMS(x) large, yet the fp32 backward
// still agrees with the float64 backward.
TEST(KernelRmsNorm, BackwardFloatMatchesDoubleForTinyInputsAndEpsilon) {
  const int rows = 9, dim = 64;
  const double eps = 1e-12;
  const auto x = kt::random_normal(rows * dim, 16, 1e-4), g = kt::random_vector(dim, 17);
  const auto dy = kt::random_vector(rows * dim, 18);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const auto xt = kt::cast<T>(x), gt = kt::cast<T>(g), dyt = kt::cast<T>(dy);
    std::vector<T> y(xt.size()), rstd(rows), dx(xt.size()), dg(dim, T(0));
    rmsnorm_forward(y.data(), rstd.data(), xt.data(), gt.data(), rows, dim, eps);
    rmsnorm_backward(dx.data(), dg.data(), dyt.data(), xt.data(), gt.data(), rstd.data(), rows, dim);
    return std::vector<std::vector<T>>{dx, dg};
  };
  const auto ref = run(0.0);
  const auto got = run(0.0f);
  const double err_x = kt::rel_error(got[0], ref[0]), err_g = kt::rel_error(got[1], ref[1]);
  kt::report("rmsnorm backward fp32 dx vs fp64 (eps=1e-12)", err_x);
  kt::report("rmsnorm backward fp32 dg vs fp64 (eps=1e-12)", err_g);
  EXPECT_LT(err_x, kt::kForwardTol);
  EXPECT_LT(err_g, kt::kForwardTol);
}

TEST(KernelRmsNorm, QkNormOverHeadVectorsMatchesFiniteDifferences) {
  const int N = 7, heads = 4, hd = 6;
  const double eps = 1e-6;
  auto x = kt::random_vector(N * heads * hd, 10), g = kt::random_vector(hd, 11);
  const auto r = kt::random_vector(x.size(), 12);
  std::vector<double> y(x.size()), rstd(N * heads);
  auto loss = [&] {
    gc::tree::cpu::rmsnorm_heads_forward(y.data(), rstd.data(), x.data(), g.data(), N, heads, hd, eps);
    return kt::dot(r, y);
  };
  loss();
  EXPECT_LT(kt::rel_error(y, reference_rmsnorm(x, g, N * heads, hd, eps)), 1e-14);
  std::vector<double> dx(x.size()), dg(hd, 0.0);
  gc::tree::cpu::rmsnorm_heads_backward(dx.data(), dg.data(), r.data(), x.data(), g.data(), rstd.data(), N, heads, hd);
  const double err_x = kt::rel_error(dx, kt::numeric_grad(x, loss));
  const double err_g = kt::rel_error(dg, kt::numeric_grad(g, loss));
  kt::report("qk-norm backward dx vs FD", err_x);
  kt::report("qk-norm backward dg vs FD", err_g);
  EXPECT_LT(err_x, kt::kGradTol);
  EXPECT_LT(err_g, kt::kGradTol);
}

// QK-norm reading the heads inside rows of the stacked Q/K/V projection: the same numbers as
// the dense form on the gathered heads; dx lands in the stacked rows and nothing else changes.
TEST(KernelRmsNorm, QkNormInsideStackedRowsMatchesTheDenseForm) {
  const int N = 5, heads = 3, hd = 8, width = 7 * hd, offset = 2 * hd;  // heads at [16, 40) of 56
  const double eps = 1e-6;
  const auto stacked = kt::random_vector(std::size_t(N) * width, 21);
  const auto g = kt::random_vector(hd, 22), dy = kt::random_vector(std::size_t(N) * heads * hd, 23);
  std::vector<double> dense(std::size_t(N) * heads * hd);
  for (int n = 0; n < N; ++n) {
    std::copy_n(&stacked[std::size_t(n) * width + offset], heads * hd, &dense[std::size_t(n) * heads * hd]);
  }
  std::vector<double> y(dense.size()), y_ref(dense.size()), rstd(std::size_t(N) * heads), rstd_ref(rstd.size());
  gc::tree::cpu::rmsnorm_heads_forward(y.data(), rstd.data(), stacked.data() + offset, g.data(), N, heads, hd, eps,
                                       width);
  gc::tree::cpu::rmsnorm_heads_forward(y_ref.data(), rstd_ref.data(), dense.data(), g.data(), N, heads, hd, eps);
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(rstd, rstd_ref);
  std::vector<double> dstacked(stacked.size(), 7.0), dg(hd, 0.0), dx_ref(dense.size()), dg_ref(hd, 0.0);
  gc::tree::cpu::rmsnorm_heads_backward(dstacked.data() + offset, dg.data(), dy.data(), stacked.data() + offset,
                                        g.data(), rstd.data(), N, heads, hd, false, width);
  gc::tree::cpu::rmsnorm_heads_backward(dx_ref.data(), dg_ref.data(), dy.data(), dense.data(), g.data(), rstd.data(), N,
                                        heads, hd);
  EXPECT_EQ(dg, dg_ref);
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < width; ++j) {
      const double got = dstacked[std::size_t(n) * width + j];
      const bool inside = j >= offset && j < offset + heads * hd;
      EXPECT_EQ(got, inside ? dx_ref[std::size_t(n) * heads * hd + (j - offset)] : 7.0) << "row " << n << " col " << j;
    }
  }
}

TEST(KernelRmsNorm, GainGradientIsIndependentOfThreadCount) {
  const int rows = 301, dim = 100;
  const auto x = kt::cast<float>(kt::random_vector(rows * dim, 13));
  const auto dy = kt::cast<float>(kt::random_vector(rows * dim, 14));
  const auto g = kt::cast<float>(kt::random_vector(dim, 15));
  std::vector<float> y(x.size()), rstd(rows);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), g.data(), rows, dim, 1e-5);
  std::vector<float> dx1(x.size()), dx2(x.size()), dg1(dim, 0.0f), dg2(dim, 0.0f);
  kt::with_threads(
      1, [&] { rmsnorm_backward(dx1.data(), dg1.data(), dy.data(), x.data(), g.data(), rstd.data(), rows, dim); });
  kt::with_threads(
      2, [&] { rmsnorm_backward(dx2.data(), dg2.data(), dy.data(), x.data(), g.data(), rstd.data(), rows, dim); });
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dg1, dg2);
}

}  // namespace
