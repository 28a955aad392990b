// Expert parallelism's slotted exchange on the CPU: pack a rank's rows into one slot per group
// rank, unpack them back, and the permutation between the received slots and the owned experts'
// expert-major rows. The index math: core/expert_slots.hpp. The CUDA kernels:
// cuda/expert_slots.cuh (tests/cuda/expert_slots_test.cu checks them against these).
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/expert_slots.hpp"

namespace gc::tree::cpu {

// slots[q·S + i] = rows[offsets[lo_q] + i] for i < n_q, zeros for the rest of the slot.
template <typename T>
void expert_slots_pack(T* slots, const T* rows, const std::int64_t* offsets, int G, std::int64_t S, int dim,
                       int experts) {
  for (int q = 0; q < G; ++q) {
    const core::ExpertBlock b = core::expert_block_of(q, G, experts);
    const std::int64_t first = offsets[b.lo], n = offsets[b.hi] - first;
    T* slot = slots + std::int64_t(q) * S * dim;
    std::copy(rows + first * dim, rows + (first + n) * dim, slot);
    std::fill(slot + n * dim, slot + S * dim, T(0));
  }
}

// rows[offsets[lo_q] + i] = slots[q·S + i] for i < n_q: the inverse of expert_slots_pack.
template <typename T>
void expert_slots_unpack(T* rows, const T* slots, const std::int64_t* offsets, int G, std::int64_t S, int dim,
                         int experts) {
  for (int q = 0; q < G; ++q) {
    const core::ExpertBlock b = core::expert_block_of(q, G, experts);
    const std::int64_t first = offsets[b.lo], n = offsets[b.hi] - first;
    const T* slot = slots + std::int64_t(q) * S * dim;
    std::copy(slot, slot + n * dim, rows + first * dim);
  }
}

// perm[p] = slot row of expert-major row p and unperm[slot row] = p, for C rows each: the
// received rows' entries as core/expert_slots.hpp says; every other entry maps to itself (padding
// slot rows and expert-major rows past the received count hold values nobody reads). Walked
// expert-major, O(C + E·G) (the CUDA kernel maps each slot row instead: one thread a row).
inline void expert_slots_route(std::int32_t* perm, std::int32_t* unperm, std::int64_t* local_offsets,
                               const std::int64_t* all_offsets, int G, std::int64_t S, core::ExpertBlock b,
                               std::int64_t C, int experts) {
  core::slot_local_offsets(local_offsets, all_offsets, G, b, experts);
  for (std::int64_t r = 0; r < C; ++r) perm[r] = unperm[r] = std::int32_t(r);
  std::int64_t p = 0;
  for (int e = b.lo; e < b.hi; ++e) {
    for (int s = 0; s < G; ++s) {
      const std::int64_t* o = all_offsets + std::int64_t(s) * (experts + 1);
      const std::int64_t first = std::int64_t(s) * S + (o[e] - o[b.lo]), n = o[e + 1] - o[e];
      for (std::int64_t i = 0; i < n; ++i, ++p) {
        perm[p] = std::int32_t(first + i);
        unperm[first + i] = std::int32_t(p);
      }
    }
  }
}

}  // namespace gc::tree::cpu
