#include "cpu/moe.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::MoeShape;

// Naive scores of one token.
std::vector<double> naive_scores(const double* r, int E, bool sigmoid) {
  std::vector<double> s(std::size_t(E), 0.0);
  if (sigmoid) {
    for (int e = 0; e < E; ++e) s[std::size_t(e)] = 1.0 / (1.0 + std::exp(-r[e]));
    return s;
  }
  double sum = 0.0;
  for (int e = 0; e < E; ++e) sum += std::exp(r[e]);
  for (int e = 0; e < E; ++e) s[std::size_t(e)] = std::exp(r[e]) / sum;
  return s;
}

TEST(KernelMoe, RouteSelectsTheLargestScoresWithTiesToTheLowerIndex) {
  const int E = 6, N = 3;
  for (bool sigmoid : {false, true}) {
    const MoeShape m{E, 3, sigmoid, false};
    // Token 0 has a three-way tie (experts 1, 3, 4) for the last two places.
    std::vector<double> r = {0.1, 0.5, -1.0, 0.5, 0.5, 0.9,  //
                             1.0, 2.0, 3.0, 4.0, 5.0, 6.0,   //
                             -0.3, 0.7, 0.2, 0.9, -2.0, 0.4};
    std::vector<double> s(std::size_t(N * E)), w(std::size_t(N * 3));
    std::vector<std::int32_t> expert(std::size_t(N * 3));
    gc::tree::cpu::moe_route_forward(s.data(), expert.data(), w.data(), r.data(), static_cast<const float*>(nullptr), N,
                                     m);
    EXPECT_EQ(std::vector<std::int32_t>(expert.begin(), expert.begin() + 3), (std::vector<std::int32_t>{5, 1, 3}));
    EXPECT_EQ(std::vector<std::int32_t>(expert.begin() + 3, expert.begin() + 6), (std::vector<std::int32_t>{5, 4, 3}));
    EXPECT_EQ(std::vector<std::int32_t>(expert.begin() + 6, expert.end()), (std::vector<std::int32_t>{3, 1, 5}));
    for (int t = 0; t < N; ++t) {
      const auto ref = naive_scores(r.data() + t * E, E, sigmoid);
      for (int e = 0; e < E; ++e) EXPECT_NEAR(s[std::size_t(t * E + e)], ref[std::size_t(e)], 1e-15);
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(w[std::size_t(t * 3 + j)], s[std::size_t(t * E + expert[std::size_t(t * 3 + j)])]);
      }
    }
  }
}

TEST(KernelMoe, SelectionBiasOnlySelectsAndNormalizedWeightsSumToOne) {
  const int E = 4;
  const MoeShape m{E, 2, false, true};
  const std::vector<double> r = {2.0, 1.0, 0.0, -1.0};
  const std::vector<float> bias = {0.0f, 0.0f, 0.0f, 1.0f};  // lifts expert 3 to the top
  std::vector<double> s(4), w(2);
  std::vector<std::int32_t> expert(2);
  gc::tree::cpu::moe_route_forward(s.data(), expert.data(), w.data(), r.data(), bias.data(), 1, m);
  EXPECT_EQ(expert, (std::vector<std::int32_t>{3, 0}));
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-15);
  EXPECT_NEAR(w[0], s[3] / (s[3] + s[0]), 1e-15);  // the weights come from the scores, not the bias
}

TEST(KernelMoe, DispatchIsAStableCountingSortAndCombineMatchesNaive) {
  const int E = 5, k = 2, N = 7, D = 3;
  const std::vector<std::int32_t> expert = {4, 0, 1, 4, 0, 2, 4, 1, 0, 3, 1, 0, 4, 2};  // N·k, each token distinct
  std::vector<std::int32_t> order(N * k), position(N * k);
  std::vector<std::int64_t> offsets(E + 1);
  gc::tree::cpu::moe_dispatch(order.data(), position.data(), offsets.data(), expert.data(), N, E, k);
  EXPECT_EQ(offsets, (std::vector<std::int64_t>{0, 4, 7, 9, 10, 14}));
  for (int e = 0; e < E; ++e) {
    for (std::int64_t p = offsets[std::size_t(e)]; p < offsets[std::size_t(e) + 1]; ++p) {
      EXPECT_EQ(expert[std::size_t(order[std::size_t(p)])], e);
      if (p > offsets[std::size_t(e)]) {
        EXPECT_LT(order[std::size_t(p) - 1], order[std::size_t(p)]);  // token order
      }
    }
  }
  for (int a = 0; a < N * k; ++a) EXPECT_EQ(order[std::size_t(position[std::size_t(a)])], a);

  const auto x = kt::random_normal(std::size_t(N * D), 7);
  std::vector<double> xs(std::size_t(N * k * D));
  gc::tree::cpu::moe_gather(xs.data(), x.data(), order.data(), N * k, D, k);
  // "Experts": y = (e + 1)·x, so the combine can be checked in closed form.
  std::vector<double> ys(xs.size());
  for (int p = 0; p < N * k; ++p) {
    for (int c = 0; c < D; ++c) {
      ys[std::size_t(p * D + c)] = (expert[std::size_t(order[std::size_t(p)])] + 1) * xs[std::size_t(p * D + c)];
    }
  }
  const auto w = kt::random_vector(std::size_t(N * k), 8);
  std::vector<double> out(std::size_t(N * D), 5.0);
  gc::tree::cpu::moe_combine(out.data(), ys.data(), w.data(), position.data(), N, D, k, false);
  for (int t = 0; t < N; ++t) {
    for (int c = 0; c < D; ++c) {
      double ref = 0.0;
      for (int j = 0; j < k; ++j) ref += w[std::size_t(t * k + j)] * (expert[std::size_t(t * k + j)] + 1) * x[std::size_t(t * D + c)];
      EXPECT_NEAR(out[std::size_t(t * D + c)], ref, 1e-12);
    }
  }
}

// Loss = Σ r·combine(ys) through gather/combine: the backward pair against finite differences,
// dropless and with a capacity of 1 per expert and sequence of 2 rows (two assignments dropped:
// no row, no output, zero dweight).
TEST(KernelMoe, CombineAndScatterBackwardMatchFiniteDifferences) {
  const int E = 3, k = 2, N = 4, D = 3, seq_len = 2;
  const std::vector<std::int32_t> selected = {2, 0, 1, 2, 0, 1, 2, 1};
  for (int capacity : {0, 1}) {
    std::vector<std::int32_t> expert = selected, order(N * k), position(N * k);
    std::vector<std::int64_t> offsets(E + 1), dropped(std::size_t(N / seq_len * E));
    if (capacity > 0) {
      gc::tree::cpu::moe_apply_capacity(expert.data(), dropped.data(), selected.data(), N, seq_len, E, k, capacity);
      EXPECT_EQ(expert, (std::vector<std::int32_t>{2, 0, 1, -1, 0, 1, 2, -1}));
      EXPECT_EQ(dropped, (std::vector<std::int64_t>{0, 0, 1, 0, 1, 0}));
    }
    gc::tree::cpu::moe_dispatch(order.data(), position.data(), offsets.data(), expert.data(), N, E, k);
    const std::int64_t rows = offsets[E];
    EXPECT_EQ(rows, capacity > 0 ? 6 : 8);
    if (capacity > 0) {
      EXPECT_EQ(position[3], -1);
    }
    auto x = kt::random_normal(std::size_t(N * D), 11);
    auto w = kt::random_vector(std::size_t(N * k), 12);
    const auto r = kt::random_normal(std::size_t(N * D), 13);
    // y_p = x_p² (elementwise; a nonlinear "expert").
    auto loss = [&] {
      std::vector<double> xs(std::size_t(rows * D)), out(std::size_t(N * D));
      gc::tree::cpu::moe_gather(xs.data(), x.data(), order.data(), rows, D, k);
      for (double& v : xs) v = v * v;
      gc::tree::cpu::moe_combine(out.data(), xs.data(), w.data(), position.data(), N, D, k, false);
      return kt::dot(r, out);
    };
    std::vector<double> xs(std::size_t(rows * D)), ys(xs.size()), dys(xs.size()), dweight(std::size_t(N * k), 9.0);
    gc::tree::cpu::moe_gather(xs.data(), x.data(), order.data(), rows, D, k);
    for (std::size_t i = 0; i < xs.size(); ++i) ys[i] = xs[i] * xs[i];
    gc::tree::cpu::moe_combine_backward(dys.data(), dweight.data(), r.data(), ys.data(), w.data(), order.data(), rows,
                                        N * k, D, k);
    for (std::size_t i = 0; i < xs.size(); ++i) dys[i] *= 2.0 * xs[i];
    std::vector<double> dx(std::size_t(N * D), 0.0);
    gc::tree::cpu::moe_scatter_add(dx.data(), dys.data(), position.data(), N, D, k);
    EXPECT_LT(kt::rel_error(dx, kt::numeric_grad(x, loss)), kt::kGradTol) << capacity;
    EXPECT_LT(kt::rel_error(dweight, kt::numeric_grad(w, loss)), kt::kGradTol) << capacity;
    if (capacity > 0) {
      EXPECT_EQ(dweight[3], 0.0);
    }
  }
}

// dL/dlogits through scores, (normalized) weights, the balancing losses' P term (one group of
// rows, or groups of two rows: the sequence-wise loss) and the z-loss, for both scorings (the
// z-loss for softmax only), against finite differences with the selection held fixed (no
// near-ties by construction: well-separated logits).
TEST(KernelMoe, RouteBackwardMatchesFiniteDifferences) {
  const int E = 5, k = 2, N = 4;
  for (bool sigmoid : {false, true}) {
    for (bool norm : {false, true}) {
      for (int aux_rows : {0, N, 2}) {  // 0: no balancing loss
        for (bool z : {false, true}) {
          if (z && sigmoid) continue;
          const MoeShape m{E, k, sigmoid, norm};
          std::vector<double> logits = {0.0, 0.6, 1.2, 1.8, 2.4, 2.1, -0.5, 0.4, 1.3, -1.0,
                                        0.9, 1.7, -0.2, 0.3, 2.6, 1.1, -0.7, 2.2, 0.2, -1.4};
          const int groups = aux_rows > 0 ? N / aux_rows : 1;
          const auto dw_coef = kt::random_normal(std::size_t(N * k), 21);
          const auto a = kt::random_normal(std::size_t(groups * E), 22);  // dL/dP_ge
          const double z_coef = 0.7;
          std::vector<std::int32_t> fixed(std::size_t(N * k));
          {
            std::vector<double> s(std::size_t(N * E)), w(std::size_t(N * k));
            gc::tree::cpu::moe_route_forward(s.data(), fixed.data(), w.data(), logits.data(),
                                             static_cast<const float*>(nullptr), N, m);
          }
          // L = Σ dw_coef·w + Σ_ge a_ge·P_ge + z_coef · Σ_t lse_t², P_ge = mean over group g of p_t[e].
          auto loss = [&] {
            std::vector<double> s(std::size_t(N * E)), w(std::size_t(N * k)), P(std::size_t(groups * E)),
                lse(static_cast<std::size_t>(N));
            std::vector<std::int32_t> sel(std::size_t(N * k));
            gc::tree::cpu::moe_route_forward(s.data(), sel.data(), w.data(), logits.data(),
                                             static_cast<const float*>(nullptr), N, m);
            EXPECT_EQ(sel, fixed);
            double L = kt::dot(dw_coef, w);
            if (aux_rows > 0) {
              gc::tree::cpu::moe_mean_probs(P.data(), s.data(), N, aux_rows, m);
              L += kt::dot(a, P);
            }
            if (z) L += z_coef * gc::tree::cpu::moe_router_lse(lse.data(), logits.data(), N, E);
            return L;
          };
          std::vector<double> s(std::size_t(N * E)), w(std::size_t(N * k)), dlogits(std::size_t(N * E)),
              lse(static_cast<std::size_t>(N));
          std::vector<std::int32_t> sel(std::size_t(N * k));
          gc::tree::cpu::moe_route_forward(s.data(), sel.data(), w.data(), logits.data(),
                                           static_cast<const float*>(nullptr), N, m);
          gc::tree::cpu::moe_router_lse(lse.data(), logits.data(), N, E);
          std::vector<double> aux_grad(std::size_t(groups * E));
          for (std::size_t i = 0; i < aux_grad.size(); ++i) aux_grad[i] = a[i] / (aux_rows > 0 ? aux_rows : N);
          gc::tree::cpu::moe_route_backward(dlogits.data(), dw_coef.data(), s.data(), sel.data(), w.data(),
                                            aux_rows > 0 ? aux_grad.data() : nullptr, aux_rows > 0 ? aux_rows : N,
                                            z ? lse.data() : nullptr, 2.0 * z_coef, N, m);
          const double err = kt::rel_error(dlogits, kt::numeric_grad(logits, loss));
          kt::report(std::string("moe route backward") + (sigmoid ? " sigmoid" : " softmax") + (norm ? " norm" : "") +
                         (aux_rows > 0 ? " aux/" + std::to_string(aux_rows) : "") + (z ? " z" : ""),
                     err);
          EXPECT_LT(err, kt::kGradTol) << sigmoid << norm << aux_rows << z;
        }
      }
    }
  }
}

// The sequence-wise pieces: counts per group of rows, P per group (whose mean over groups is the
// whole batch's P), and lse with its Σ lse² against a direct evaluation.
TEST(KernelMoe, GroupCountsMeanProbsAndLseAgreeWithDirectSums) {
  const int E = 6, k = 2, N = 12, rows = 4;
  const MoeShape m{E, k, false, false};
  const auto logits = kt::random_normal(std::size_t(N * E), 41, 1.5);
  std::vector<double> s(std::size_t(N * E)), w(std::size_t(N * k)), whole(static_cast<std::size_t>(E)),
      grouped(std::size_t(N / rows * E)), lse(static_cast<std::size_t>(N));
  std::vector<std::int32_t> sel(std::size_t(N * k));
  gc::tree::cpu::moe_route_forward(s.data(), sel.data(), w.data(), logits.data(), static_cast<const float*>(nullptr), N,
                                   m);
  std::vector<std::int64_t> counts(std::size_t(N / rows * E));
  gc::tree::cpu::moe_group_counts(counts.data(), sel.data(), N, rows, E, k);
  for (int g = 0; g < N / rows; ++g) {
    std::int64_t total = 0;
    for (int e = 0; e < E; ++e) {
      std::int64_t direct = 0;
      for (int t = g * rows; t < (g + 1) * rows; ++t) {
        for (int j = 0; j < k; ++j) direct += sel[std::size_t(t * k + j)] == e ? 1 : 0;
      }
      EXPECT_EQ(counts[std::size_t(g * E + e)], direct) << g << " " << e;
      total += direct;
    }
    EXPECT_EQ(total, rows * k);
  }
  gc::tree::cpu::moe_mean_probs(whole.data(), s.data(), N, N, m);
  gc::tree::cpu::moe_mean_probs(grouped.data(), s.data(), N, rows, m);
  for (int e = 0; e < E; ++e) {
    double mean = 0.0;
    for (int g = 0; g < N / rows; ++g) mean += grouped[std::size_t(g * E + e)] / (N / rows);
    EXPECT_NEAR(mean, whole[std::size_t(e)], 1e-14);
  }
  const double squares = gc::tree::cpu::moe_router_lse(lse.data(), logits.data(), N, E);
  double direct_squares = 0.0;
  for (int t = 0; t < N; ++t) {
    double sum = 0.0;
    for (int e = 0; e < E; ++e) sum += std::exp(logits[std::size_t(t * E + e)]);
    EXPECT_NEAR(lse[std::size_t(t)], std::log(sum), 1e-12);
    direct_squares += std::log(sum) * std::log(sum);
  }
  EXPECT_NEAR(squares, direct_squares, 1e-10);
}

TEST(KernelMoe, RoutingAndMeanProbsIgnoreThreadCount) {
  const int E = 9, k = 3, N = 257;
  const MoeShape m{E, k, true, true};
  const auto logits = kt::cast<float>(kt::random_normal(std::size_t(N * E), 31));
  auto run = [&] {
    std::vector<float> s(std::size_t(N * E)), w(std::size_t(N * k));
    std::vector<std::int32_t> sel(std::size_t(N * k));
    std::vector<double> P(static_cast<std::size_t>(E));
    gc::tree::cpu::moe_route_forward(s.data(), sel.data(), w.data(), logits.data(), static_cast<const float*>(nullptr),
                                     N, m);
    gc::tree::cpu::moe_mean_probs(P.data(), s.data(), N, N, m);
    return std::make_tuple(s, w, sel, P);
  };
  decltype(run()) one, two;
  kt::with_threads(1, [&] { one = run(); });
  kt::with_threads(2, [&] { two = run(); });
  EXPECT_TRUE(one == two);
  double total = 0.0;
  for (double p : std::get<3>(one)) total += p;
  EXPECT_NEAR(total, 1.0, 1e-12);  // sigmoid scores are normalized per token for P
}

}  // namespace
