// CUDA emulator: <cuda_bf16.h>. __nv_bfloat16 holds the 16 high bits of an IEEE float;
// conversion from float rounds to nearest, ties to even (NaN becomes 0x7fff), conversion
// to float is exact. The implicit conversions mirror the CUDA header's host-side ones.
#pragma once

#ifndef GC_CUDA_EMULATOR
#error "the CUDA emulator's headers need -DGC_CUDA_EMULATOR"
#endif

#include <cstdint>
#include <cstring>

#include "gc_emu/device.hpp"

struct __nv_bfloat16_raw {
  unsigned short x;
};

struct __nv_bfloat16;
__nv_bfloat16 __float2bfloat16_rn(float f);
float __bfloat162float(__nv_bfloat16 h);

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(__float2bfloat16_rn(f).__x) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator float() const { return __bfloat162float(*this); }
};
typedef __nv_bfloat16 nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  __nv_bfloat16_raw r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = 0x7fffu;  // NaN: the canonical quiet NaN, as CUDA returns
  } else {
    const std::uint32_t round = 0x7fffu + ((u >> 16) & 1u);  // ties to the even neighbour
    r.x = static_cast<unsigned short>((u + round) >> 16);     // may carry into the exponent: ±inf
  }
  return __nv_bfloat16(r);
}

inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }

inline float __bfloat162float(__nv_bfloat16 h) {
  const std::uint32_t u = std::uint32_t(h.__x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
