// Which slots of the gradients and of the optimizer state (fp32 masters, AdamW moments) a CUDA
// rank updates (engine/cuda_engine.cu): every tensor whole (one process, plain data parallelism),
// the tensors' parts in its ZeRO-1 shard of the flat array (engine/zero.hpp), or under expert
// parallelism without ZeRO-1 its expert-block layout (model/state_layout.hpp). The AdamW, Σ g²
// and update-ratio passes walk the table's rows (cuda/adamw.cuh's layout contract).
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
  const StateLayout* blocks;  // the expert-block layout, or null

  // Slots of the rank's state arrays.
  std::int64_t slots() const { return blocks != nullptr ? blocks->total() : shard.size(); }
  // Tensor i's first element the rank updates (relative to the tensor).
  std::int64_t first(int i) const {
    if (blocks != nullptr) return blocks->first(i);
    return std::max(shard.lo, kOffsets.at[i]) - kOffsets.at[i];
  }
  // One row per tensor: its slots in the rank's arrays (offsets from the shard's start); with
  // `mask`, numel 0 for the tensors it leaves out (the update-ratio pass's table).
  std::vector<cuda::AdamWTensor> table(const bool* mask = nullptr) const {
    std::vector<cuda::AdamWTensor> rows;
    for (int i = 0; i < kNumParams; ++i) {
      const bool left_out = mask != nullptr && !mask[i];
      const float lr_mult = float(kParams[i].lr_mult), decay = float(kParams[i].weight_decay);
      if (blocks != nullptr) {
        rows.push_back({blocks->at(i), left_out ? 0 : blocks->held(i), lr_mult, decay});
        continue;
      }
      const auto [a, b] = shard.overlap(i);  // a = the tensor's first element clamped into the shard
      const std::int64_t n = left_out ? 0 : std::max<std::int64_t>(0, b - a);
      rows.push_back({std::min(a, shard.hi) - shard.lo, n, lr_mult, decay});
    }
    return rows;
  }
};

}  // namespace gc::tree
