#include "cpu/adamw.hpp"
#include "step_verdict.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::adamw_step;
using gc::tree::cpu::AdamWHyper;

// Scalar AdamW written from the formula (seed 003 eq. 1: decay uses the pre-update θ).
struct ScalarAdamW {
  double theta, m = 0.0, v = 0.0;
  void step(double grad, const AdamWHyper& hp) {
    m = hp.beta1 * m + (1 - hp.beta1) * grad;
    v = hp.beta2 * v + (1 - hp.beta2) * grad * grad;
    const double m_hat = m / (1 - std::pow(hp.beta1, hp.step));
    const double v_hat = v / (1 - std::pow(hp.beta2, hp.step));
    const double theta_hat = theta - hp.lr * m_hat / (std::sqrt(v_hat) + hp.eps);
    theta = theta_hat - hp.weight_decay * hp.lr * theta;
  }
};

// Cosine-ish lr sequence and per-step gradients; decay on.
AdamWHyper hyper(int t) { return AdamWHyper{1e-2 * (1.0 - 0.1 * t), 0.9, 0.95, 1e-8, 0.1, t}; }

TEST(KernelAdamW, OneAndSeveralStepsMatchScalarFormula) {
  const std::size_t n = 37;
  const auto theta0 = kt::random_vector(n, 1);
  std::vector<ScalarAdamW> ref;
  for (double t0 : theta0) {
    ref.push_back(ScalarAdamW{t0});
  }
  auto param = kt::cast<float>(theta0);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  for (int t = 1; t <= 5; ++t) {
    const auto grad = kt::random_vector(n, 10 + t, 1e-3, 2.0);
    const auto grad_f = kt::cast<float>(grad);
    adamw_step(param.data(), m.data(), v.data(), grad_f.data(), std::int64_t(n), hyper(t));
    std::vector<double> expected(n), moved(n);
    for (std::size_t i = 0; i < n; ++i) {
      ref[i].step(double(grad_f[i]), hyper(t));
      expected[i] = ref[i].theta;
    }
    const double err = kt::rel_error(param, expected);
    kt::report("adamw fp32 params after step " + std::to_string(t), err);
    EXPECT_LT(err, kt::kForwardTol);
    // The update itself (θ_t − θ_0) must also be accurate, not only θ.
    for (std::size_t i = 0; i < n; ++i) {
      moved[i] = expected[i] - theta0[i];
    }
    std::vector<double> got_moved(n);
    for (std::size_t i = 0; i < n; ++i) {
      got_moved[i] = double(param[i]) - theta0[i];
    }
    EXPECT_LT(kt::rel_error(got_moved, moved), 1e-4);
  }
}

TEST(KernelAdamW, FirstStepMovesEachWeightByLrTimesSignPlusDecay) {
  // At t = 1, m̂ = g and v̂ = g², so the Adam step is lr·sign(g) (up to ε).
  std::vector<double> param = {0.5, -0.25}, m(2, 0.0), v(2, 0.0);
  const std::vector<double> grad = {3.0, -1e-3};
  const AdamWHyper hp{0.01, 0.9, 0.999, 1e-12, 0.1, 1};
  adamw_step(param.data(), m.data(), v.data(), grad.data(), 2, hp);
  EXPECT_NEAR(param[0], 0.5 - 0.01 - 0.01 * 0.1 * 0.5, 1e-12);
  EXPECT_NEAR(param[1], -0.25 + 0.01 + 0.01 * 0.1 * 0.25, 1e-9);
}

TEST(KernelAdamW, GradScaleActsAsClipping) {
  const std::size_t n = 9;
  const auto grad = kt::random_vector(n, 20);
  std::vector<double> p1 = kt::random_vector(n, 21), p2 = p1, m1(n, 0.0), v1(n, 0.0), m2 = m1, v2 = v1;
  std::vector<double> scaled(n);
  for (std::size_t i = 0; i < n; ++i) {
    scaled[i] = 0.3 * grad[i];
  }
  adamw_step(p1.data(), m1.data(), v1.data(), grad.data(), std::int64_t(n), hyper(2), 0.3);
  adamw_step(p2.data(), m2.data(), v2.data(), scaled.data(), std::int64_t(n), hyper(2));
  EXPECT_LT(kt::rel_error(p1, p2), 1e-15);
  EXPECT_LT(kt::rel_error(m1, m2), 1e-15);
}

TEST(KernelAdamW, GlobalGradNormMatchesNaiveAndIgnoresThreadCount) {
  const std::int64_t big = 300001, small = 17;  // big spans several chunks
  const auto a = kt::cast<float>(kt::random_vector(std::size_t(big), 30));
  const auto b = kt::cast<float>(kt::random_vector(std::size_t(small), 31));
  double naive = 0.0;
  for (float x : a) {
    naive += double(x) * x;
  }
  for (float x : b) {
    naive += double(x) * x;
  }
  auto norm = [&] {
    const double squares[2] = {gc::tree::cpu::sum_of_squares(a.data(), big),
                               gc::tree::cpu::sum_of_squares(b.data(), small)};
    gc::tree::StepVerdict v;
    gc::tree::judge_step(v, 1.0, squares, 2, 0.0, 1);
    return v.grad_norm;
  };
  double one = 0.0, two = 0.0;
  kt::with_threads(1, [&] { one = norm(); });
  kt::with_threads(2, [&] { two = norm(); });
  EXPECT_EQ(one, two);
  const double err = std::fabs(one - std::sqrt(naive)) / std::sqrt(naive);
  kt::report("global grad norm vs naive", err);
  EXPECT_LT(err, 1e-12);
}

// The clip multiplier is torch's clip_grad_norm_'s; the first non-finite step is kept.
TEST(KernelAdamW, StepVerdictClipsAndRemembersTheFirstNonFiniteStep) {
  const auto judge = [](gc::tree::StepVerdict& v, double loss, double squares_sum, double max_norm, std::int64_t step) {
    const double squares[2] = {squares_sum * 0.25, squares_sum * 0.75};
    gc::tree::judge_step(v, loss, squares, 2, max_norm, step);
  };
  gc::tree::StepVerdict v;
  judge(v, 2.0, 0.25, 1.0, 1);
  EXPECT_EQ(v.grad_norm, 0.5);
  EXPECT_EQ(v.clip, 1.0);
  judge(v, 2.0, 16.0, 1.0, 2);
  EXPECT_NEAR(v.clip, 1.0 / (4.0 + 1e-6), 1e-15);
  judge(v, 2.0, 16.0, 0.0, 3);
  EXPECT_EQ(v.clip, 1.0) << "max_norm 0 disables clipping";
  EXPECT_EQ(v.stopped_at, 0);
  judge(v, std::nan(""), 1.0, 1.0, 4);
  EXPECT_EQ(v.stopped_at, 4) << "a NaN loss";
  judge(v, 2.0, HUGE_VAL, 1.0, 5);
  EXPECT_EQ(v.stopped_at, 4) << "the first non-finite step is kept";
  EXPECT_TRUE(std::isinf(v.grad_norm));
  gc::tree::StepVerdict w;
  judge(w, 2.0, HUGE_VAL, 1.0, 7);
  EXPECT_EQ(w.stopped_at, 7) << "an infinite gradient norm";
  EXPECT_EQ(w.stopped_loss, 2.0);
  EXPECT_TRUE(std::isinf(w.stopped_norm));
}

}  // namespace
