// Expert parallelism's slotted exchange on the GPU (the semantics of cpu/expert_slots.hpp; the
// index math: core/expert_slots.hpp). Everything reads the offsets where they lie, so a slotted
// route copies nothing to the host:
//   pack / unpack   one thread per element of a slot row (G · S rows of dim values)
//   route           one thread computes the owned experts' offsets (E · G additions), then one
//                   thread per row of the C-row bound writes its perm and unperm entries
// No atomics: every entry has one writer.
#pragma once

#include <cstdint>

#include "core/expert_slots.hpp"
#include "cuda/common.cuh"

namespace gc::tree::cuda {

inline constexpr int kSlotThreads = 256;

// Slot row r's run of its rank's block: rows of the source [first, first + n).
struct SlotRun {
  std::int64_t first, n;
};
__device__ inline SlotRun slot_run(const std::int64_t* offsets, int q, int G, int experts) {
  const core::ExpertBlock b = core::expert_block_of(q, G, experts);
  return {offsets[b.lo], offsets[b.hi] - offsets[b.lo]};
}

template <typename T>
__global__ void expert_slots_pack_kernel(T* slots, const T* rows, const std::int64_t* offsets, int G, std::int64_t S,
                                         int dim, int experts) {
  const std::int64_t total = std::int64_t(G) * S * dim, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const std::int64_t r = k / dim, q = r / S, i = r - q * S;
    const SlotRun run = slot_run(offsets, int(q), G, experts);
    slots[k] = i < run.n ? rows[(run.first + i) * dim + k % dim] : from_float<T>(0.0f);
  }
}

template <typename T>
__global__ void expert_slots_unpack_kernel(T* rows, const T* slots, const std::int64_t* offsets, int G,
                                           std::int64_t S, int dim, int experts) {
  const std::int64_t total = std::int64_t(G) * S * dim, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += stride) {
    const std::int64_t r = k / dim, q = r / S, i = r - q * S;
    const SlotRun run = slot_run(offsets, int(q), G, experts);
    if (i < run.n) rows[(run.first + i) * dim + k % dim] = slots[k];
  }
}

template <int = 0>
__global__ void expert_slots_offsets_kernel(std::int64_t* local_offsets, const std::int64_t* all_offsets, int G,
                                            core::ExpertBlock b, int experts) {
  if (blockIdx.x == 0 && threadIdx.x == 0) core::slot_local_offsets(local_offsets, all_offsets, G, b, experts);
}

template <int = 0>
__global__ void expert_slots_route_kernel(std::int32_t* perm, std::int32_t* unperm, const std::int64_t* local_offsets,
                                          const std::int64_t* all_offsets, int G, std::int64_t S, core::ExpertBlock b,
                                          std::int64_t C, int experts) {
  const std::int64_t received = local_offsets[b.hi - b.lo], stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < C; r += stride) {
    if (r >= received) perm[r] = std::int32_t(r);  // past the received rows: itself
    const std::int64_t p = core::slot_row_to_expert_major(all_offsets, local_offsets, r, G, S, b, experts);
    unperm[r] = std::int32_t(p < 0 ? r : p);
    if (p >= 0) perm[p] = std::int32_t(r);  // p < received: no other row writes it
  }
}

template <typename T>
void expert_slots_pack(T* slots, const T* rows, const std::int64_t* offsets, int G, std::int64_t S, int dim,
                       int experts) {
  const std::int64_t total = std::int64_t(G) * S * dim;
  if (total <= 0) return;
  launch(expert_slots_pack_kernel<T>, blocks_for(total, kSlotThreads), kSlotThreads, 0, slots, rows, offsets, G, S,
         dim, experts);
}

template <typename T>
void expert_slots_unpack(T* rows, const T* slots, const std::int64_t* offsets, int G, std::int64_t S, int dim,
                         int experts) {
  const std::int64_t total = std::int64_t(G) * S * dim;
  if (total <= 0) return;
  launch(expert_slots_unpack_kernel<T>, blocks_for(total, kSlotThreads), kSlotThreads, 0, rows, slots, offsets, G, S,
         dim, experts);
}

inline void expert_slots_route(std::int32_t* perm, std::int32_t* unperm, std::int64_t* local_offsets,
                               const std::int64_t* all_offsets, int G, std::int64_t S, core::ExpertBlock b,
                               std::int64_t C, int experts) {
  launch(expert_slots_offsets_kernel<>, 1u, 1u, 0, local_offsets, all_offsets, G, b, experts);
  if (C <= 0) return;
  launch(expert_slots_route_kernel<>, blocks_for(C, kSlotThreads), kSlotThreads, 0, perm, unperm, local_offsets,
         all_offsets, G, S, b, C, experts);
}

}  // namespace gc::tree::cuda
