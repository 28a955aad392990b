// A rank's part of an optimizer-state array (AdamW's moments; on GPUs the fp32 masters) and the
// whole array a checkpoint holds, for both engines: the part is the rank's shard (engine/zero.hpp's
// ZeroShards) of its gradients' layout (model/state_layout.hpp):
//
//   one process, data parallelism    the whole flat array, over one rank
//   ZeRO-1                           the whole flat array cut over the world
//   expert parallelism               the rank's expert-block layout, over one rank
//   expert parallelism and ZeRO-1    that layout cut over the W/G ranks owning the same block
//
// Checkpoints stay consolidated (any world size and expert-parallel degree resumes them).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/expert_groups.hpp"
#include "engine/zero.hpp"
#include "model/state_layout.hpp"
#include "runtime/comm.hpp"

namespace gc::tree {

// Rank 0's `all` (the whole flat array; nullptr elsewhere) receives every rank's part `mine`
// (host, shard.size() slots). A collective of `sharding` (the ranks `shard` cuts the layout over:
// the world, or a block's owners) and under expert parallelism of rank 0's `group`: each block's
// shards reach its owner in group 0 (scratch: the block there), then the group's blocks rank 0.
inline void gather_state_to_root(const gc::rt::Comm& world, const gc::rt::Comm& sharding, const gc::rt::Comm* group,
                                 const ZeroShards& shard, float* all, const float* mine, std::vector<float>& scratch) {
  const bool cut = shard.counts.size() > 1;
  if (group == nullptr) {
    if (cut) {
      sharding.gather_to_root(world.root() ? all : nullptr, mine, shard.counts);
    } else if (world.root()) {
      std::copy(mine, mine + shard.size(), all);
    }
    return;
  }
  const float* block = mine;
  if (cut) {
    scratch.resize(sharding.root() ? std::size_t(shard.layout().total()) : 0);
    sharding.gather_to_root(sharding.root() ? scratch.data() : nullptr, mine, shard.counts);
    block = scratch.data();
  }
  gather_layout_to_root(world, *group, shard.layout(), all, block);
}

// A resume: this rank's part (`shard` of its layout) of a whole host array into `mine`.
inline void keep_state_part(const ZeroShards& shard, float* mine, const float* whole, std::vector<float>& scratch) {
  const StateLayout& layout = shard.layout();
  if (!layout.is_whole()) {
    scratch.resize(std::size_t(layout.total()));
    keep_layout_part(layout, scratch.data(), whole);
    whole = scratch.data();
  }
  std::copy(whole + shard.lo, whole + shard.hi, mine);
}

}  // namespace gc::tree
