// The experts' forward, dX and dW GEMMs on warpgroup MMAs (cuda/grouped_gemm_sm90.cuh) against
// products in double of the same bf16 inputs (dX written and accumulated, dW accumulated onto what
// is there; the empty expert's dW stays exactly as it was), for experts of uneven sizes (one empty, one spanning two row
// tiles with a partial last), and against the mma.sync kernel it is to replace; a rerun gives the
// same bits. Under the emulator this checks our reading of wgmma's layouts; on an H100 or H200 (the
// GPU kit's kernels row) the real instruction.
#include "cuda/grouped_gemm_sm90.cuh"

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

static_assert(grouped::sm90::kSupported<768, 512> && grouped::sm90::kSupported<512, 768>,
              "moe_3b's expert projections (d_model 768, expert d_ff 512) run here");
static_assert(!grouped::sm90::kSupported<96, 128> && !grouped::sm90::kSupported<128, 64>);

const std::vector<std::int64_t> kOffsets = {0, 70, 70, 75, 205};  // rows 70, 0, 5, 130
constexpr int kExperts = 4;

template <int IN, int OUT>
void check_forward() {
  const std::int64_t R = kOffsets.back();
  const auto x = ct::convert<bf16>(kt::random_normal(std::size_t(R) * IN, 21));
  const auto w = ct::convert<bf16>(kt::random_normal(std::size_t(kExperts) * OUT * IN, 22));
  auto x_d = ct::upload(x), w_d = ct::upload(w);
  auto offsets_d = ct::upload(kOffsets);
  const std::int64_t tiles = grouped::row_tiles(kOffsets.data(), kExperts);
  // Rows past the last expert's end are never written: a sentinel shows it.
  const std::vector<bf16> sentinel(std::size_t(R + 3) * OUT, gc::tree::cuda::from_float<bf16>(7.0f));
  auto y_d = ct::upload(sentinel);
  grouped::sm90::forward<IN, OUT>(y_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles);

  const auto xd = ct::to_double(x), wd = ct::to_double(w);
  std::vector<double> y(std::size_t(R) * OUT);
  for (int e = 0; e < kExperts; ++e) {
    const double* we = wd.data() + std::size_t(e) * OUT * IN;
    for (std::int64_t r = kOffsets[e]; r < kOffsets[e + 1]; ++r) {
      for (int o = 0; o < OUT; ++o) {
        double s = 0.0;
        for (int i = 0; i < IN; ++i) s += xd[std::size_t(r) * IN + i] * we[std::size_t(o) * IN + i];
        y[std::size_t(r) * OUT + o] = s;
      }
    }
  }
  const std::string shape = std::to_string(IN) + "->" + std::to_string(OUT);
  auto got = ct::download(y_d);
  for (std::size_t i = std::size_t(R) * OUT; i < got.size(); ++i) {
    ASSERT_EQ(gc::tree::cuda::to_float(got[i]), 7.0f) << "a row past the experts was written, " << shape;
  }
  got.resize(std::size_t(R) * OUT);
  ct::expect_close(ct::to_double(got), ct::rounded<bf16>(y), 1e-2, "sm90 grouped forward " + shape);

  // The mma.sync kernel on the same inputs: the same products, summed in another order.
  ct::DeviceBuffer<bf16> y_mma(std::size_t(R) * OUT);
  grouped::forward<IN, OUT>(y_mma.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles);
  ct::expect_close(ct::to_double(got), ct::to_double(ct::download(y_mma)), 1e-2, "sm90 vs mma.sync " + shape);

  // dX = dY·W_e (IN wide, K = OUT): written, then accumulated onto dX0.
  const auto dy = ct::convert<bf16>(kt::random_normal(std::size_t(R) * OUT, 23));
  const auto dx0 = ct::convert<bf16>(kt::random_normal(std::size_t(R) * IN, 24));
  const auto dyd = ct::to_double(dy), dx0d = ct::to_double(dx0);
  std::vector<double> dx(std::size_t(R) * IN), dx_acc(std::size_t(R) * IN);
  for (int e = 0; e < kExperts; ++e) {
    const double* we = wd.data() + std::size_t(e) * OUT * IN;
    for (std::int64_t r = kOffsets[e]; r < kOffsets[e + 1]; ++r) {
      for (int i = 0; i < IN; ++i) {
        double s = 0.0;
        for (int o = 0; o < OUT; ++o) s += dyd[std::size_t(r) * OUT + o] * we[std::size_t(o) * IN + i];
        dx[std::size_t(r) * IN + i] = s;
        dx_acc[std::size_t(r) * IN + i] = s + dx0d[std::size_t(r) * IN + i];
      }
    }
  }
  auto dy_d = ct::upload(dy);
  ct::DeviceBuffer<bf16> dx_d(std::size_t(R) * IN);
  grouped::sm90::backward_dx<IN, OUT>(dx_d.data(), dy_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles, false);
  ct::expect_close(ct::to_double(ct::download(dx_d)), ct::rounded<bf16>(dx), 1e-2, "sm90 grouped dx " + shape);
  auto dx_acc_d = ct::upload(dx0);
  grouped::sm90::backward_dx<IN, OUT>(dx_acc_d.data(), dy_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles,
                                      true);
  ct::expect_close(ct::to_double(ct::download(dx_acc_d)), ct::rounded<bf16>(dx_acc), 1e-2,
                   "sm90 grouped dx += " + shape);

  // dW_e += Σ_r dY[r]ᵀ·X[r] onto dW0 (fp32).
  const auto dw0 = ct::convert<float>(kt::random_normal(std::size_t(kExperts) * OUT * IN, 25));
  std::vector<double> dw(dw0.begin(), dw0.end());
  for (int e = 0; e < kExperts; ++e) {
    for (std::int64_t r = kOffsets[e]; r < kOffsets[e + 1]; ++r) {
      for (int o = 0; o < OUT; ++o) {
        for (int i = 0; i < IN; ++i) {
          dw[(std::size_t(e) * OUT + o) * IN + i] += dyd[std::size_t(r) * OUT + o] * xd[std::size_t(r) * IN + i];
        }
      }
    }
  }
  auto dw_d = ct::upload(dw0);
  grouped::sm90::backward_dw<IN, OUT>(dw_d.data(), dy_d.data(), x_d.data(), offsets_d.data(), kExperts);
  const auto dw_got = ct::download(dw_d);
  ct::expect_close(std::vector<double>(dw_got.begin(), dw_got.end()), dw, 1e-5, "sm90 grouped dW " + shape);
  for (std::size_t i = std::size_t(1) * OUT * IN; i < std::size_t(2) * OUT * IN; ++i) {
    ASSERT_EQ(dw_got[i], dw0[i]) << "the empty expert's dW changed at " << i << ", " << shape;
  }
  auto dw_again = ct::upload(dw0);
  grouped::sm90::backward_dw<IN, OUT>(dw_again.data(), dy_d.data(), x_d.data(), offsets_d.data(), kExperts);
  EXPECT_TRUE(ct::bitwise_equal(ct::download(dw_again), dw_got)) << "dW repeats bit for bit, " << shape;

  auto again_d = ct::upload(sentinel);
  grouped::sm90::forward<IN, OUT>(again_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts, tiles);
  auto again = ct::download(again_d);
  again.resize(got.size());
  EXPECT_TRUE(ct::bitwise_equal(again, got)) << "a rerun repeats bit for bit, " << shape;
}

TEST(CudaGroupedGemmSm90, ForwardDxAndDwMatchDoubleAndTheMmaSyncKernel) {
  GC_REQUIRE_GPU();
  check_forward<256, 128>();  // forward: four stages of K (one past the ring), one column tile; dX: two, two
  check_forward<128, 256>();  // forward: two stages, two column tiles; dX: four stages, one column tile
}

}  // namespace
