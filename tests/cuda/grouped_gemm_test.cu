// The experts' grouped GEMMs of cuda/grouped_gemm.cuh against products in double of the same
// bf16 inputs: forward, dX (written and accumulated) and dW (accumulated onto what is there), for
// experts of uneven sizes, one of them empty (its dW must stay exactly as it was) and one spanning
// three row tiles with a partial last; both shapes of an expert MLP (IN < OUT and IN > OUT).
// Deterministic: a second run gives the same bits.
#include "cuda/grouped_gemm.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;
namespace grouped = gc::tree::cuda::grouped;

const std::vector<std::int64_t> kOffsets = {0, 70, 70, 75, 205};  // rows 70, 0, 5, 130
constexpr int kExperts = 4;

std::vector<double> as_double(const std::vector<bf16>& v) { return ct::to_double(v); }

template <int IN, int OUT>
void check_expert_products() {
  const std::int64_t R = kOffsets.back();
  const auto x = ct::convert<bf16>(kt::random_normal(std::size_t(R) * IN, 11));
  const auto w = ct::convert<bf16>(kt::random_normal(std::size_t(kExperts) * OUT * IN, 12));
  const auto dy = ct::convert<bf16>(kt::random_normal(std::size_t(R) * OUT, 13));
  const auto dx0 = ct::convert<bf16>(kt::random_normal(std::size_t(R) * IN, 14));
  const auto dw0 = ct::convert<float>(kt::random_normal(std::size_t(kExperts) * OUT * IN, 15));
  auto x_d = ct::upload(x), w_d = ct::upload(w), dy_d = ct::upload(dy);
  auto offsets_d = ct::upload(kOffsets);
  ct::DeviceBuffer<bf16> y_d(std::size_t(R) * OUT);
  const std::int64_t tiles = grouped::row_tiles(kOffsets.data(), kExperts);
  ASSERT_EQ(tiles, 1 + 0 + 1 + 2);  // rows 70, 0, 5, 130 in tiles of 128

  grouped::forward<IN, OUT>(y_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles);
  const auto xd = as_double(x), wd = as_double(w), dyd = as_double(dy), dx0d = as_double(dx0);
  std::vector<double> y(std::size_t(R) * OUT), dx(std::size_t(R) * IN), dx_acc(std::size_t(R) * IN);
  std::vector<double> dw(dw0.begin(), dw0.end());
  for (int e = 0; e < kExperts; ++e) {
    const double* we = wd.data() + std::size_t(e) * OUT * IN;
    for (std::int64_t r = kOffsets[e]; r < kOffsets[e + 1]; ++r) {
      for (int o = 0; o < OUT; ++o) {
        double s = 0.0;
        for (int i = 0; i < IN; ++i) s += xd[r * IN + i] * we[o * IN + i];
        y[r * OUT + o] = s;
      }
      for (int i = 0; i < IN; ++i) {
        double s = 0.0;
        for (int o = 0; o < OUT; ++o) s += dyd[r * OUT + o] * we[o * IN + i];
        dx[r * IN + i] = s;
        dx_acc[r * IN + i] = s + dx0d[r * IN + i];
      }
      for (int o = 0; o < OUT; ++o) {
        for (int i = 0; i < IN; ++i) dw[(std::size_t(e) * OUT + o) * IN + i] += dyd[r * OUT + o] * xd[r * IN + i];
      }
    }
  }
  const std::string shape = std::to_string(IN) + "->" + std::to_string(OUT);
  ct::expect_close(as_double(ct::download(y_d)), ct::rounded<bf16>(y), 1e-2, "grouped forward " + shape);
  // Sized by a bound instead (max_row_tiles of more rows than there are: the tree passes N·k and
  // leaves the offsets on the device), the launch computes the same bits; its extra blocks find
  // no tile.
  ASSERT_GE(grouped::max_row_tiles(R + 40, kExperts), tiles);
  ct::DeviceBuffer<bf16> y_bound_d(std::size_t(R) * OUT);
  grouped::forward<IN, OUT>(y_bound_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts,
                            grouped::max_row_tiles(R + 40, kExperts));
  EXPECT_TRUE(ct::bitwise_equal(ct::download(y_bound_d), ct::download(y_d))) << "bounded launch " << shape;

  ct::DeviceBuffer<bf16> dx_d(std::size_t(R) * IN);
  auto dw_d = ct::upload(dw0);
  grouped::backward<IN, OUT>(dx_d.data(), dw_d.data(), dy_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts,
                             tiles, false);
  ct::expect_close(as_double(ct::download(dx_d)), ct::rounded<bf16>(dx), 1e-2, "grouped dx " + shape);
  const auto dw_got = ct::download(dw_d);
  ct::expect_close(std::vector<double>(dw_got.begin(), dw_got.end()), dw, 1e-5, "grouped dW " + shape);
  for (std::size_t i = std::size_t(1) * OUT * IN; i < std::size_t(2) * OUT * IN; ++i) {
    ASSERT_EQ(dw_got[i], dw0[i]) << "the empty expert's dW changed at " << i;
  }

  auto dx_acc_d = ct::upload(dx0);
  auto dw_again = ct::upload(dw0);
  grouped::backward<IN, OUT>(dx_acc_d.data(), dw_again.data(), dy_d.data(), x_d.data(), w_d.data(), offsets_d.data(),
                             kExperts, tiles, true);
  ct::expect_close(as_double(ct::download(dx_acc_d)), ct::rounded<bf16>(dx_acc), 1e-2, "grouped dx += " + shape);
  EXPECT_TRUE(ct::bitwise_equal(ct::download(dw_again), dw_got)) << "dW repeats bit for bit";
}

TEST(CudaGroupedGemm, ExpertProductsMatchDoubleWithAnEmptyExpert) {
  GC_REQUIRE_GPU();
  check_expert_products<128, 64>();   // forward in 64-column tiles, dx in 128
  check_expert_products<64, 192>();   // 64 both ways
  check_expert_products<128, 256>();  // 128 both ways
}

}  // namespace
