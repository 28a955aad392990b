// The experts' plain kernels of cuda/expert_linear.cuh (fp32, the parity path, and shapes the
// grouped kernels do not take) against the CPU backend's per-expert GEMMs (cpu::linear_forward /
// linear_backward) on the same random inputs: forward, dX (written and accumulated) and dW
// (accumulated onto what is there), the offsets read on the device. The launch is sized by a
// bound above the rows (as under moe.capacity_factor): the rows past offsets[E] stay as they
// were, and so does the dW of the expert without rows.
#include "cuda/expert_linear.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/linear.hpp"
#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;

const std::vector<std::int64_t> kOffsets = {0, 9, 9, 12, 29};  // rows 9, 0, 3, 17
constexpr int kExperts = 4;
constexpr std::int64_t kRows = 29, kBound = 40;  // the launch's bound: 11 rows past the last

template <typename T>
void check_plain_expert_kernels(int in, int out, double tolerance) {
  const auto x = ct::rounded<T>(kt::random_normal(std::size_t(kBound) * in, 21));
  const auto w = ct::rounded<T>(kt::random_normal(std::size_t(kExperts) * out * in, 22));
  const auto dy = ct::rounded<T>(kt::random_normal(std::size_t(kBound) * out, 23));
  const auto dx0 = ct::rounded<T>(kt::random_normal(std::size_t(kBound) * in, 24));
  const auto dw0 = kt::random_normal(std::size_t(kExperts) * out * in, 25);
  // The CPU backend's experts (cpu/backend.hpp grouped_linear_*), in double.
  std::vector<double> y(std::size_t(kRows) * out), dx(std::size_t(kRows) * in), dx_acc(dx0.begin(), dx0.end());
  std::vector<double> dw(dw0), unused;
  for (int e = 0; e < kExperts; ++e) {
    const std::int64_t begin = kOffsets[e], rows = kOffsets[e + 1] - begin;
    if (rows == 0) continue;
    const double* we = w.data() + std::size_t(e) * out * in;
    gc::tree::cpu::linear_forward(y.data() + begin * out, x.data() + begin * in, we, nullptr, int(rows), in, out);
    gc::tree::cpu::linear_backward(dx.data() + begin * in, dw.data() + std::size_t(e) * out * in, nullptr,
                                   dy.data() + begin * out, x.data() + begin * in, we, int(rows), in, out, false);
    std::vector<double> dw_scratch(std::size_t(out) * in, 0.0);
    gc::tree::cpu::linear_backward(dx_acc.data() + begin * in, dw_scratch.data(), nullptr, dy.data() + begin * out,
                                   x.data() + begin * in, we, int(rows), in, out, true);
  }
  const std::string what = std::to_string(in) + "->" + std::to_string(out);
  auto x_d = ct::upload(ct::convert<T>(x)), w_d = ct::upload(ct::convert<T>(w)), dy_d = ct::upload(ct::convert<T>(dy));
  auto offsets_d = ct::upload(kOffsets);
  const T sentinel = ct::convert<T>(std::vector<double>{7.0})[0];
  auto y_d = ct::upload(std::vector<T>(std::size_t(kBound) * out, sentinel));
  gc::tree::cuda::expert_rows_forward(y_d.data(), x_d.data(), w_d.data(), offsets_d.data(), kExperts, kBound, in, out);
  const auto y_got = ct::to_double(ct::download(y_d));
  ct::expect_close(std::vector<double>(y_got.begin(), y_got.begin() + kRows * out), ct::rounded<T>(y), tolerance,
                   "plain expert forward " + what);
  for (std::size_t i = std::size_t(kRows) * out; i < y_got.size(); ++i) ASSERT_EQ(y_got[i], 7.0) << "row past the last";

  auto dx_d = ct::upload(std::vector<T>(std::size_t(kBound) * in, sentinel));
  auto dw_d = ct::upload(ct::convert<float>(dw0));
  gc::tree::cuda::expert_rows_backward(dx_d.data(), dw_d.data(), dy_d.data(), x_d.data(), w_d.data(), offsets_d.data(),
                                       kExperts, kBound, in, out, false);
  const auto dx_got = ct::to_double(ct::download(dx_d));
  ct::expect_close(std::vector<double>(dx_got.begin(), dx_got.begin() + kRows * in), ct::rounded<T>(dx), tolerance,
                   "plain expert dx " + what);
  for (std::size_t i = std::size_t(kRows) * in; i < dx_got.size(); ++i) ASSERT_EQ(dx_got[i], 7.0) << "row past the last";
  const auto dw_got = ct::download(dw_d);
  ct::expect_close(std::vector<double>(dw_got.begin(), dw_got.end()), dw, 1e-5, "plain expert dW " + what);
  const auto dw0_f = ct::convert<float>(dw0);
  for (std::size_t i = std::size_t(1) * out * in; i < std::size_t(2) * out * in; ++i) {
    ASSERT_EQ(dw_got[i], dw0_f[i]) << "the empty expert's dW changed at " << i;
  }

  auto dx_acc_d = ct::upload(ct::convert<T>(dx0));
  auto dw_again = ct::upload(dw0_f);
  gc::tree::cuda::expert_rows_backward(dx_acc_d.data(), dw_again.data(), dy_d.data(), x_d.data(), w_d.data(),
                                       offsets_d.data(), kExperts, kBound, in, out, true);
  const auto dx_acc_got = ct::to_double(ct::download(dx_acc_d));
  ct::expect_close(std::vector<double>(dx_acc_got.begin(), dx_acc_got.begin() + kRows * in),
                   ct::rounded<T>(std::vector<double>(dx_acc.begin(), dx_acc.begin() + kRows * in)), tolerance,
                   "plain expert dx += " + what);
  EXPECT_TRUE(ct::bitwise_equal(ct::download(dw_again), dw_got)) << "dW repeats bit for bit";
}

TEST(CudaExpertLinear, PlainKernelsMatchTheCpuWithAnEmptyExpertAndABound) {
  GC_REQUIRE_GPU();
  check_plain_expert_kernels<float>(24, 40, 1e-5);
  check_plain_expert_kernels<float>(40, 24, 1e-5);
  check_plain_expert_kernels<bf16>(24, 40, 2e-2);
}

}  // namespace
