// cuda/fingerprint.cuh against the CPU's sum of core/fingerprint.hpp's terms: fp32 (the CPU
// engine's parameters give the same value) and bf16 (16-bit patterns), over more elements than
// the grid's threads and a length that is not a multiple of anything.
#include "cuda/fingerprint.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;

template <typename T>
std::uint64_t on_device(const std::vector<T>& x) {
  auto x_d = ct::upload(x);
  gc::tree::cuda::DeviceFingerprint fingerprint;
  return fingerprint.of(x_d.data(), std::int64_t(x.size()));
}

TEST(CudaFingerprint, EqualsTheHostsSum) {
  GC_REQUIRE_GPU();
  const std::size_t n = 70001;  // > 256 × 256 threads: several elements per thread
  const auto d = kt::random_normal(n, 9);
  const auto f = ct::convert<float>(d);
  const auto b = ct::convert<bf16>(d);
  std::uint64_t f_host = 0, b_host = 0;
  for (std::size_t i = 0; i < n; ++i) {
    f_host += gc::tree::core::fingerprint_term(i, gc::tree::core::bit_pattern(f[i]));
    b_host += gc::tree::core::fingerprint_term(i, std::uint32_t(__bfloat16_as_ushort(b[i])));
  }
  EXPECT_EQ(on_device(f), f_host);
  EXPECT_EQ(on_device(b), b_host);
  EXPECT_NE(f_host, b_host);
}

}  // namespace
