// The dense projections of cuda/aligned_linear.cuh: with a width that is not a multiple of 8, bf16
// projections run on zero-padded copies; forward, dx (assigned and accumulated) and dW (accumulated)
// must equal the unpadded products (in double, on the same bf16 inputs), whichever of in and out is
// padded, and a call larger than the planned scratch is an error naming its shape.
#include "cuda/aligned_linear.cuh"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::AlignedLinear;
using gc::tree::cuda::bf16;

struct Shape {
  int N, in, out;
};

void check_projection(const Shape& s) {
  const std::string name = std::to_string(s.N) + " x " + std::to_string(s.in) + " -> " + std::to_string(s.out);
  const auto x = ct::convert<bf16>(kt::random_normal(std::size_t(s.N) * s.in, 21));
  const auto w = ct::convert<bf16>(kt::random_normal(std::size_t(s.out) * s.in, 22));
  const auto dy = ct::convert<bf16>(kt::random_normal(std::size_t(s.N) * s.out, 23));
  const auto dx0 = ct::convert<bf16>(kt::random_normal(std::size_t(s.N) * s.in, 24));
  const auto dw0 = ct::convert<float>(kt::random_normal(std::size_t(s.out) * s.in, 25));
  const auto xd = ct::to_double(x), wd = ct::to_double(w), dyd = ct::to_double(dy), dx0d = ct::to_double(dx0);

  std::vector<double> y(std::size_t(s.N) * s.out, 0.0), dx(std::size_t(s.N) * s.in, 0.0), dw(dw0.begin(), dw0.end());
  for (int r = 0; r < s.N; ++r) {
    for (int o = 0; o < s.out; ++o) {
      for (int i = 0; i < s.in; ++i) {
        y[std::size_t(r) * s.out + o] += xd[std::size_t(r) * s.in + i] * wd[std::size_t(o) * s.in + i];
        dx[std::size_t(r) * s.in + i] += dyd[std::size_t(r) * s.out + o] * wd[std::size_t(o) * s.in + i];
        dw[std::size_t(o) * s.in + i] += dyd[std::size_t(r) * s.out + o] * xd[std::size_t(r) * s.in + i];
      }
    }
  }
  std::vector<double> dx_acc(dx);
  for (std::size_t i = 0; i < dx_acc.size(); ++i) dx_acc[i] += dx0d[i];

  ASSERT_TRUE(AlignedLinear<bf16>::needs_padding(s.in, s.out)) << name;
  AlignedLinear<bf16> linear;
  linear.reserve(AlignedLinear<bf16>::act_elems(s.N, s.in, s.out), AlignedLinear<bf16>::grad_elems(s.in, s.out));
  gc::rt::cuda::BlasLt blas;
  auto x_d = ct::upload(x), w_d = ct::upload(w), dy_d = ct::upload(dy), dx_d = ct::upload(dx0);
  auto dw_d = ct::upload(dw0);
  ct::DeviceBuffer<bf16> y_d(std::size_t(s.N) * s.out);
  linear.forward(blas, y_d.data(), x_d.data(), w_d.data(), s.N, s.in, s.out);
  ct::expect_close(ct::download_double(y_d), ct::rounded<bf16>(y), 1e-2, "padded forward " + name);

  linear.backward(blas, dx_d.data(), dw_d.data(), dy_d.data(), x_d.data(), w_d.data(), s.N, s.in, s.out, true);
  ct::expect_close(ct::download_double(dx_d), ct::rounded<bf16>(dx_acc), 1e-2, "padded dx += " + name);
  const auto dw_got = ct::download(dw_d);
  ct::expect_close(std::vector<double>(dw_got.begin(), dw_got.end()), dw, 1e-5, "padded dW += " + name);

  linear.backward(blas, dx_d.data(), dw_d.data(), dy_d.data(), x_d.data(), w_d.data(), s.N, s.in, s.out, false);
  ct::expect_close(ct::download_double(dx_d), ct::rounded<bf16>(dx), 1e-2, "padded dx = " + name);
}

TEST(CudaAlignedLinear, PaddedProjectionsEqualTheUnpaddedProducts) {
  GC_REQUIRE_GPU();
  check_projection({40, 20, 32});  // in padded to 24
  check_projection({33, 24, 30});  // out padded to 32 (as a vocabulary of 151,643)
  check_projection({17, 13, 11});  // both
}

TEST(CudaAlignedLinear, AlignedAndFp32ProjectionsNeedNoScratchAndATooSmallOneIsAnError) {
  GC_REQUIRE_GPU();
  EXPECT_FALSE(AlignedLinear<bf16>::needs_padding(64, 24));
  EXPECT_FALSE(AlignedLinear<float>::needs_padding(20, 36));
  EXPECT_EQ(AlignedLinear<bf16>::act_elems(1000, 64, 24), 0);
  // in 20 -> 24: x̂ and dx̂ (2 · 40 · 24) and Ŵ (32 · 24); dŴ 32 · 24 in fp32.
  EXPECT_EQ(AlignedLinear<bf16>::act_elems(40, 20, 32), 2 * 40 * 24 + 32 * 24);
  EXPECT_EQ(AlignedLinear<bf16>::grad_elems(20, 32), 32 * 24);
  // and out 36 -> 40: ŷ (40 · 40), Ŵ (40 · 24).
  EXPECT_EQ(AlignedLinear<bf16>::act_elems(40, 20, 36), 2 * 40 * 24 + 40 * 40 + 40 * 24);

  AlignedLinear<bf16> linear;
  linear.reserve(AlignedLinear<bf16>::act_elems(8, 20, 32), AlignedLinear<bf16>::grad_elems(20, 32));
  gc::rt::cuda::BlasLt blas;
  ct::DeviceBuffer<bf16> x(40 * 20), w(32 * 20), y(40 * 32);
  try {
    linear.forward(blas, y.data(), x.data(), w.data(), 40, 20, 32);
    FAIL() << "a projection larger than the planned scratch ran";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("40 x 20 -> 32"), std::string::npos) << e.what();
  }
}

}  // namespace
