// CUDA emulator: what kernel code sees. Execution-space qualifiers are no-ops, the built-in
// index variables are set by the scheduler (src/scheduler.cpp) before it resumes a CUDA thread,
// __syncthreads and the warp collectives are strict barriers, and the math functions are the
// host's (glibc rounding, not the GPU's: results agree to a few ulp, not bit for bit).
#pragma once

#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gc_emu/types.hpp"

// ---- qualifiers ------------------------------------------------------------------------------
// __restrict__ is understood by g++ and clang as it is.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __constant__ static
// Shared memory: one static object per kernel instantiation, which all threads of the running
// block see. Blocks run one after another, so this is the block's shared memory; it is NOT
// cleared between blocks (a kernel that reads shared memory it did not write in the same block
// sees the previous block's values here and garbage on a GPU). Dynamic shared memory
// (`extern __shared__`) is templates/cuda/hopper.cuh's dynamic_shared(), gc_emu/hopper.hpp.
#define __shared__ static

// ---- built-in variables ----------------------------------------------------------------------
// Per OS thread; the CUDA threads of a block are fibers on one OS thread, and the scheduler
// rewrites threadIdx each time it switches to one.
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

// ---- barriers and warp collectives -----------------------------------------------------------
namespace gc::emu {

enum class Collective : int { sync_warp, shfl_idx, shfl_up, shfl_down, shfl_xor };

// Waits (as a fiber) until every lane of `mask` has made the same call, then returns the 8-byte
// value that lane `src` deposited, where `src` follows from `kind`, `arg` and `width` as CUDA
// documents for the __shfl_*_sync functions. Aborts on a mask, kind or width mismatch.
std::uint64_t warp_collective(Collective kind, unsigned mask, std::uint64_t value, int arg, int width);

template <typename T>
T shuffle(Collective kind, unsigned mask, T var, int arg, int width) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_collective(kind, mask, bits, arg, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

}  // namespace gc::emu

// Every thread of the block must arrive; one that exits or waits elsewhere is a deadlock.
void __syncthreads();

inline void __syncwarp(unsigned mask = 0xffffffffu) {
  gc::emu::warp_collective(gc::emu::Collective::sync_warp, mask, 0, 0, warpSize);
}
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return gc::emu::shuffle(gc::emu::Collective::shfl_idx, mask, var, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gc::emu::shuffle(gc::emu::Collective::shfl_up, mask, var, int(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gc::emu::shuffle(gc::emu::Collective::shfl_down, mask, var, int(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return gc::emu::shuffle(gc::emu::Collective::shfl_xor, mask, var, lane_mask, width);
}

// ---- math ------------------------------------------------------------------------------------
// expf, exp2f, logf, log2f, sqrtf, fmaxf, ... come from <math.h> in the global namespace. CUDA's
// min/max overloads and the fast intrinsics (here exact: the host has no fast variants):
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

#include "gc_emu/mma.hpp"
