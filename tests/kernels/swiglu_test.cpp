#include "cpu/swiglu.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

TEST(KernelSwiGlu, ForwardFloatMatchesDoubleReference) {
  const std::size_t n = 7 * 10;
  const auto a = kt::random_vector(n, 1, 0.1, 6.0), b = kt::random_vector(n, 2);
  std::vector<double> ref(n);
  for (std::size_t i = 0; i < n; ++i) {
    ref[i] = a[i] / (1.0 + std::exp(-a[i])) * b[i];
  }
  const auto af = kt::cast<float>(a), bf = kt::cast<float>(b);
  std::vector<float> h(n);
  gc::tree::cpu::swiglu_forward(h.data(), af.data(), bf.data(), std::int64_t(n));
  const double err = kt::rel_error(h, ref);
  kt::report("swiglu forward fp32", err);
  EXPECT_LT(err, kt::kForwardTol);
}

TEST(KernelSwiGlu, BackwardMatchesFiniteDifferences) {
  const std::size_t n = 5 * 11;
  auto a = kt::random_vector(n, 3, 0.1, 5.0), b = kt::random_vector(n, 4);
  const auto r = kt::random_vector(n, 5);
  auto loss = [&] {
    std::vector<double> h(n);
    gc::tree::cpu::swiglu_forward(h.data(), a.data(), b.data(), std::int64_t(n));
    return kt::dot(r, h);
  };
  std::vector<double> da(n), db(n);
  gc::tree::cpu::swiglu_backward(da.data(), db.data(), r.data(), a.data(), b.data(), std::int64_t(n));
  const double err_a = kt::rel_error(da, kt::numeric_grad(a, loss));
  const double err_b = kt::rel_error(db, kt::numeric_grad(b, loss));
  kt::report("swiglu backward da vs FD", err_a);
  kt::report("swiglu backward db vs FD", err_b);
  EXPECT_LT(err_a, kt::kGradTol);
  EXPECT_LT(err_b, kt::kGradTol);
}

}  // namespace
