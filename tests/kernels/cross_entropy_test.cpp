#include "cpu/cross_entropy.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::cross_entropy_backward;
using gc::tree::cpu::cross_entropy_forward;

// Naive per-row loss −log softmax(α·logits)[target], with a plain (shifted) sum.
std::vector<double> reference_losses(const std::vector<double>& logits, const std::vector<std::int32_t>& targets, int N,
                                     int V, double alpha) {
  std::vector<double> losses(N);
  for (int n = 0; n < N; ++n) {
    const double shift = alpha * logits[std::size_t(n) * V];  // any shift is exact in real arithmetic
    double sum = 0.0;
    for (int v = 0; v < V; ++v) {
      sum += std::exp(alpha * logits[std::size_t(n) * V + v] - shift);
    }
    losses[n] = std::log(sum) + shift - alpha * logits[std::size_t(n) * V + targets[n]];
  }
  return losses;
}

TEST(KernelCrossEntropy, ForwardFloatMatchesDoubleReference) {
  const int N = 7, V = 13;
  const auto targets = kt::random_tokens(N, V, 1);
  for (double alpha : {1.0, 0.5}) {
    const auto logits = kt::random_vector(std::size_t(N) * V, 2, 0.1, 4.0);
    const auto ref = reference_losses(logits, targets, N, V, alpha);
    double ref_mean = 0.0;
    for (double l : ref) {
      ref_mean += l / N;
    }
    const auto lf = kt::cast<float>(logits);
    std::vector<float> losses(N), p_target(N);
    const double mean = cross_entropy_forward(losses.data(), p_target.data(), lf.data(), targets.data(), N, V, alpha);
    std::vector<double> ref_p(N);
    for (int n = 0; n < N; ++n) {
      ref_p[n] = std::exp(-ref[n]);
    }
    const double err = kt::rel_error(losses, ref), err_p = kt::rel_error(p_target, ref_p);
    kt::report(alpha == 1.0 ? "cross-entropy per-token fp32" : "cross-entropy per-token fp32 (scale 0.5)", err);
    kt::report("cross-entropy p(target) fp32", err_p);
    EXPECT_LT(err, kt::kForwardTol);
    EXPECT_LT(err_p, kt::kForwardTol);
    EXPECT_NEAR(mean, ref_mean, kt::kForwardTol * ref_mean);
  }
}

TEST(KernelCrossEntropy, LargeLogitsStayFiniteAndUniformLogitsGiveLogV) {
  const int N = 3, V = 50;
  std::vector<float> logits(std::size_t(N) * V, 3000.0f), losses(N);
  const std::vector<std::int32_t> targets = {0, 17, 49};
  logits[17 + V] = 3001.0f;
  const double mean = cross_entropy_forward(losses.data(), nullptr, logits.data(), targets.data(), N, V);
  EXPECT_NEAR(losses[0], std::log(50.0), 1e-5);
  EXPECT_NEAR(losses[1], std::log(49.0 + std::exp(1.0)) - 1.0, 1e-5);
  EXPECT_TRUE(std::isfinite(mean));
  std::vector<float> dlogits(logits.size());
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V);
  for (float g : dlogits) {
    EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(KernelCrossEntropy, BackwardMatchesFiniteDifferences) {
  const int N = 5, V = 11;
  const double alpha = 0.7, dloss = 1.3;
  auto logits = kt::random_vector(std::size_t(N) * V, 3, 0.1, 3.0);
  const auto targets = kt::random_tokens(N, V, 4);
  std::vector<double> losses(N);
  auto loss = [&] {
    return dloss * cross_entropy_forward(losses.data(), nullptr, logits.data(), targets.data(), N, V, alpha);
  };
  std::vector<double> dlogits(logits.size());
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, alpha, dloss);
  const double err = kt::rel_error(dlogits, kt::numeric_grad(logits, loss));
  kt::report("cross-entropy backward dlogits vs FD", err);
  EXPECT_LT(err, kt::kGradTol);

  // In place: dlogits may alias logits.
  std::vector<double> in_place = logits;
  cross_entropy_backward(in_place.data(), in_place.data(), targets.data(), N, V, alpha, dloss);
  EXPECT_EQ(in_place, dlogits);
}

// Ignored targets (the anchor task scores the last position only): the mean covers the
// scored rows alone, ignored rows give ℓ = p = 0 and no gradient, and the gradient still
// matches finite differences of that mean.
TEST(KernelCrossEntropy, IgnoredTargetsAreLeftOutOfLossAndGradient) {
  const int N = 9, V = 11;
  const double alpha = 0.8, dloss = 0.6;
  auto logits = kt::random_vector(std::size_t(N) * V, 5, 0.1, 3.0);
  auto targets = kt::random_tokens(N, V, 6);
  for (int n = 0; n < N; n += 3) targets[std::size_t(n)] = gc::rt::kIgnoreTarget;  // rows 0, 3, 6
  std::vector<double> losses(N), p_target(N);
  const double mean =
      cross_entropy_forward(losses.data(), p_target.data(), logits.data(), targets.data(), N, V, alpha);
  auto scored_targets = targets;
  for (auto& t : scored_targets) t = t < 0 ? 0 : t;
  const auto ref = reference_losses(logits, scored_targets, N, V, alpha);
  double expected = 0.0;
  for (int n = 0; n < N; ++n) {
    if (targets[std::size_t(n)] < 0) {
      EXPECT_EQ(losses[std::size_t(n)], 0.0) << "row " << n;
      EXPECT_EQ(p_target[std::size_t(n)], 0.0) << "row " << n;
      continue;
    }
    expected += ref[std::size_t(n)] / 6.0;  // 6 of the 9 rows are scored
  }
  EXPECT_NEAR(mean, expected, 1e-12 * expected);

  auto loss = [&] { return dloss * cross_entropy_forward(losses.data(), nullptr, logits.data(), targets.data(), N, V, alpha); };
  std::vector<double> dlogits(logits.size(), 7.0);  // overwritten, ignored rows with zeros
  cross_entropy_backward(dlogits.data(), logits.data(), targets.data(), N, V, alpha, dloss);
  for (int n = 0; n < N; n += 3) {
    for (int v = 0; v < V; ++v) EXPECT_EQ(dlogits[std::size_t(n) * V + v], 0.0) << "row " << n;
  }
  const double err = kt::rel_error(dlogits, kt::numeric_grad(logits, loss));
  kt::report("cross-entropy backward, ignored targets, vs FD", err);
  EXPECT_LT(err, kt::kGradTol);

  // Nothing scored: loss 0 and no gradient (not 0/0).
  const std::vector<std::int32_t> none(N, gc::rt::kIgnoreTarget);
  EXPECT_EQ(cross_entropy_forward(losses.data(), nullptr, logits.data(), none.data(), N, V, alpha), 0.0);
  cross_entropy_backward(dlogits.data(), logits.data(), none.data(), N, V, alpha, dloss);
  for (double g : dlogits) EXPECT_EQ(g, 0.0);
}

}  // namespace
