#include "cpu/gate.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::GatedAttention;

// Naive seed 000 eq. 3-4 gate: out = σ(z) ⊙ attn, z per head or per element.
std::vector<double> reference_gate(GatedAttention mode, const std::vector<double>& attn, const std::vector<double>& z, int N,
                                   int heads, int hd) {
  std::vector<double> out(attn.size());
  for (int n = 0; n < N; ++n) {
    for (int h = 0; h < heads; ++h) {
      for (int c = 0; c < hd; ++c) {
        const std::size_t e = (std::size_t(n) * heads + h) * hd + c;
        const double zz = mode == GatedAttention::headwise ? z[std::size_t(n) * heads + h] : z[e];
        out[e] = attn[e] / (1.0 + std::exp(-zz));
      }
    }
  }
  return out;
}

template <GatedAttention kMode>
void check_forward(const char* label) {
  const int N = 7, heads = 4, hd = 6;
  const std::size_t nz = kMode == GatedAttention::headwise ? std::size_t(N) * heads : std::size_t(N) * heads * hd;
  const auto attn = kt::random_vector(std::size_t(N) * heads * hd, 1);
  const auto z = kt::random_vector(nz, 2, 0.1, 4.0);
  const auto af = kt::cast<float>(attn), zf = kt::cast<float>(z);
  std::vector<float> out(attn.size());
  gc::tree::cpu::gate_forward<kMode>(out.data(), af.data(), zf.data(), N, heads, hd);
  const double err = kt::rel_error(out, reference_gate(kMode, attn, z, N, heads, hd));
  kt::report(label, err);
  EXPECT_LT(err, kt::kForwardTol);
}

template <GatedAttention kMode>
void check_backward(const char* label_attn, const char* label_z) {
  const int N = 5, heads = 3, hd = 6;
  const std::size_t nz = kMode == GatedAttention::headwise ? std::size_t(N) * heads : std::size_t(N) * heads * hd;
  auto attn = kt::random_vector(std::size_t(N) * heads * hd, 3);
  auto z = kt::random_vector(nz, 4, 0.1, 3.0);
  const auto r = kt::random_vector(attn.size(), 5);
  auto loss = [&] {
    std::vector<double> out(attn.size());
    gc::tree::cpu::gate_forward<kMode>(out.data(), attn.data(), z.data(), N, heads, hd);
    return kt::dot(r, out);
  };
  std::vector<double> dattn(attn.size()), dz(z.size());
  gc::tree::cpu::gate_backward<kMode>(dattn.data(), dz.data(), r.data(), attn.data(), z.data(), N, heads, hd);
  const double err_a = kt::rel_error(dattn, kt::numeric_grad(attn, loss));
  const double err_z = kt::rel_error(dz, kt::numeric_grad(z, loss));
  kt::report(label_attn, err_a);
  kt::report(label_z, err_z);
  EXPECT_LT(err_a, kt::kGradTol);
  EXPECT_LT(err_z, kt::kGradTol);
}

TEST(KernelGate, HeadwiseForwardFloatMatchesDoubleReference) {
  check_forward<GatedAttention::headwise>("gate headwise forward fp32");
}

TEST(KernelGate, ElementwiseForwardFloatMatchesDoubleReference) {
  check_forward<GatedAttention::elementwise>("gate elementwise forward fp32");
}

TEST(KernelGate, HeadwiseBackwardMatchesFiniteDifferences) {
  check_backward<GatedAttention::headwise>("gate headwise backward dattn vs FD", "gate headwise backward dz vs FD");
}

TEST(KernelGate, ElementwiseBackwardMatchesFiniteDifferences) {
  check_backward<GatedAttention::elementwise>("gate elementwise backward dattn vs FD", "gate elementwise backward dz vs FD");
}

TEST(KernelGate, ExtremePreActivationsSaturateWithoutNaN) {
  const std::vector<float> attn = {1.5f, -2.0f}, z = {-200.0f, 200.0f};
  std::vector<float> out(2), dattn(2), dz(2);
  gc::tree::cpu::gate_forward<GatedAttention::elementwise>(out.data(), attn.data(), z.data(), 1, 1, 2);
  gc::tree::cpu::gate_backward<GatedAttention::elementwise>(dattn.data(), dz.data(), attn.data(), attn.data(), z.data(),
                                                            1, 1, 2);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], -2.0f);
  for (float g : {dattn[0], dattn[1], dz[0], dz[1]}) {
    EXPECT_TRUE(std::isfinite(g));
  }
}

}  // namespace
