// CUDA Philox initialization (cuda/init.cuh) against the CPU fills of core/philox.hpp: the same
// values from the same (seed, tensor) streams, for a whole tensor, a part of it (a ZeRO-1 shard of
// the masters) and the bf16 draw.
#include "cuda/init.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.hpp"
#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

// GPU init vs the CPU fill: the largest relative difference and the number of
// elements whose bits differ (expected 0; at most a last-ulp difference, see
// cuda/init.cuh).
void check_init(gc::tree::InitKind kind, double std_dev, double cutoff, std::uint64_t seed, std::uint32_t tensor_id,
                const std::string& what, bool require_bitwise) {
  const std::int64_t n = 100003;
  std::vector<float> ref(std::size_t(n), 1.0f);
  switch (kind) {
    case gc::tree::InitKind::normal:
      gc::tree::core::fill_normal(ref.data(), n, std_dev, seed, tensor_id);
      break;
    case gc::tree::InitKind::trunc_normal:
      gc::tree::core::fill_truncated_normal(ref.data(), n, std_dev, cutoff, seed, tensor_id);
      break;
    case gc::tree::InitKind::uniform:
      gc::tree::core::fill_uniform(ref.data(), n, std_dev, seed, tensor_id);
      break;
    case gc::tree::InitKind::ones:
      break;
  }
  ct::DeviceBuffer<float> d_out{std::size_t(n)};
  GC_CUDA_CHECK(cudaMemset(d_out.data(), 0xff, std::size_t(n) * sizeof(float)));
  gc::tree::cuda::init_tensor(d_out.data(), n, kind, std_dev, cutoff, seed, tensor_id);
  const std::vector<float> got = ct::download(d_out);
  double worst = 0.0;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (same_bits(got[i], ref[i])) continue;
    ++differ;
    const double r = std::fabs(double(ref[i]));
    const double e = r > 0.0 ? std::fabs(double(got[i]) - double(ref[i])) / r : INFINITY;
    worst = e > worst ? e : worst;
  }
  kt::report("cuda init " + what + " max rel diff", worst);
  std::printf("[kernel-error] %-48s %zu of %lld\n", ("cuda init " + what + " differing").c_str(), differ,
              static_cast<long long>(n));
  EXPECT_LE(worst, 1e-6) << what;
  if (require_bitwise) {
    EXPECT_EQ(differ, 0u) << what;
  }
}

TEST(CudaInit, MatchesCpuFills) {
  GC_REQUIRE_GPU();
  check_init(gc::tree::InitKind::normal, 0.02, 0.0, 1234, 7, "normal", false);
  check_init(gc::tree::InitKind::normal, 0.125, 0.0, 0x0123456789abcdefULL, 0xfffffff0u, "normal (64-bit seed)", false);
  check_init(gc::tree::InitKind::trunc_normal, 0.5, 2.0, 99, 3, "trunc_normal c=2", false);
  check_init(gc::tree::InitKind::trunc_normal, 1.0, 0.25, 5, 1, "trunc_normal c=0.25", false);
  check_init(gc::tree::InitKind::uniform, 0.1, 0.0, 42, 11, "uniform", true);
  check_init(gc::tree::InitKind::ones, 0.0, 0.0, 42, 12, "ones", true);
}

// A part of a tensor (a ZeRO-1 shard of the masters: elements first … first + n − 1) equals
// that slice of the whole draw, and the bf16 draw is the bf16 rounding of the fp32 one.
TEST(CudaInit, ShardsAndBf16DrawTheSameValues) {
  GC_REQUIRE_GPU();
  const std::int64_t n = 5000, first = 1234, part = 2000;
  for (const auto kind : {gc::tree::InitKind::normal, gc::tree::InitKind::trunc_normal, gc::tree::InitKind::uniform}) {
    ct::DeviceBuffer<float> whole{std::size_t(n)}, slice{std::size_t(part)};
    ct::DeviceBuffer<gc::tree::cuda::bf16> rounded{std::size_t(n)};
    gc::tree::cuda::init_tensor(whole.data(), n, kind, 0.3, 2.0, 77, 5);
    gc::tree::cuda::init_tensor(slice.data(), part, kind, 0.3, 2.0, 77, 5, first);
    gc::tree::cuda::init_tensor(rounded.data(), n, kind, 0.3, 2.0, 77, 5);
    const std::vector<float> w = ct::download(whole), s = ct::download(slice);
    const std::vector<gc::tree::cuda::bf16> r = ct::download(rounded);
    for (std::int64_t i = 0; i < part; ++i) ASSERT_TRUE(same_bits(s[std::size_t(i)], w[std::size_t(first + i)])) << i;
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(gc::tree::cuda::to_float(r[std::size_t(i)]),
                gc::tree::cuda::to_float(gc::tree::cuda::from_float<gc::tree::cuda::bf16>(w[std::size_t(i)])))
          << i;
    }
  }
}

TEST(CudaInit, TruncatedNormalNeedsPositiveCutoff) {
  GC_REQUIRE_GPU();
  ct::DeviceBuffer<float> d_out(16);
  EXPECT_THROW(gc::tree::cuda::init_tensor(d_out.data(), 16, gc::tree::InitKind::trunc_normal, 1.0, 0.0, 1, 1),
               gc::rt::RuntimeError);
}

}  // namespace
