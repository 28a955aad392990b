// The replica check's fingerprint of a parameter array (train: every data-parallel rank must hold
// the same parameters, issue 41): F = Σ_i mix(mix(i) ⊕ bits(x_i)) mod 2^64, a sum of a 64-bit mix
// (SplitMix64's finalizer, Steele, Lea, Flood, OOPSLA 2014) of each element's index and bit
// pattern. Integer addition does not depend on the order, so any thread count on the CPU and any
// grid on a GPU (cuda/fingerprint.cuh) give the same value for the same bits; arrays that differ
// in any bit give different fingerprints but with probability about 2^-64.
#pragma once

#include <stdint.h>
#include <string.h>

#include "core/host_device.hpp"

namespace gc::tree::core {

GC_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Element i's term, from its bit pattern (a float's 32 bits, a bf16's 16).
GC_HD inline uint64_t fingerprint_term(uint64_t index, uint32_t bits) {
  return mix64(mix64(index + 0x9e3779b97f4a7c15ull) ^ bits);
}

GC_HD inline uint32_t bit_pattern(float x) {
  uint32_t bits = 0;
  memcpy(&bits, &x, sizeof bits);
  return bits;
}

// The fingerprint of n floats on the host (the CPU engine's parameters).
inline uint64_t fingerprint_of(const float* x, int64_t n) {
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += fingerprint_term(uint64_t(i), bit_pattern(x[i]));
  return sum;
}

}  // namespace gc::tree::core
