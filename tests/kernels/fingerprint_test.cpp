// core/fingerprint.hpp, the replica check's fingerprint: the same bits give the same value in any
// order of summation; one flipped bit, a swapped pair or a sign change give another.
#include "core/fingerprint.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/kernel_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

std::uint64_t fingerprint(const std::vector<float>& x) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    sum += gc::tree::core::fingerprint_term(i, gc::tree::core::bit_pattern(x[i]));
  return sum;
}

TEST(Fingerprint, EqualBitsGiveEqualValuesInAnyOrder) {
  const auto d = kt::random_vector(1000, 5);
  const std::vector<float> x(d.begin(), d.end());
  std::uint64_t backwards = 0;  // the terms added in reverse: integer sums do not depend on it
  for (std::size_t i = x.size(); i-- > 0;)
    backwards += gc::tree::core::fingerprint_term(i, gc::tree::core::bit_pattern(x[i]));
  EXPECT_EQ(fingerprint(x), backwards);
  EXPECT_EQ(fingerprint(x), fingerprint(std::vector<float>(x)));
}

TEST(Fingerprint, AnyChangedBitChangesIt) {
  const auto d = kt::random_vector(1000, 6);
  const std::vector<float> x(d.begin(), d.end());
  const std::uint64_t base = fingerprint(x);
  for (std::size_t i : {std::size_t(0), std::size_t(499), std::size_t(999)}) {
    for (int bit : {0, 13, 31}) {
      std::vector<float> y = x;
      std::uint32_t bits = gc::tree::core::bit_pattern(y[i]) ^ (1u << bit);
      std::memcpy(&y[i], &bits, sizeof bits);
      EXPECT_NE(fingerprint(y), base) << "element " << i << " bit " << bit;
    }
  }
  std::vector<float> swapped = x;
  std::swap(swapped[3], swapped[4]);
  EXPECT_NE(fingerprint(swapped), base);  // the index enters each term
  EXPECT_NE(fingerprint(std::vector<float>{0.0f}), fingerprint(std::vector<float>{-0.0f}));
}

}  // namespace
