// Under expert parallelism a rank's fp32 masters lie in its state layout (model/state_layout.hpp:
// an expert tensor's own block only), and so do its working weights (engine/cuda_engine.cu passes
// each part's slot as its offset; the kernel takes any place for each part). After AdamW updates
// the masters, every held element goes to its place in the working weights (rounded to bf16
// under bf16):
//
//   whole[whole_offsets[t] + (j − parts[t].offset)] = local[j]   for j in [parts[t].offset, + numel)
//
// parts: the AdamW table of the layout (rows sorted by offset, disjoint; gaps untouched).
#pragma once

#include <cstdint>

#include "cuda/adamw.cuh"
#include "cuda/common.cuh"

namespace gc::tree::cuda {

template <typename T>
__global__ void copy_parts_to_whole_kernel(T* __restrict__ whole, const float* __restrict__ local,
                                           const AdamWTensor* __restrict__ parts,
                                           const std::int64_t* __restrict__ whole_offsets, int tensors,
                                           std::int64_t total) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < total; j += stride) {
    const int t = detail::last_tensor_at_or_before(parts, tensors, j);
    if (t < 0 || j >= parts[t].offset + parts[t].numel) continue;  // before the first part, or in a gap
    whole[whole_offsets[t] + (j - parts[t].offset)] = from_float<T>(local[j]);
  }
}

// The layout's `total` slots of `local` into `whole` (one launch).
template <typename T>
void copy_parts_to_whole(T* whole, const float* local, const AdamWTensor* parts, const std::int64_t* whole_offsets,
                         int tensors, std::int64_t total) {
  if (total <= 0) return;
  constexpr int kThreads = 256;
  launch(copy_parts_to_whole_kernel<T>, blocks_for(total, kThreads), kThreads, 0, whole, local, parts, whole_offsets,
         tensors, total);
}

}  // namespace gc::tree::cuda
