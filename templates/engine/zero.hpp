// ZeRO stage 1 (distributed.zero_stage = 1): the optimizer state is sharded
// over the ranks. ZeroShards is the cut both engines use; ZeroOneOptimizer is
// the CPU engine's (the CUDA engine does the same on the device with NCCL:
// engine/cuda_engine.cu). On the CPU the AdamW moments are sharded. The
// gradients' layout (model/state_layout.hpp; gaps included) is cut into
// consecutive shards, one per rank of the sharding communicator:
//
//   without expert parallelism  the whole flat array (kOffsets), over the world. A step:
//     1. reduce-scatter: the rank's shard of Σ_ranks gradients (MPI_Reduce_scatter)
//     2. per-tensor Σ g² over the shard, summed over the ranks: the global norm
//     3. AdamW on the shard's part of every tensor, with the rank's moments
//     4. all-gather: every rank's updated shard to every rank (parameters stay replicated)
//   with expert parallelism over groups of G  the rank's expert-block layout (its block of each
//     expert tensor, the rest whole), over the W/G ranks that own the same block (the owners:
//     ranks with the same block have the same layout). The gradients are summed as without
//     ZeRO-1 (engine/expert_groups.hpp: the shared tensors over the world, a block over its
//     owners), so step 1 only points into them and step 2 is the engine's, as without ZeRO-1
//     (Σ g² over the whole block, an expert tensor's added over the group). The rank's weights
//     lie in the same layout (its own experts only): on the CPU steps 3-4 are then the same as
//     without expert parallelism, over the owners; on GPUs (engine/cuda_engine.cu) step 4
//     gathers the masters' shards through the spent gradient array and writes the block into
//     the working weights. At W = G it is zero_stage 0's expert blocks.
//
// Checkpoints stay consolidated: rank 0 gathers the moments before saving, and
// a resume (with any world size) loads them whole and keeps its shard (engine/state_parts.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "config.hpp"
#include "cpu/adamw.hpp"
#include "model/model.hpp"
#include "model/state_layout.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"

namespace gc::tree {

// A layout's slots cut into one consecutive shard per rank: ⌈total / ranks⌉
// slots each (the last ones shorter or empty). Both engines shard this way;
// the planner counts the same (explain --world-size).
struct ZeroShards {
  ZeroShards(const StateLayout& layout, int rank, int ranks)
      : per_rank((layout.total() + ranks - 1) / ranks), layout_(layout) {
    for (int r = 0; r < ranks; ++r) {
      const auto [a, b] = range_of(r);
      counts.push_back(int(b - a));
    }
    std::tie(lo, hi) = range_of(rank);
  }
  // Rank r's shard [a, b) of the layout's slots.
  std::pair<std::int64_t, std::int64_t> range_of(int r) const {
    const std::int64_t total = layout_.total();
    return {std::min(total, per_rank * r), std::min(total, per_rank * (r + 1))};
  }
  // The slots [a, b) of tensor i that lie in this rank's shard (b ≤ a: none).
  std::pair<std::int64_t, std::int64_t> overlap(int i) const {
    return {std::max(lo, layout_.at(i)), std::min(hi, layout_.at(i) + layout_.held(i))};
  }
  // Where slot s of tensor i (in the shard) lies in the whole flat array (kOffsets layout).
  std::int64_t whole_of(int i, std::int64_t s) const { return layout_.whole_part(i).first + (s - layout_.at(i)); }
  std::int64_t size() const { return hi - lo; }
  // The slots every rank's shard spans together: ranks × per_rank (NCCL moves equal blocks).
  std::int64_t padded() const { return per_rank * std::int64_t(counts.size()); }
  const StateLayout& layout() const { return layout_; }

  std::int64_t per_rank;
  std::vector<int> counts;  // elements of each rank's shard
  std::int64_t lo = 0, hi = 0;

 private:
  StateLayout layout_;
};

class ZeroOneOptimizer {
 public:
  // Over `comm` (the world, or an expert block's owners) and the gradients' `layout`. The arrays
  // follow (allocate): expert parallelism replaces a whole-layout optimizer before training.
  explicit ZeroOneOptimizer(const gc::rt::Comm& comm, const StateLayout& layout = StateLayout::whole())
      : comm_(comm), shard_(layout, comm.rank(), comm.size()) {
    squares_.assign(std::size_t(kNumParams), 0.0);
  }
  // The shard's moments (zero) and, for the whole layout, its summed gradients; once.
  void allocate() {
    if (!m_.empty()) return;
    m_.assign(std::size_t(shard_.size()), 0.0f);
    v_.assign(m_.size(), 0.0f);
    if (shard_.layout().is_whole()) grad_.assign(m_.size(), 0.0f);
  }

  // Steps 1-2 (the whole layout): this rank's shard of the summed gradients, and every tensor's
  // Σ g² over the communicator.
  const std::vector<double>& reduce_gradients(const float* grads) {
    comm_.reduce_scatter_sum(grad_.data(), grads, shard_.counts);
    shard_grads_ = grad_.data();
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = shard_.overlap(i);
      squares_[std::size_t(i)] = b > a ? cpu::sum_of_squares(grad_.data() + (a - shard_.lo), b - a) : 0.0;
    }
    comm_.allreduce_sum(squares_.data(), kNumParams);
    return squares_;
  }
  // Step 1 (an expert-block layout): the gradients are summed already; the shard is their part
  // (they must stay until step()). The engine takes Σ g² from the whole block, as without
  // ZeRO-1, so that every rank of a group sees the same bits.
  void take_summed(const float* grads) { shard_grads_ = grads + shard_.lo; }

  // Steps 3-4: AdamW on the shard of `params`, which lie in the gradients' layout (the whole
  // flat array, or under expert parallelism the rank's expert-block weights), then every shard
  // to every rank of the communicator.
  void step(float* params, double lr, double clip, std::int64_t t) {
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = shard_.overlap(i);
      if (b <= a) continue;
      const ParamInfo& p = kParams[i];
      const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, t};
      const std::int64_t k = a - shard_.lo;
      cpu::adamw_step(params + a, m_.data() + k, v_.data() + k, shard_grads_ + k, b - a, hp, clip);
    }
    comm_.allgather_inplace(params, shard_.counts);
  }

  // The shard's moments (a checkpoint gathers them and a resume fills them:
  // engine/state_parts.hpp), the cut and the ranks it is cut over.
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const ZeroShards& shards() const { return shard_; }
  const gc::rt::Comm& comm() const { return comm_; }

  // Per-tensor Σ g² of the last reduce_gradients (the whole layout).
  const std::vector<double>& squares() const { return squares_; }

  std::int64_t moment_bytes() const { return std::int64_t(m_.size() + v_.size()) * std::int64_t(sizeof(float)); }

 private:
  const gc::rt::Comm& comm_;
  ZeroShards shard_;
  std::vector<float> m_, v_, grad_;
  const float* shard_grads_ = nullptr;  // the shard's summed gradients (step 1)
  std::vector<double> squares_;
};

}  // namespace gc::tree
