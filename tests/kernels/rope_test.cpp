#include "cpu/rope.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::rope_table;
using gc::tree::cpu::rope_backward;
using gc::tree::cpu::rope_forward;

// HF Llama, written independently: q·cos + rotate_half(q)·sin with cos/sin of length hd
// (the hd/2 frequencies repeated twice) and rotate_half(q) = cat(−q[hd/2:], q[:hd/2]).
std::vector<double> reference_rope(const std::vector<double>& x, int B, int T, int heads, int hd, double base) {
  std::vector<double> y(x.size());
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      for (int h = 0; h < heads; ++h) {
        const double* xv = &x[((std::size_t(b) * T + t) * heads + h) * hd];
        double* yv = &y[((std::size_t(b) * T + t) * heads + h) * hd];
        for (int i = 0; i < hd; ++i) {
          const int f = i % (hd / 2);
          const double angle = t / std::pow(base, 2.0 * f / hd);
          const double rotated = i < hd / 2 ? -xv[i + hd / 2] : xv[i - hd / 2];
          yv[i] = xv[i] * std::cos(angle) + rotated * std::sin(angle);
        }
      }
    }
  }
  return y;
}

struct Tables {
  std::vector<double> cos, sin;
  Tables(int T, int hd, double base) : cos(std::size_t(T) * hd / 2), sin(cos.size()) {
    rope_table(cos.data(), sin.data(), T, hd, base);
  }
};

TEST(KernelRope, ForwardFloatMatchesHfRotateHalfForQueriesAndKeys) {
  const int B = 2, T = 7, H = 4, KV = 2, hd = 6;
  const double base = 10000.0;
  std::vector<float> cf(T * hd / 2), sf(cf.size());
  rope_table(cf.data(), sf.data(), T, hd, base);
  for (int heads : {H, KV}) {
    const auto x = kt::random_vector(std::size_t(B) * T * heads * hd, 1 + heads);
    const auto xf = kt::cast<float>(x);
    std::vector<float> y(x.size());
    rope_forward(y.data(), xf.data(), cf.data(), sf.data(), B, T, heads, hd);
    const double err = kt::rel_error(y, reference_rope(x, B, T, heads, hd, base));
    kt::report(heads == H ? "rope forward fp32 (q, H=4)" : "rope forward fp32 (k, KV=2)", err);
    EXPECT_LT(err, kt::kForwardTol);
  }
}

TEST(KernelRope, PositionZeroIsIdentityAndInPlaceWorks) {
  const int B = 1, T = 5, heads = 3, hd = 8;
  Tables tab(T, hd, 500000.0);
  const auto x = kt::random_vector(std::size_t(B) * T * heads * hd, 7);
  std::vector<double> y = x;
  rope_forward(y.data(), y.data(), tab.cos.data(), tab.sin.data(), B, T, heads, hd);
  EXPECT_LT(kt::rel_error(y, reference_rope(x, B, T, heads, hd, 500000.0)), 1e-14);
  for (int i = 0; i < heads * hd; ++i) {
    EXPECT_EQ(y[i], x[i]);
  }
}

TEST(KernelRope, BackwardMatchesFiniteDifferencesAndInvertsForward) {
  const int B = 2, T = 7, heads = 2, hd = 6;
  Tables tab(T, hd, 10000.0);
  auto x = kt::random_vector(std::size_t(B) * T * heads * hd, 8);
  const auto r = kt::random_vector(x.size(), 9);
  auto loss = [&] {
    std::vector<double> y(x.size());
    rope_forward(y.data(), x.data(), tab.cos.data(), tab.sin.data(), B, T, heads, hd);
    return kt::dot(r, y);
  };
  std::vector<double> dx(x.size());
  rope_backward(dx.data(), r.data(), tab.cos.data(), tab.sin.data(), B, T, heads, hd);
  const double err = kt::rel_error(dx, kt::numeric_grad(x, loss));
  kt::report("rope backward dx vs FD", err);
  EXPECT_LT(err, kt::kGradTol);

  std::vector<double> y(x.size()), back(x.size());
  rope_forward(y.data(), x.data(), tab.cos.data(), tab.sin.data(), B, T, heads, hd);
  rope_backward(back.data(), y.data(), tab.cos.data(), tab.sin.data(), B, T, heads, hd);
  EXPECT_LT(kt::rel_error(back, x), 1e-14);
}

// The stacked projection's rows [q heads | k heads | v heads]: the split gives RoPE(q), RoPE(k)
// and v exactly as the separate passes do, at every token's position; the backward stacks
// R(−angle)·dqr, R(−angle)·dkr and dv back, and is the forward's adjoint (⟨r, split(x)⟩ =
// ⟨stack(r), x⟩).
TEST(KernelRope, StackedQkvSplitsAndStacksLikeTheSeparatePasses) {
  const int B = 2, T = 5, H = 4, KV = 2, hd = 6;
  const int width = (H + 2 * KV) * hd;
  Tables tab(T, hd, 10000.0);
  const std::size_t rows = std::size_t(B) * T;
  const auto qkv = kt::random_vector(rows * width, 11);
  std::vector<double> q(rows * H * hd), k(rows * KV * hd), v(k.size());
  for (std::size_t r = 0; r < rows; ++r) {
    const double* row = &qkv[r * width];
    std::copy(row, row + H * hd, &q[r * H * hd]);
    std::copy(row + H * hd, row + (H + KV) * hd, &k[r * KV * hd]);
    std::copy(row + (H + KV) * hd, row + width, &v[r * KV * hd]);
  }
  std::vector<double> qr(q.size()), kr(k.size()), v_out(v.size());
  gc::tree::cpu::qkv_rope_forward(qr.data(), kr.data(), v_out.data(), qkv.data(), tab.cos.data(), tab.sin.data(), B, T,
                                  H, KV, hd);
  std::vector<double> qr_ref(q.size()), kr_ref(k.size());
  rope_forward(qr_ref.data(), q.data(), tab.cos.data(), tab.sin.data(), B, T, H, hd);
  rope_forward(kr_ref.data(), k.data(), tab.cos.data(), tab.sin.data(), B, T, KV, hd);
  EXPECT_EQ(qr, qr_ref);
  EXPECT_EQ(kr, kr_ref);
  EXPECT_EQ(v_out, v);

  const auto dqr = kt::random_vector(q.size(), 12), dkr = kt::random_vector(k.size(), 13);
  const auto dv = kt::random_vector(v.size(), 14);
  std::vector<double> dqkv(qkv.size());
  gc::tree::cpu::qkv_rope_backward(dqkv.data(), dqr.data(), dkr.data(), dv.data(), tab.cos.data(), tab.sin.data(), B, T,
                                   H, KV, hd);
  std::vector<double> dq(q.size()), dk(k.size());
  rope_backward(dq.data(), dqr.data(), tab.cos.data(), tab.sin.data(), B, T, H, hd);
  rope_backward(dk.data(), dkr.data(), tab.cos.data(), tab.sin.data(), B, T, KV, hd);
  for (std::size_t r = 0; r < rows; ++r) {
    const double* row = &dqkv[r * width];
    EXPECT_TRUE(std::equal(row, row + H * hd, &dq[r * H * hd])) << "row " << r << ": dq";
    EXPECT_TRUE(std::equal(row + H * hd, row + (H + KV) * hd, &dk[r * KV * hd])) << "row " << r << ": dk";
    EXPECT_TRUE(std::equal(row + (H + KV) * hd, row + width, &dv[r * KV * hd])) << "row " << r << ": dv";
  }
  const double forward_dot = kt::dot(dqr, qr) + kt::dot(dkr, kr) + kt::dot(dv, v_out);
  EXPECT_NEAR(kt::dot(dqkv, qkv), forward_dot, 1e-12 * std::fabs(forward_dot) + 1e-12);
}

}  // namespace
