// Which slots of the gradients and of the optimizer state (fp32 masters, AdamW moments) a CUDA
// rank updates (engine/cuda_engine.cu): its shard (engine/zero.hpp's ZeroShards) of the
// gradients' layout: every tensor whole over one rank (one process, plain data parallelism), the
// whole flat array cut over the world (ZeRO-1), the rank's expert-block layout over one rank
// (expert parallelism; model/state_layout.hpp), or that layout cut over the block's owners (both).
// The AdamW, Σ g² and update-ratio passes walk the table's rows (cuda/adamw.cuh's layout
// contract).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "config.hpp"
#include "cuda/adamw.cuh"
#include "engine/zero.hpp"
#include "model/state_layout.hpp"
#include "plan.hpp"

namespace gc::tree {

struct UpdateParts {
  const ZeroShards& shard;

  // Slots of the rank's state arrays.
  std::int64_t slots() const { return shard.size(); }
  // Tensor i's first element the rank updates (relative to the tensor).
  std::int64_t first(int i) const {
    const StateLayout& layout = shard.layout();
    return layout.first(i) + std::max<std::int64_t>(0, shard.lo - layout.at(i));
  }
  // One row per tensor: its slots in the rank's arrays (offsets from the shard's start); with
  // `mask`, numel 0 for the tensors it leaves out (the update-ratio pass's table).
  std::vector<cuda::AdamWTensor> table(const bool* mask = nullptr) const {
    std::vector<cuda::AdamWTensor> rows;
    for (int i = 0; i < kNumParams; ++i) {
      const bool left_out = mask != nullptr && !mask[i];
      const float lr_mult = float(kParams[i].lr_mult), decay = float(kParams[i].weight_decay);
      const auto [a, b] = shard.overlap(i);  // a = the tensor's first slot clamped into the shard
      const std::int64_t n = left_out ? 0 : std::max<std::int64_t>(0, b - a);
      rows.push_back({std::min(a, shard.hi) - shard.lo, n, lr_mult, decay});
    }
    return rows;
  }
};

}  // namespace gc::tree
