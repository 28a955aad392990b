// Per-tensor sums completed over an expert-parallel group in rank order (engine/
// nccl_expert_exchange.cuh): the group's partials gathered, then each summed entry added rank 0,
// 1, ... on the device, so every group gets the same bits. An all-reduce guarantees one result
// within its communicator only: two groups of 3 or more ranks may add in different orders, give
// different gradient norms and clip multipliers, and their replicas of the shared weights drift
// apart (issue 41, hazard 4).
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace gc::tree::cuda {

// out[j] = Σ_{r < G} all[r·n + j] (r ascending) where summed[j], else all[j] (rank 0's).
template <int = 0>
__global__ void add_rows_in_rank_order_kernel(double* out, const double* all, const std::uint8_t* summed, int G,
                                              std::int64_t n) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  double sum = all[j];
  if (summed[j] != 0) {
    for (int r = 1; r < G; ++r) sum += all[std::int64_t(r) * n + j];
  }
  out[j] = sum;
}

inline void add_rows_in_rank_order(double* out, const double* all, const std::uint8_t* summed, int G, std::int64_t n) {
  if (n <= 0) return;
  launch(add_rows_in_rank_order_kernel<>, blocks_for(n, 128), 128u, 0, out, all, summed, G, n);
}

}  // namespace gc::tree::cuda
