// core/moe_balance.hpp, the routing bookkeeping both backends run where the routing lives:
// the selection counts with dropped assignments, the balancing losses against their direct
// formulas (cpu/moe.hpp's header), their gradient against finite differences of the loss in
// the router probabilities, and the end of a step (window, aux_free's bias).
#include "core/moe_balance.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::core::MoeBalance;

constexpr int kE = 4, kK = 2, kT = 5, kG = 3;  // 3 sequences of 5 rows, top-2 of 4 experts

MoeBalance shape(double aux_coef, double seq_coef) {
  MoeBalance b;
  b.experts = kE;
  b.top_k = kK;
  b.rows = kT * kG;
  b.seq_len = kT;
  b.aux_coef = aux_coef;
  b.seq_coef = seq_coef;
  return b;
}

TEST(MoeBalance, SelectedCountsTheKeptRowsAndTheDroppedIntoTheTally) {
  const MoeBalance b = shape(0.01, 0.0);
  const std::vector<std::int64_t> offsets = {0, 8, 8, 19, 24};  // kept rows 8, 0, 11, 5 (of 30)
  const std::vector<std::int64_t> dropped = {1, 0, 2, 0, 0, 1, 0, 0, 1, 0, 0, 2};  // [g][e]
  std::vector<double> selected(kE), tally(kE + 1, 10.0);
  gc::tree::core::count_selected(b, offsets.data(), dropped.data(), selected.data(), tally.data());
  EXPECT_EQ(selected, (std::vector<double>{10, 1, 13, 7}));
  EXPECT_EQ(tally, (std::vector<double>{20, 11, 23, 17, 10 + 7}));
  gc::tree::core::count_selected(b, offsets.data(), nullptr, selected.data(), tally.data());  // dropless
  EXPECT_EQ(selected, (std::vector<double>{8, 0, 11, 5}));
  EXPECT_EQ(tally, (std::vector<double>{28, 11, 34, 22, 17}));
}

// Router probabilities p [N][E] (rows sum to 1) and assignments; P per sequence and overall.
struct Routing {
  std::vector<double> p;
  std::vector<std::int64_t> counts;  // [g][e]
  std::vector<double> selected;      // per e
  std::vector<double> mean() const {
    std::vector<double> P(kE, 0.0);
    for (int t = 0; t < kT * kG; ++t) {
      for (int e = 0; e < kE; ++e) P[std::size_t(e)] += p[std::size_t(t * kE + e)] / (kT * kG);
    }
    return P;
  }
  std::vector<double> sequence_mean() const {
    std::vector<double> P(kG * kE, 0.0);
    for (int t = 0; t < kT * kG; ++t) {
      for (int e = 0; e < kE; ++e) P[std::size_t(t / kT * kE + e)] += p[std::size_t(t * kE + e)] / kT;
    }
    return P;
  }
};

Routing random_routing() {
  Routing r;
  std::vector<double> u = kt::random_vector(kT * kG * kE, 31, 0.1, 1.0);
  for (double& x : u) x = x < 0.0 ? -x : x;  // positive weights, normalized per row below
  r.p = u;
  for (int t = 0; t < kT * kG; ++t) {
    double sum = 0.0;
    for (int e = 0; e < kE; ++e) sum += u[std::size_t(t * kE + e)];
    for (int e = 0; e < kE; ++e) r.p[std::size_t(t * kE + e)] /= sum;
  }
  r.counts = {3, 2, 4, 1, 0, 5, 2, 3, 4, 4, 1, 1};  // 10 assignments per sequence (5 rows × top-2)
  r.selected.assign(kE, 0.0);
  for (int g = 0; g < kG; ++g) {
    for (int e = 0; e < kE; ++e) r.selected[std::size_t(e)] += double(r.counts[std::size_t(g * kE + e)]);
  }
  return r;
}

double loss_of(const MoeBalance& b, const Routing& r) {
  const std::vector<double> P = r.mean(), Pg = r.sequence_mean();
  double aux = 0.5;  // the slot's earlier contents (the layer's z-loss) stay
  gc::tree::core::add_balance_loss(b, r.selected.data(), P.data(), r.counts.data(), Pg.data(), &aux);
  return aux - 0.5;
}

TEST(MoeBalance, LossesFollowTheirFormulas) {
  const Routing r = random_routing();
  const std::vector<double> P = r.mean(), Pg = r.sequence_mean();
  double global = 0.0;  // coef · E · Σ_e f_e P_e, f_e = selected_e / (N·k)
  for (int e = 0; e < kE; ++e) global += r.selected[std::size_t(e)] / (kT * kG * kK) * P[std::size_t(e)];
  global *= 0.01 * kE;
  double sequences = 0.0;  // coef_s · (1/G) Σ_g E Σ_e f_ge P_ge, f_ge = counts_ge / (T·k)
  for (int g = 0; g < kG; ++g) {
    for (int e = 0; e < kE; ++e) {
      const std::size_t i = std::size_t(g * kE + e);
      sequences += kE * double(r.counts[i]) / (kT * kK) * Pg[i];
    }
  }
  sequences *= 0.05 / kG;
  EXPECT_NEAR(loss_of(shape(0.01, 0.0), r), global, 1e-15);
  EXPECT_NEAR(loss_of(shape(0.0, 0.05), r), sequences, 1e-15);
  EXPECT_NEAR(loss_of(shape(0.01, 0.05), r), global + sequences, 1e-15);
  EXPECT_EQ(loss_of(shape(0.0, 0.0), r), 0.0);
  // Uniform loads and probabilities give exactly the coefficient (Switch's normalization).
  Routing uniform = r;
  uniform.p.assign(uniform.p.size(), 1.0 / kE);
  uniform.selected.assign(kE, double(kT * kG * kK) / kE);
  EXPECT_NEAR(loss_of(shape(0.01, 0.0), uniform), 0.01, 1e-15);
}

TEST(MoeBalance, GradientIsTheLossesDerivativeInEachRowsProbability) {
  const Routing r = random_routing();
  for (const auto& [aux_coef, seq_coef] : {std::pair{0.01, 0.0}, {0.0, 0.05}, {0.01, 0.05}}) {
    const MoeBalance b = shape(aux_coef, seq_coef);
    const std::int64_t group_rows = b.gradient_group_rows();
    std::vector<double> grad(std::size_t(b.rows / group_rows) * kE);
    const double scale = 0.25;  // the micro-batch's loss scale multiplies it
    gc::tree::core::balance_gradient(b, r.selected.data(), r.counts.data(), scale, grad.data());
    for (int t : {0, 7, 14}) {
      for (int e = 0; e < kE; ++e) {
        const double h = 1e-6;
        Routing up = r, down = r;
        up.p[std::size_t(t * kE + e)] += h;
        down.p[std::size_t(t * kE + e)] -= h;
        const double numeric = (loss_of(b, up) - loss_of(b, down)) / (2 * h);
        EXPECT_NEAR(grad[std::size_t(t / group_rows * kE + e)], scale * numeric, 1e-9)
            << "row " << t << " expert " << e << " coefs " << aux_coef << " " << seq_coef;
      }
    }
  }
}

TEST(MoeBalance, StepEndAddsTheTallyToTheWindowAndMovesTheBiasTowardBalance) {
  const std::vector<double> step = {6, 2, 4, 4, 3};  // loads (mean 4) and 3 dropped
  std::vector<double> window = {1, 1, 1, 1, 1};
  std::vector<float> bias = {0.0f, 0.5f, -0.5f, 0.25f};
  gc::tree::core::close_step(kE, step.data(), window.data(), bias.data(), 0.125);
  EXPECT_EQ(window, (std::vector<double>{7, 3, 5, 5, 4}));
  EXPECT_EQ(bias, (std::vector<float>{-0.125f, 0.625f, -0.5f, 0.25f}));  // over, under, at the mean twice
  gc::tree::core::close_step(kE, step.data(), window.data(), nullptr, 0.125);  // no aux_free: window only
  EXPECT_EQ(window, (std::vector<double>{13, 5, 9, 9, 7}));
}

}  // namespace
