#include "cpu/linear.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::linear_backward;
using gc::tree::cpu::linear_forward;

// Naive y = x W^T + b in double.
std::vector<double> reference_linear(const std::vector<double>& x, const std::vector<double>& W,
                                     const std::vector<double>* b, int N, int in, int out) {
  std::vector<double> y(std::size_t(N) * out);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < out; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int i = 0; i < in; ++i) {
        s += x[n * in + i] * W[o * in + i];
      }
      y[n * out + o] = s;
    }
  }
  return y;
}

TEST(KernelLinear, ForwardFloatMatchesDoubleReference) {
  const int N = 7, in = 10, out = 13;
  const auto x = kt::random_vector(N * in, 1), W = kt::random_vector(out * in, 2), b = kt::random_vector(out, 3);
  for (bool with_bias : {false, true}) {
    const auto ref = reference_linear(x, W, with_bias ? &b : nullptr, N, in, out);
    const auto xf = kt::cast<float>(x), Wf = kt::cast<float>(W), bf = kt::cast<float>(b);
    std::vector<float> y(ref.size(), -9.0f);
    linear_forward(y.data(), xf.data(), Wf.data(), with_bias ? bf.data() : nullptr, N, in, out);
    const double err = kt::rel_error(y, ref);
    kt::report(with_bias ? "linear forward fp32 (bias)" : "linear forward fp32", err);
    EXPECT_LT(err, kt::kForwardTol);
  }
}

TEST(KernelLinear, BackwardMatchesFiniteDifferences) {
  const int N = 5, in = 6, out = 9;
  auto x = kt::random_vector(N * in, 11), W = kt::random_vector(out * in, 12), b = kt::random_vector(out, 13);
  const auto r = kt::random_vector(N * out, 14);
  auto loss = [&] {
    std::vector<double> y(std::size_t(N) * out);
    linear_forward(y.data(), x.data(), W.data(), b.data(), N, in, out);
    return kt::dot(r, y);
  };
  // Parameter grads accumulate: start from a non-zero prior and compare the increment.
  const auto dW_prior = kt::random_vector(W.size(), 15), db_prior = kt::random_vector(b.size(), 16);
  std::vector<double> dx(x.size()), dW = dW_prior, db = db_prior;
  linear_backward(dx.data(), dW.data(), db.data(), r.data(), x.data(), W.data(), N, in, out);

  const double err_x = kt::rel_error(dx, kt::numeric_grad(x, loss));
  const double err_W = kt::rel_error(kt::minus(dW, dW_prior), kt::numeric_grad(W, loss));
  const double err_b = kt::rel_error(kt::minus(db, db_prior), kt::numeric_grad(b, loss));
  kt::report("linear backward dx vs FD", err_x);
  kt::report("linear backward dW vs FD", err_W);
  kt::report("linear backward db vs FD", err_b);
  EXPECT_LT(err_x, kt::kGradTol);
  EXPECT_LT(err_W, kt::kGradTol);
  EXPECT_LT(err_b, kt::kGradTol);
}

TEST(KernelLinear, AccumulateDxAddsToExistingGradient) {
  const int N = 3, in = 4, out = 5;
  const auto dy = kt::random_vector(N * out, 21), W = kt::random_vector(out * in, 22);
  const auto prior = kt::random_vector(N * in, 23);
  std::vector<double> fresh(prior.size()), acc = prior;
  gc::tree::cpu::linear_backward_input(fresh.data(), dy.data(), W.data(), N, in, out);
  gc::tree::cpu::linear_backward_input(acc.data(), dy.data(), W.data(), N, in, out, /*accumulate_dx=*/true);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    EXPECT_NEAR(acc[i], prior[i] + fresh[i], 1e-12);
  }
}

TEST(KernelLinear, PlainNullptrMeansNoBiasAndNoInputGradient) {
  const int N = 2, in = 3, out = 4;
  const auto x = kt::random_vector(N * in, 31), W = kt::random_vector(out * in, 32);
  std::vector<double> y(std::size_t(N) * out), dW(W.size(), 0.0);
  linear_forward(y.data(), x.data(), W.data(), nullptr, N, in, out);
  EXPECT_LT(kt::rel_error(y, reference_linear(x, W, nullptr, N, in, out)), 1e-14);
  linear_backward(nullptr, dW.data(), nullptr, y.data(), x.data(), W.data(), N, in, out);
  std::vector<double> dW_ref(W.size(), 0.0);
  gc::tree::cpu::linear_backward_params(dW_ref.data(), nullptr, y.data(), x.data(), N, in, out);
  EXPECT_EQ(dW, dW_ref);
}

}  // namespace

namespace {

// The portable GEMM (trees built without OpenBLAS) against cblas, for every
// transpose combination, with strides wider than the matrices and beta ≠ 0.
TEST(KernelLinear, PortableGemmMatchesCblasForEveryTransposeAndBeta) {
  const int M = 9, N = 11, K = 13, pad = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
      const auto A = kt::random_vector(std::size_t(ta ? K : M) * lda, 11);
      const auto B = kt::random_vector(std::size_t(tb ? N : K) * ldb, 12);
      const auto C0 = kt::random_vector(std::size_t(M) * ldc, 13);
      for (double beta : {0.0, 0.5}) {
        std::vector<double> want = C0, got = C0;
        gc::tree::core::blas::gemm(ta, tb, M, N, K, 1.5, A.data(), lda, B.data(), ldb, beta, want.data(), ldc);
        gc::tree::core::blas::portable_gemm(ta, tb, M, N, K, 1.5, A.data(), lda, B.data(), ldb, beta, got.data(), ldc);
        EXPECT_LT(kt::rel_error(got, want), 1e-13) << "trans_a " << ta << " trans_b " << tb << " beta " << beta;
      }
    }
  }
}

}  // namespace
