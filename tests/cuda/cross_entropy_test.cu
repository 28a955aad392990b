// CUDA cross-entropy (cuda/cross_entropy.cuh) against the CPU kernels of
// templates/cpu/cross_entropy.hpp run in double on the same inputs rounded to T, including the
// in-place call the model makes (cross-entropy backward with dlogits = logits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/cross_entropy.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/cross_entropy.cuh"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::bf16;
using ct::DeviceBuffer;

using ct::bitwise_equal;
using ct::download_double;
using ct::expect_close;
using ct::rounded;
using ct::type_name;
using ct::upload_as;

// Logits ~ N(0, 2²) rounded to T; V = 1000 is no multiple of the block size.
// ignore: every third target is kIgnoreTarget (anchor task: only the last position is scored).
std::vector<std::int32_t> ce_targets(int N, int V, std::uint64_t seed, bool ignore) {
  auto targets = kt::random_tokens(N, V, seed);
  if (ignore) {
    for (int n = 1; n < N; n += 3) targets[std::size_t(n)] = gc::rt::kIgnoreTarget;
  }
  return targets;
}

// Output shapes as a spec fixes them (V and α are compile-time constants of the kernels).
template <int V, int kScaleHundredths>
struct Logits {
  static constexpr int kVocab = V;
  static constexpr float kScale = float(kScaleHundredths) / 100.0f;
};
using V1000 = Logits<1000, 100>;
using V1000Alpha035 = Logits<1000, 35>;
using V517Alpha05 = Logits<517, 50>;  // fewer elements than two passes of the block

template <typename T, class S>
void check_cross_entropy_forward(bool ignore = false) {
  const int N = 37, V = S::kVocab;
  const float alpha = S::kScale;
  const auto logits = rounded<T>(kt::random_normal(std::size_t(N) * V, 41, 2.0));
  const auto targets = ce_targets(N, V, 42, ignore);
  std::vector<double> loss_ref(N), p_ref(N);
  const double mean_ref = gc::tree::cpu::cross_entropy_forward<double>(loss_ref.data(), p_ref.data(), logits.data(),
                                                                       targets.data(), N, V, double(alpha));

  auto logits_d = upload_as<T>(logits);
  auto targets_d = ct::upload(targets);
  DeviceBuffer<float> losses(N), p_target(N);
  DeviceBuffer<double> total(1);
  gc::tree::cuda::cross_entropy_forward<S>(losses.data(), p_target.data(), logits_d.data(), targets_d.data(), N);
  gc::tree::cuda::sum_losses(total.data(), losses.data(), N);
  const std::string what = "cross_entropy forward " + type_name<T>() + " V " + std::to_string(V) + " alpha " +
                           std::to_string(alpha) +
                           (ignore ? " with ignored targets" : "");
  // The outputs are fp32 computed from the same T inputs: fp32 tolerance for both T.
  expect_close(download_double(losses), loss_ref, ct::tolerance<float>(), what + " losses");
  expect_close(download_double(p_target), p_ref, ct::tolerance<float>(), what + " p_target");
  const double mean = ct::download(total)[0] / double(gc::rt::count_scored(targets.data(), N));
  EXPECT_NEAR(mean, mean_ref, ct::tolerance<float>() * std::fabs(mean_ref)) << what;

  // p_target may be omitted.
  DeviceBuffer<float> losses_only(N);
  gc::tree::cuda::cross_entropy_forward<S, T>(losses_only.data(), nullptr, logits_d.data(), targets_d.data(), N);
  EXPECT_TRUE(bitwise_equal(ct::download(losses_only), ct::download(losses))) << what << ": without p_target";
}

// dlogits = loss_scale · α · (softmax − onehot) / N. in_place: dlogits is the logits buffer.
// Two runs must agree bitwise.
template <typename T, class S>
void check_cross_entropy_backward(bool in_place, bool ignore = false) {
  const int N = 37, V = S::kVocab;
  const float alpha = S::kScale, loss_scale = 0.25f;
  const auto logits = rounded<T>(kt::random_normal(std::size_t(N) * V, 43, 2.0));
  const auto targets = ce_targets(N, V, 44, ignore);
  std::vector<double> ref(logits.size());
  gc::tree::cpu::cross_entropy_backward<double>(ref.data(), logits.data(), targets.data(), N, V, double(alpha),
                                                double(loss_scale));

  auto targets_d = ct::upload(targets);
  std::vector<std::vector<T>> runs;
  for (int run = 0; run < 2; ++run) {
    auto logits_d = upload_as<T>(logits);
    DeviceBuffer<T> own(logits.size());
    DeviceBuffer<T>& dlogits = in_place ? logits_d : own;
    gc::tree::cuda::cross_entropy_backward<S>(dlogits.data(), logits_d.data(), targets_d.data(), N, loss_scale,
                                              gc::rt::count_scored(targets.data(), N));
    runs.push_back(ct::download(dlogits));
  }
  const std::string what = "cross_entropy backward " + type_name<T>() + " V " + std::to_string(V) +
                           (in_place ? " in place" : "") + (ignore ? " ignored targets" : "");
  expect_close(ct::to_double(runs[0]), ref, ct::tolerance<T>(), what);
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << what << ": not deterministic";
}

TEST(CudaGateCe, CrossEntropyForwardMatchesCpu) {
  GC_REQUIRE_GPU();
  check_cross_entropy_forward<float, V1000>();
  check_cross_entropy_forward<bf16, V1000>();
  check_cross_entropy_forward<float, V1000Alpha035>();
  check_cross_entropy_forward<bf16, V1000Alpha035>();
  check_cross_entropy_forward<float, V517Alpha05>();
  check_cross_entropy_forward<bf16, V517Alpha05>();
  check_cross_entropy_forward<float, V1000Alpha035>(true);
  check_cross_entropy_forward<bf16, V1000>(true);
}

TEST(CudaGateCe, CrossEntropyBackwardMatchesCpu) {
  GC_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    check_cross_entropy_backward<float, V517Alpha05>(in_place);
    check_cross_entropy_backward<bf16, V517Alpha05>(in_place);
    check_cross_entropy_backward<float, V1000Alpha035>(in_place);
    check_cross_entropy_backward<bf16, V1000Alpha035>(in_place);
    check_cross_entropy_backward<float, V517Alpha05>(in_place, true);
    check_cross_entropy_backward<bf16, V1000>(in_place, true);
  }
}

// More losses than threads: every thread sums several; the result is the double sum of the
// fp32 losses (to double rounding) and repeats bitwise.
TEST(CudaGateCe, SumLossesIsDeterministicDoubleSum) {
  GC_REQUIRE_GPU();
  const std::int64_t N = 5000;
  const auto values = ct::convert<float>(kt::random_vector(std::size_t(N), 45, 0.1, 10.0));
  double serial = 0.0;
  for (float v : values) serial += double(v);
  auto losses = ct::upload(values);
  DeviceBuffer<double> total(1);
  gc::tree::cuda::sum_losses(total.data(), losses.data(), N);
  const double first = ct::download(total)[0];
  gc::tree::cuda::sum_losses(total.data(), losses.data(), N);
  const double second = ct::download(total)[0];
  EXPECT_NEAR(first, serial, 1e-12 * std::fabs(serial));
  EXPECT_EQ(std::memcmp(&first, &second, sizeof first), 0);
  gc::tree::cuda::sum_losses(total.data(), losses.data(), 0);
  EXPECT_EQ(ct::download(total)[0], 0.0);
}

// The logit moments (logit_std): Σ α·x and Σ (α·x)² added to an accumulator, over sizes below,
// at and above the slice count (slices of different lengths, empty slices), against the serial
// double sums, and repeatable bit for bit.
TEST(CudaGateCe, AccumulateMomentsMatchesTheSerialSums) {
  GC_REQUIRE_GPU();
  DeviceBuffer<double> partials(2 * std::size_t(gc::tree::cuda::kMomentBlocks));
  for (const std::int64_t n : {std::int64_t(7), std::int64_t(256), std::int64_t(100003)}) {
    const auto values = ct::convert<float>(kt::random_normal(std::size_t(n), 46));
    const double alpha = 0.7;
    double sum = 1.5, sum_sq = 2.5;  // the accumulator's prior contents are added to
    for (float v : values) {
      sum += alpha * double(v);
      sum_sq += (alpha * double(v)) * (alpha * double(v));
    }
    auto x = ct::upload(values);
    std::vector<double> results;
    for (int repeat = 0; repeat < 2; ++repeat) {
      auto acc = ct::upload(std::vector<double>{1.5, 2.5});
      gc::tree::cuda::accumulate_moments(acc.data(), partials.data(), x.data(), n, alpha);
      const std::vector<double> got = ct::download(acc);
      EXPECT_NEAR(got[0], sum, 1e-12 * (std::fabs(sum) + 1.0)) << n;
      EXPECT_NEAR(got[1], sum_sq, 1e-12 * sum_sq) << n;
      results.insert(results.end(), got.begin(), got.end());
    }
    EXPECT_EQ(std::memcmp(results.data(), results.data() + 2, 2 * sizeof(double)), 0) << n;
  }
}

}  // namespace
