// Random group offsets for the slotted expert exchange's tests (tests/kernels/expert_slots_test.cpp,
// tests/cuda/expert_slots_test.cu).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/expert_slots.hpp"

namespace gc::test::kernels {

// Every group rank's offsets (E + 1 each, rank order): random counts whose run for each rank's
// block of experts fits a slot of S rows (between 0 and S of them, or 1 and S with min_run 1).
inline std::vector<std::int64_t> random_slot_offsets(int G, int E, std::int64_t S, std::mt19937& rng,
                                                     std::int64_t min_run = 0) {
  std::vector<std::int64_t> all;
  for (int s = 0; s < G; ++s) {
    std::vector<std::int64_t> count(std::size_t(E), 0);
    for (int q = 0; q < G; ++q) {
      const gc::tree::core::ExpertBlock b = gc::tree::core::expert_block_of(q, G, E);
      std::int64_t room = std::uniform_int_distribution<std::int64_t>(min_run, S)(rng);
      for (int e = b.lo; e < b.hi && room > 0; ++e) {
        count[std::size_t(e)] = std::uniform_int_distribution<std::int64_t>(0, room)(rng);
        room -= count[std::size_t(e)];
      }
    }
    all.push_back(0);
    for (int e = 0; e < E; ++e) all.push_back(all.back() + count[std::size_t(e)]);
  }
  return all;
}

}  // namespace gc::test::kernels
