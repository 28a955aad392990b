// The replica check's fingerprint of a device array (core/fingerprint.hpp): each thread adds the
// terms of a grid-stride run of elements, each block adds its threads' sums, one thread adds the
// blocks'. Integer sums: the same value for any grid and order, and the CPU's for fp32 arrays.
#pragma once

#include <cstdint>

#include "core/fingerprint.hpp"
#include "cuda/common.cuh"
#include "runtime/cuda/check.hpp"

namespace gc::tree::cuda {

inline constexpr int kFingerprintThreads = 256, kFingerprintBlocks = 256;

__device__ inline std::uint32_t fingerprint_bits(float x) { return core::bit_pattern(x); }
__device__ inline std::uint32_t fingerprint_bits(bf16 x) { return std::uint32_t(__bfloat16_as_ushort(x)); }

template <typename T>
__global__ void fingerprint_blocks_kernel(std::uint64_t* partials, const T* x, std::int64_t n) {
  __shared__ std::uint64_t sums[kFingerprintThreads];
  std::uint64_t sum = 0;
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    sum += core::fingerprint_term(std::uint64_t(i), fingerprint_bits(x[i]));
  }
  sums[threadIdx.x] = sum;
  __syncthreads();
  for (int half = kFingerprintThreads / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partials[blockIdx.x] = sums[0];
}

template <int = 0>
__global__ void fingerprint_total_kernel(std::uint64_t* total, const std::uint64_t* partials, int blocks) {
  std::uint64_t sum = 0;
  for (int b = 0; b < blocks; ++b) sum += partials[b];
  *total = sum;
}

// scratch: kFingerprintBlocks + 1 values; the fingerprint lands in scratch[kFingerprintBlocks].
template <typename T>
void fingerprint(std::uint64_t* scratch, const T* x, std::int64_t n) {
  launch(fingerprint_blocks_kernel<T>, unsigned(kFingerprintBlocks), unsigned(kFingerprintThreads), 0, scratch, x, n);
  launch(fingerprint_total_kernel<>, 1u, 1u, 0, scratch + kFingerprintBlocks,
         static_cast<const std::uint64_t*>(scratch), kFingerprintBlocks);
}

// Its scratch and the read of the result (one device → host copy, which waits for the GPU).
class DeviceFingerprint {
 public:
  DeviceFingerprint() : scratch_(std::size_t(kFingerprintBlocks) + 1) {}
  template <typename T>
  std::uint64_t of(const T* x, std::int64_t n) {
    fingerprint(scratch_.data(), x, n);
    std::uint64_t value = 0;
    gc::rt::cuda::copy_to_host(&value, scratch_.data() + kFingerprintBlocks, sizeof value);
    return value;
  }

 private:
  gc::rt::cuda::DeviceBuffer<std::uint64_t> scratch_;
};

}  // namespace gc::tree::cuda
