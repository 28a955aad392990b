// Counter-based random numbers for parameter initialization: Philox-4x32-10 (Salmon, Moraes,
// Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3", SC 2011; Random123's philox4x32_R
// with R = 10), Box-Muller normals, and tensor fills: the one random stream both backends draw
// (cuda/init.cuh evaluates the same GC_HD functions per element), in the neutral core/.
//
// Element i of tensor t under experiment seed s draws from
//   counter = (lo32(i), hi32(i), t, draw),   key = (lo32(s), hi32(s))
// so every value is a pure function of (s, t, i): it does not depend on the thread count or the
// order of evaluation, and a CUDA kernel calling the same GC_HD functions yields the same raw
// 32-bit words (the double-precision log/sqrt/cos/sin of Box-Muller may differ by an ulp between
// libm and CUDA's libdevice before the final rounding to T).
//
//   uniform   u = (⌊w / 2^12⌋ + 1/2) · 2^-52 ∈ (0, 1), w the 64-bit word (x0 << 32 | x1)
//             (52 bits so that u is exact in double: min 2^-53, max 1 − 2^-53)
//   normal    r = sqrt(−2 ln u1), z0 = r cos(2π u2), z1 = r sin(2π u2)  (u1 from x0,x1; u2 from x2,x3)
//   N(0,σ²)            out_i = σ · z0 of draw 0
//   truncated normal   out_i = σ · z, z the first of z0, z1 of draws 0, 1, 2, … with |z| ≤ c
//                      (std of the result is σ · truncated_normal_std_factor(c))
//   uniform ±sqrt(3)σ  out_i = sqrt(3) σ (2u − 1), u from x0,x1 of draw 0 (std σ)
#pragma once

#include <math.h>
#include <stdint.h>

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"
#include "core/truncated_normal.hpp"

namespace gc::tree::core {

struct PhiloxCounter {
  uint32_t x[4];
};

struct PhiloxKey {
  uint32_t k[2];
};

GC_HD inline PhiloxCounter philox4x32_round(PhiloxCounter c, PhiloxKey key) {
  const uint64_t p0 = uint64_t(0xD2511F53u) * c.x[0];
  const uint64_t p1 = uint64_t(0xCD9E8D57u) * c.x[2];
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
  const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  PhiloxCounter out;
  out.x[0] = hi1 ^ c.x[1] ^ key.k[0];
  out.x[1] = lo1;
  out.x[2] = hi0 ^ c.x[3] ^ key.k[1];
  out.x[3] = lo0;
  return out;
}

// Ten rounds; the key is bumped by the Weyl constants before rounds 2..10.
GC_HD inline PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey key) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key.k[0] += 0x9E3779B9u;
      key.k[1] += 0xBB67AE85u;
    }
    c = philox4x32_round(c, key);
  }
  return c;
}

GC_HD inline PhiloxCounter philox_element_counter(uint64_t index, uint32_t tensor_id, uint32_t draw) {
  PhiloxCounter c;
  c.x[0] = uint32_t(index);
  c.x[1] = uint32_t(index >> 32);
  c.x[2] = tensor_id;
  c.x[3] = draw;
  return c;
}

GC_HD inline PhiloxKey philox_seed_key(uint64_t seed) {
  PhiloxKey key;
  key.k[0] = uint32_t(seed);
  key.k[1] = uint32_t(seed >> 32);
  return key;
}

// Top 52 bits of (hi << 32 | lo), centred in its interval: exactly representable and strictly
// inside (0, 1), so log(u) is finite (|z| ≤ sqrt(2 · 53 ln 2) ≈ 8.6).
GC_HD inline double philox_uniform52(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((uint64_t(hi) << 32) | lo) >> 12;
  return (double(bits) + 0.5) * (1.0 / 4503599627370496.0);
}

struct NormalPair {
  double z0;
  double z1;
};

GC_HD inline NormalPair philox_box_muller(PhiloxCounter r) {
  const double u1 = philox_uniform52(r.x[0], r.x[1]);
  const double u2 = philox_uniform52(r.x[2], r.x[3]);
  const double radius = sqrt(-2.0 * log(u1));
  const double angle = 6.283185307179586476925286766559 * u2;
  NormalPair pair;
  pair.z0 = radius * cos(angle);
  pair.z1 = radius * sin(angle);
  return pair;
}

GC_HD inline double philox_normal(uint64_t seed, uint32_t tensor_id, uint64_t index) {
  return philox_box_muller(philox4x32_10(philox_element_counter(index, tensor_id, 0), philox_seed_key(seed))).z0;
}

// Standard normal conditioned on |z| ≤ cutoff (cutoff > 0), by rejection over successive draws.
GC_HD inline double philox_truncated_normal(uint64_t seed, uint32_t tensor_id, uint64_t index, double cutoff) {
  const PhiloxKey key = philox_seed_key(seed);
  for (uint32_t draw = 0;; ++draw) {
    const NormalPair pair = philox_box_muller(philox4x32_10(philox_element_counter(index, tensor_id, draw), key));
    if (fabs(pair.z0) <= cutoff) {
      return pair.z0;
    }
    if (fabs(pair.z1) <= cutoff) {
      return pair.z1;
    }
  }
}

GC_HD inline double philox_uniform(uint64_t seed, uint32_t tensor_id, uint64_t index) {
  const PhiloxCounter r = philox4x32_10(philox_element_counter(index, tensor_id, 0), philox_seed_key(seed));
  return philox_uniform52(r.x[0], r.x[1]);
}

// Each fill writes elements [first, first + n) of the tensor's stream (a rank's expert block
// draws exactly the values the whole tensor has there).
template <typename T>
void fill_normal(T* out, std::int64_t n, double std_dev, std::uint64_t seed, std::uint32_t tensor_id,
                 std::int64_t first = 0) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = T(std_dev * philox_normal(seed, tensor_id, std::uint64_t(first + i)));
  }
}

// Values in [−cutoff·σ, cutoff·σ]; cutoff must be > 0.
template <typename T>
void fill_truncated_normal(T* out, std::int64_t n, double std_dev, double cutoff, std::uint64_t seed,
                           std::uint32_t tensor_id, std::int64_t first = 0) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = T(std_dev * philox_truncated_normal(seed, tensor_id, std::uint64_t(first + i), cutoff));
  }
}

// Uniform on [−sqrt(3)σ, sqrt(3)σ] (std σ).
template <typename T>
void fill_uniform(T* out, std::int64_t n, double std_dev, std::uint64_t seed, std::uint32_t tensor_id,
                  std::int64_t first = 0) {
  const double half_width = std::sqrt(3.0) * std_dev;
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = T(half_width * (2.0 * philox_uniform(seed, tensor_id, std::uint64_t(first + i)) - 1.0));
  }
}

}  // namespace gc::tree::core
