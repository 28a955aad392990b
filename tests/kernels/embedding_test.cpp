#include "cpu/embedding.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::cpu::embedding_backward;
using gc::tree::cpu::embedding_forward;

TEST(KernelEmbedding, ForwardFloatMatchesDoubleReference) {
  const int V = 11, d = 70, N = 9;  // d spans two column blocks
  const double scale = 1.7;
  const auto E = kt::random_vector(V * d, 1);
  const auto tokens = kt::random_tokens(N, V, 2);
  std::vector<double> ref(std::size_t(N) * d);
  for (int n = 0; n < N; ++n) {
    for (int j = 0; j < d; ++j) {
      ref[n * d + j] = scale * E[tokens[n] * d + j];
    }
  }
  const auto Ef = kt::cast<float>(E);
  std::vector<float> out(ref.size());
  embedding_forward(out.data(), tokens.data(), Ef.data(), N, d, float(scale));
  const double err = kt::rel_error(out, ref);
  kt::report("embedding forward fp32", err);
  EXPECT_LT(err, kt::kForwardTol);
}

TEST(KernelEmbedding, BackwardMatchesFiniteDifferences) {
  const int V = 6, d = 10, N = 13;  // N > V: rows repeat
  const double scale = 0.8;
  auto E = kt::random_vector(V * d, 3);
  const auto tokens = kt::random_tokens(N, V, 4);
  const auto r = kt::random_vector(N * d, 5);
  auto loss = [&] {
    std::vector<double> out(std::size_t(N) * d);
    embedding_forward(out.data(), tokens.data(), E.data(), N, d, scale);
    return kt::dot(r, out);
  };
  const auto prior = kt::random_vector(E.size(), 6);
  std::vector<double> dE = prior;
  embedding_backward(dE.data(), tokens.data(), r.data(), N, d, scale);
  const double err = kt::rel_error(kt::minus(dE, prior), kt::numeric_grad(E, loss));
  kt::report("embedding backward dE vs FD", err);
  EXPECT_LT(err, kt::kGradTol);
}

TEST(KernelEmbedding, BackwardIsIndependentOfThreadCount) {
  const int V = 17, d = 130, N = 600;
  const auto tokens = kt::random_tokens(N, V, 7);
  const auto dout = kt::cast<float>(kt::random_vector(N * d, 8));
  std::vector<float> one(std::size_t(V) * d, 0.0f), two = one;
  kt::with_threads(1, [&] { embedding_backward(one.data(), tokens.data(), dout.data(), N, d, 1.3f); });
  kt::with_threads(2, [&] { embedding_backward(two.data(), tokens.data(), dout.data(), N, d, 1.3f); });
  EXPECT_EQ(one, two);
}

}  // namespace
