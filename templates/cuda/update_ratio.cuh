// Update ratios ‖Δθ‖₂ / ‖θ‖₂ (seed 001's checklist) on the device, without a copy of the
// weights: at an update-ratio step, after the verdict and before AdamW, one read-only pass
// evaluates the update AdamW is about to apply (detail::adamw_element, the kernel's own
// arithmetic) and sums per tensor (θ_new − θ)² and θ² in double, in cuda/adamw.cuh's fixed
// chunking (65536-element chunks from each tensor's start, one partial pair per chunk, the
// partials added in chunk order). A stopped verdict sums nothing (no update). The host reads two
// doubles per tensor. The CPU engine computes the same sums from a copy of the tracked tensors.
#pragma once

#include <cstdint>

#include "cuda/adamw.cuh"
#include "cuda/common.cuh"
#include "step_verdict.hpp"

namespace gc::tree::cuda {

namespace detail {

// Σ (θ_new − θ)² and Σ θ² over [begin, end) by the whole block, in a fixed order.
__device__ inline void block_update_squares(double& diff, double& base, const float* __restrict__ master,
                                            const float* __restrict__ m, const float* __restrict__ v,
                                            const float* __restrict__ grad, std::int64_t begin, std::int64_t end,
                                            const AdamWScalars& s, const AdamWTensor& tensor) {
  __shared__ double scratch[32];
  diff = 0.0;
  base = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float theta = master[i];
    const double d = double(adamw_element(theta, m[i], v[i], grad[i], s, tensor).theta) - double(theta);
    diff += d * d;
    base += double(theta) * double(theta);
  }
  diff = block_sum(diff, scratch);
  base = block_sum(base, scratch);
}

// tensor_chunk_squares_kernel's slots, two partials each (Σ Δθ², Σ θ²); a tensor of numel 0
// (untracked) has no chunks.
template <int kUnused = 0>
__global__ void __launch_bounds__(kNormThreads)
    update_chunk_squares_kernel(double* __restrict__ partial, const float* __restrict__ master,
                                const float* __restrict__ m, const float* __restrict__ v,
                                const float* __restrict__ grad, const AdamWTensor* __restrict__ tensors,
                                int num_tensors, AdamWScalars s, const StepVerdict* __restrict__ verdict) {
  const std::int64_t b = blockIdx.x;
  if (verdict->stopped_at != 0) {  // no update: nothing moves
    if (threadIdx.x == 0) partial[2 * b] = partial[2 * b + 1] = 0.0;
    return;
  }
  s.grad_scale = float(verdict->clip);
  const SlotChunk chunk = chunk_of_slot(tensors, num_tensors, b);
  if (chunk.t < 0) return;
  double diff, base;
  block_update_squares(diff, base, master, m, v, grad, chunk.begin, chunk.end, s, tensors[chunk.t]);
  if (threadIdx.x == 0) {
    partial[2 * b] = diff;
    partial[2 * b + 1] = base;
  }
}

}  // namespace detail

// out_device[2t], [2t+1] = Σ (θ_new − θ)², Σ θ² over tensor t, θ_new what AdamW with these
// settings (and the verdict's clip) will write; before adamw_step_judged, on stream 0,
// asynchronous. tensors_device: the AdamW table with numel 0 for tensors not to measure.
inline void update_squares_per_tensor(double* out_device, double* partial, const float* master, const float* m,
                                      const float* v, const float* grad, const AdamWTensor* tensors_device,
                                      int num_tensors, std::int64_t total, double lr, double beta1, double beta2,
                                      double eps, std::int64_t step, const StepVerdict* verdict_device) {
  if (num_tensors <= 0) return;
  const std::int64_t slots = (total > 0 ? total : 0) / detail::kNormChunk + num_tensors;
  launch(detail::update_chunk_squares_kernel<>, unsigned(slots), detail::kNormThreads, 0, partial, master, m, v,
         grad, tensors_device, num_tensors, detail::adamw_scalars(lr, beta1, beta2, eps, step, 1.0), verdict_device);
  const int blocks = (num_tensors + detail::kFinalizeThreads - 1) / detail::kFinalizeThreads;
  launch(detail::chunk_partials_finalize_kernel<2>, blocks, detail::kFinalizeThreads, 0, out_device, partial,
         tensors_device, num_tensors);
}

}  // namespace gc::tree::cuda
