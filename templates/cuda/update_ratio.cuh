// Update ratios ‖Δθ‖₂ / ‖θ‖₂ (seed 001's checklist) on the device: the tracked tensors' fp32
// master weights are copied aside (device to device) before the step, and after it each
// tensor's Σ (θ_after − θ_before)² and Σ θ_before² are reduced on the device in a fixed order
// (chunks of 65536 elements, one partial pair per chunk, the partials added in chunk order) and
// copied back as two doubles. The CPU engine computes the same sums serially on the host.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "cuda/common.cuh"
#include "metrics/device_scratch.hpp"
#include "runtime/cuda/check.hpp"

namespace gcm::cuda {

namespace detail {

inline constexpr std::int64_t kDiffChunk = metrics::kNormChunk;
inline constexpr int kDiffThreads = 256;

// Block c: partial[2c] = Σ (now − before)², partial[2c+1] = Σ before² over chunk c of n elements.
template <typename = void>
__global__ void diff_squares_chunks_kernel(double* __restrict__ partial, const float* __restrict__ now,
                                           const float* __restrict__ before, std::int64_t n) {
  __shared__ double scratch[kWarp];
  const std::int64_t begin = std::int64_t(blockIdx.x) * kDiffChunk;
  const std::int64_t end = begin + kDiffChunk < n ? begin + kDiffChunk : n;
  double diff = 0.0, base = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double b = double(before[i]), d = double(now[i]) - b;
    diff += d * d;
    base += b * b;
  }
  diff = block_sum(diff, scratch);
  base = block_sum(base, scratch);
  if (threadIdx.x == 0) {
    partial[2 * std::int64_t(blockIdx.x)] = diff;
    partial[2 * std::int64_t(blockIdx.x) + 1] = base;
  }
}

// out = the chunk partials added in chunk order (one thread).
template <typename = void>
__global__ void sum_pair_partials_kernel(double* __restrict__ out, const double* __restrict__ partial,
                                         std::int64_t chunks) {
  double diff = 0.0, base = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    diff += partial[2 * c];
    base += partial[2 * c + 1];
  }
  out[0] = diff;
  out[1] = base;
}

}  // namespace detail

// The tensors' values before a step, and their update sums after it. `parts`: each tracked
// tensor's range in the device array being updated (this rank's shard of it under ZeRO-1).
class UpdateSnapshot {
 public:
  struct Part {
    int tensor;
    std::int64_t begin, size;  // elements of the updated array
  };
  // Sizes the copy for `parts` (before training: nothing is allocated in the loop), as
  // metrics/device_scratch.hpp's UpdateScratch counts it.
  void prepare(const std::vector<Part>& parts) {
    parts_ = parts;
    metrics::UpdateScratch size;
    for (const Part& p : parts) {
      size.elements += p.size;
      size.max_part = std::max(size.max_part, p.size);
    }
    before_.resize(std::size_t(size.before_floats()));
    partial_.resize(std::size_t(size.partial_doubles()));
  }
  // Before the step: the parts of `weights` (asynchronous, on the default stream).
  void keep(const float* weights) {
    std::int64_t at = 0;
    for (const Part& p : parts_) {
      GC_CUDA_CHECK(cudaMemcpyAsync(before_.data() + at, weights + p.begin, std::size_t(p.size) * sizeof(float),
                                    cudaMemcpyDeviceToDevice));
      at += p.size;
    }
  }
  // After the step: per tracked tensor {Σ Δθ², Σ θ_before²} over its part, into out[tensor].
  void sums(const float* weights, std::vector<std::array<double, 2>>& out) {
    std::int64_t at = 0;
    for (const Part& p : parts_) {
      const std::int64_t chunks = (p.size + detail::kDiffChunk - 1) / detail::kDiffChunk;
      double pair[2] = {0.0, 0.0};
      if (chunks > 0) {
        launch(detail::diff_squares_chunks_kernel<>, unsigned(chunks), detail::kDiffThreads, 0, partial_.data() + 2,
               weights + p.begin, before_.data() + at, p.size);
        launch(detail::sum_pair_partials_kernel<>, 1, 1, 0, partial_.data(), partial_.data() + 2, chunks);
        gc::rt::cuda::copy_to_host(pair, partial_.data(), sizeof pair);
      }
      out[std::size_t(p.tensor)][0] += pair[0];
      out[std::size_t(p.tensor)][1] += pair[1];
      at += p.size;
    }
  }

 private:
  std::vector<Part> parts_;
  gc::rt::cuda::DeviceBuffer<float> before_;
  gc::rt::cuda::DeviceBuffer<double> partial_;
};

}  // namespace gcm::cuda
