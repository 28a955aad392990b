// Shared by the CUDA kernels: element types, conversions, launch geometry and
// block-wide reductions. Activations and working weights are T (float or
// __nv_bfloat16); every accumulation is fp32 (or fp64 where noted), matching
// the CPU backend's arithmetic up to rounding.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

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
  gc::emu::launch(kernel, grid, block, smem, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem>>>(std::forward<Args>(args)...);
#endif
  GC_CUDA_CHECK_LAUNCH();
}

// launch() with `bytes` of dynamic shared memory: above 48 KiB the kernel's limit is raised the
// first time (once per kernel: the static belongs to this KERNEL's instantiation, whose size is
// a constant of it).
template <auto KERNEL, typename... Args>
void launch_with_dynamic_shared(dim3 grid, dim3 block, std::size_t bytes, Args&&... args) {
  static const bool allowed = [&] {
    GC_CUDA_CHECK(cudaFuncSetAttribute(KERNEL, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    return true;
  }();
  (void)allowed;
  launch(KERNEL, grid, block, bytes, std::forward<Args>(args)...);
}

inline unsigned blocks_for(std::int64_t n, int threads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return unsigned(b < 1 ? 1 : (b > 65535LL * 16 ? 65535LL * 16 : b));
}

// ---- packed row access ---------------------------------------------------------------------
// A row of kDim elements of T walked by one warp with compile-time trip counts: lane `lane`
// owns packs of kVec consecutive elements, pack c starting at c·32·kVec + lane·kVec, so a warp
// reads 32·kVec consecutive elements per step (one 128-bit load a lane for bf16 rows that are a
// multiple of 256 wide, or fp32 rows of 128). kVec is the widest pack of at most 16 bytes that
// tiles the row exactly; a row that no pack tiles (kDim not a multiple of 32) takes kVec = 1 and
// a bound check on its last step only. Rows must start on a kVec·sizeof(T)-byte boundary
// (cudaMalloc'd buffers and row strides of kDim elements do; check_pack_aligned tells).
template <typename T>
constexpr int widest_pack(int dim) {
  for (int v = int(16 / sizeof(T)); v > 1; v /= 2) {
    if (dim % (kWarp * v) == 0) return v;
  }
  return 1;
}

// The widest pack (at most 16 bytes) that divides a row of `dim` elements: for kernels where
// one thread handles one pack.
template <typename T>
constexpr int row_pack(int dim) {
  for (int v = int(16 / sizeof(T)); v > 1; v /= 2) {
    if (dim % v == 0) return v;
  }
  return 1;
}

template <int kDim, typename T>
struct WarpRow {
  static constexpr int kVec = widest_pack<T>(kDim);
  static constexpr int kStride = kWarp * kVec;  // elements the warp covers per step
  static constexpr int kSteps = (kDim + kStride - 1) / kStride;
  static constexpr bool kExact = kDim % kStride == 0;
  __host__ __device__ static constexpr int start(int lane, int step) { return step * kStride + lane * kVec; }
  __host__ __device__ static constexpr bool in_row(int lane, int step) { return kExact || start(lane, step) < kDim; }
};

// kVec elements as one aligned memory access.
template <int kVec, typename T>
struct alignas(kVec * sizeof(T)) Pack {
  T v[kVec];
};

template <int kVec, typename T>
__device__ __forceinline__ void load_pack(float (&dst)[kVec], const T* src) {
  const Pack<kVec, T> p = *reinterpret_cast<const Pack<kVec, T>*>(src);
#pragma unroll
  for (int e = 0; e < kVec; ++e) dst[e] = to_float(p.v[e]);
}

template <int kVec, typename T>
__device__ __forceinline__ void store_pack(T* dst, const float (&src)[kVec]) {
  Pack<kVec, T> p;
#pragma unroll
  for (int e = 0; e < kVec; ++e) p.v[e] = from_float<T>(src[e]);
  *reinterpret_cast<Pack<kVec, T>*>(dst) = p;
}

// Whether every pointer may be read in packs of kVec elements of T.
template <int kVec, typename T, typename... P>
bool packs_aligned(const P*... pointers) {
  const auto aligned = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % (kVec * sizeof(T)) == 0; };
  return (aligned(pointers) && ...);
}

// Throws unless every pointer may be read in packs of kVec elements of T (a host-side guard of
// the kernels that use WarpRow or row_pack; every buffer of the model satisfies it).
template <int kVec, typename T, typename... P>
void check_pack_aligned(const char* who, const P*... pointers) {
  if (!packs_aligned<kVec, T>(pointers...)) {
    throw gc::rt::RuntimeError(std::string(who) + ": a buffer is not aligned to " +
                               std::to_string(kVec * sizeof(T)) + " bytes (its rows are read in packs)");
  }
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

}  // namespace gc::tree::cuda
