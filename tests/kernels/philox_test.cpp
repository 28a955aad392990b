#include "core/philox.hpp"

#include <gtest/gtest.h>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::core::PhiloxCounter;
using gc::tree::core::PhiloxKey;

struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  uint32_t expected[4];
};

// Random123 (v1.14) tests/kat_vectors, the three "philox4x32 10" lines: counter, key, output.
TEST(KernelPhilox, MatchesRandom123KnownAnswers) {
  const Kat kats[] = {
      {{{0u, 0u, 0u, 0u}}, {{0u, 0u}}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       {{0xffffffffu, 0xffffffffu}},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       {{0xa4093822u, 0x299f31d0u}},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& kat : kats) {
    const PhiloxCounter out = gc::tree::core::philox4x32_10(kat.counter, kat.key);
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(out.x[w], kat.expected[w]) << "word " << w;
    }
  }
}

struct Moments {
  double mean = 0.0, std_dev = 0.0, max_abs = 0.0;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  double sum = 0.0, sum_sq = 0.0;
  for (float x : v) {
    sum += x;
    sum_sq += double(x) * x;
    m.max_abs = std::fabs(x) > m.max_abs ? std::fabs(x) : m.max_abs;
  }
  m.mean = sum / v.size();
  m.std_dev = std::sqrt(sum_sq / v.size() - m.mean * m.mean);
  return m;
}

constexpr std::int64_t kSamples = 1000000;

TEST(KernelPhilox, NormalFillHasRequestedStd) {
  const double sigma = 0.02;
  std::vector<float> w(kSamples);
  gc::tree::core::fill_normal(w.data(), kSamples, sigma, 1234, 7);
  const Moments m = moments(w);
  kt::report("philox normal: |std/sigma - 1|", std::fabs(m.std_dev / sigma - 1.0));
  EXPECT_NEAR(m.std_dev / sigma, 1.0, 0.01);
  EXPECT_LT(std::fabs(m.mean), 5.0 * sigma / std::sqrt(double(kSamples)));
  EXPECT_GT(m.max_abs, 4.0 * sigma);  // 1e6 samples reach beyond 4σ
}

TEST(KernelPhilox, TruncatedNormalStaysInsideCutoffWithTruncatedStd) {
  const double sigma = 0.5, cutoff = 2.0;
  std::vector<float> w(kSamples);
  gc::tree::core::fill_truncated_normal(w.data(), kSamples, sigma, cutoff, 99, 3);
  const Moments m = moments(w);
  EXPECT_LE(m.max_abs, float(sigma * cutoff));
  EXPECT_GT(m.max_abs, 0.99 * sigma * cutoff);
  const double factor = gc::tree::core::truncated_normal_std_factor(cutoff);
  EXPECT_NEAR(factor, 0.8796256610342398, 1e-12);  // std of N(0,1) truncated to ±2
  kt::report("philox truncated normal: |std/(sigma*factor) - 1|", std::fabs(m.std_dev / (sigma * factor) - 1.0));
  EXPECT_NEAR(m.std_dev / (sigma * factor), 1.0, 0.01);

  std::vector<float> narrow(100000);  // a tight cutoff forces many rejections
  gc::tree::core::fill_truncated_normal(narrow.data(), std::int64_t(narrow.size()), 1.0, 0.25, 5, 1);
  const Moments mn = moments(narrow);
  EXPECT_LE(mn.max_abs, 0.25f);
  EXPECT_NEAR(mn.std_dev / gc::tree::core::truncated_normal_std_factor(0.25), 1.0, 0.01);
}

TEST(KernelPhilox, UniformFillHasRequestedStdAndRange) {
  const double sigma = 0.1;
  std::vector<float> w(kSamples);
  gc::tree::core::fill_uniform(w.data(), kSamples, sigma, 42, 0);
  const Moments m = moments(w);
  EXPECT_LE(m.max_abs, float(std::sqrt(3.0) * sigma));
  EXPECT_GT(m.max_abs, 0.999 * std::sqrt(3.0) * sigma);
  kt::report("philox uniform: |std/sigma - 1|", std::fabs(m.std_dev / sigma - 1.0));
  EXPECT_NEAR(m.std_dev / sigma, 1.0, 0.01);
}

TEST(KernelPhilox, ValuesDependOnlyOnSeedTensorAndIndex) {
  const std::int64_t n = 100003;
  auto fill_all = [&](int threads) {
    std::vector<float> normal(n), trunc(n), uni(n);
    kt::with_threads(threads, [&] {
      gc::tree::core::fill_normal(normal.data(), n, 1.0, 77, 5);
      gc::tree::core::fill_truncated_normal(trunc.data(), n, 1.0, 1.5, 77, 5);
      gc::tree::core::fill_uniform(uni.data(), n, 1.0, 77, 5);
    });
    normal.insert(normal.end(), trunc.begin(), trunc.end());
    normal.insert(normal.end(), uni.begin(), uni.end());
    return normal;
  };
  EXPECT_EQ(fill_all(1), fill_all(2));

  // A prefix fill gives the same prefix; another tensor id or seed gives other values.
  std::vector<float> full(n), prefix(1000), other_tensor(1000), other_seed(1000);
  gc::tree::core::fill_normal(full.data(), n, 1.0, 77, 5);
  gc::tree::core::fill_normal(prefix.data(), 1000, 1.0, 77, 5);
  gc::tree::core::fill_normal(other_tensor.data(), 1000, 1.0, 77, 6);
  gc::tree::core::fill_normal(other_seed.data(), 1000, 1.0, 78, 5);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), full.begin()));
  int same_tensor = 0, same_seed = 0;
  for (int i = 0; i < 1000; ++i) {
    same_tensor += prefix[i] == other_tensor[i];
    same_seed += prefix[i] == other_seed[i];
  }
  EXPECT_EQ(same_tensor, 0);
  EXPECT_EQ(same_seed, 0);
}

TEST(KernelPhilox, UniformWordsAreStrictlyInsideTheUnitInterval) {
  EXPECT_EQ(gc::tree::core::philox_uniform52(0u, 0u), std::ldexp(1.0, -53));
  EXPECT_EQ(gc::tree::core::philox_uniform52(0xffffffffu, 0xffffffffu), 1.0 - std::ldexp(1.0, -53));
}

}  // namespace
