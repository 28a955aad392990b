// exp(x) in double for the CPU kernels' hot loops (softmax, cross-entropy, SiLU, sigmoid gates):
// one branch-free sequence of arithmetic and integer bit operations, so a loop that calls it
// vectorizes (2 doubles per SSE2 register, more with AVX), and its result depends on x alone:
// not on the C library, the thread count or the vector lane an element lands in.
//
//   x = n·ln2 + r,  n = round(x·log2 e),  |r| ≤ ln2/2 (Cody–Waite: ln2 split in a high part
//   with trailing zero bits, so n·ln2_hi is exact for |n| < 2^11);
//   exp(r) = Σ_{k≤13} r^k / k!  (the first omitted term is below 5e-18 relative);
//   2^n = 2^n₁ · 2^n₂ with n₁ = round(n/2), n₂ = n − n₁, each built in the exponent bits, so
//   results below the normal range round gradually to subnormals and to 0 as exp does.
//
// Accuracy: within 3 ulp of std::exp on [−745, 709.78] (tests/kernels/exp_test.cpp). x is
// clamped to [−1100, 709.78]: exp(−∞) = 0 and large x give 1.8e308 instead of ∞ (the kernels
// never ask for more). A NaN argument returns NaN, so a non-finite loss still shows.
#pragma once

#include <cstdint>
#include <cstring>

namespace gc::tree::cpu {

namespace detail {

inline std::int64_t bits_of(double x) {
  std::int64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

inline double double_of(std::int64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// round(v) for |v| < 2^51, as the integer in the low bits of v + 1.5·2^52 (round to nearest even).
inline constexpr double kRoundMagic = 6755399441055744.0;

inline double two_to(std::int64_t n) { return double_of((n + 1023) << 52); }  // n in [−1022, 1023]

}  // namespace detail

inline double exp_fixed(double x) {
  using namespace detail;
  constexpr double kLog2e = 1.4426950408889634074;
  constexpr double kLn2Hi = 6.93147180369123816490e-01, kLn2Lo = 1.90821492927058770002e-10;
  const double clamped = x < -1100.0 ? -1100.0 : (x > 709.78 ? 709.78 : x);
  const double t = clamped * kLog2e + kRoundMagic;
  const double n = t - kRoundMagic;  // round(x·log2 e), exactly an integer
  const std::int64_t n_int = bits_of(t) - bits_of(kRoundMagic);
  const double r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const std::int64_t n1 = bits_of(n * 0.5 + kRoundMagic) - bits_of(kRoundMagic);
  const double result = p * two_to(n1) * two_to(n_int - n1);
  return x != x ? x : result;
}

}  // namespace gc::tree::cpu
