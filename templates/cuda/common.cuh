// Shared by the CUDA kernels: element types, conversions, launch geometry and
// block-wide reductions. Activations and working weights are T (float or
// __nv_bfloat16); every accumulation is fp32 (or fp64 where noted), matching
// the CPU backend's arithmetic up to rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/cuda/check.hpp"

namespace gcm::cuda {

using bf16 = __nv_bfloat16;

__host__ __device__ inline float to_float(float x) { return x; }
__host__ __device__ inline float to_float(bf16 x) { return __bfloat162float(x); }

template <typename T>
__host__ __device__ inline T from_float(float x);
template <>
__host__ __device__ inline float from_float<float>(float x) {
  return x;
}
template <>
__host__ __device__ inline bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}

inline constexpr int kWarp = 32;

// kernel<<<grid, block, smem>>>(args...) on the default stream, then GC_CUDA_CHECK_LAUNCH(). Every
// launch goes through here so that, compiled with -DGC_CUDA_EMULATOR against tests/cuda_emulator
// (the same sources built by the host compiler), the grid runs on the CPU instead. kernel is a
// __global__ function such as rmsnorm_forward_kernel<T>; args convert to its parameters as in a
// launch.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, Args&&... args) {
#ifdef GC_CUDA_EMULATOR
  gc_emu::launch(kernel, grid, block, smem, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem>>>(std::forward<Args>(args)...);
#endif
  GC_CUDA_CHECK_LAUNCH();
}

inline unsigned blocks_for(std::int64_t n, int threads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535LL * 16 ? 65535LL * 16 : b));
}

struct SumOp {
  template <typename V>
  __device__ V operator()(V a, V b) const {
    return a + b;
  }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Butterfly reduction over the 32 lanes of a warp; every lane gets the result.
template <typename V, typename Op>
__device__ inline V warp_reduce(V v, Op op) {
  for (int off = kWarp / 2; off > 0; off /= 2) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Reduction over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the result. The order is fixed by the thread layout, so results
// repeat run to run. `scratch` holds 32 values of shared memory.
template <typename V, typename Op>
__device__ inline V block_reduce(V v, V* scratch, V identity, Op op) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  v = warp_reduce(v, op);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / kWarp;
  return warp_reduce(lane < warps ? scratch[lane] : identity, op);
}

template <typename V>
__device__ inline V warp_sum(V v) {
  return warp_reduce(v, SumOp{});
}
__device__ inline float warp_max(float v) { return warp_reduce(v, MaxOp{}); }

// Block sum in float or double (fixed order).
template <typename V>
__device__ inline V block_sum(V v, V* scratch) {
  return block_reduce(v, scratch, V(0), SumOp{});
}
__device__ inline float block_max(float v, float* scratch) {
  return block_reduce(v, scratch, -INFINITY, MaxOp{});
}

}  // namespace gcm::cuda
