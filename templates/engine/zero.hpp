// ZeRO stage 1 (distributed.zero_stage = 1): the optimizer state is sharded
// over the ranks. ZeroShards is the cut both engines use; ZeroOneOptimizer is
// the CPU engine's (the CUDA engine does the same on the device with NCCL:
// engine/cuda_engine.cu). On the CPU the AdamW moments are sharded. The flat
// parameter array (kOffsets layout, gaps included) is cut into consecutive
// shards, one per rank. A step:
//
//   1. reduce-scatter: the rank's shard of Σ_ranks gradients (MPI_Reduce_scatter)
//   2. per-tensor Σ g² over the shard, summed over ranks: the global norm (clipping, metrics)
//   3. AdamW on the shard's part of every tensor, with the rank's moments
//   4. all-gather: every rank's updated shard to every rank (parameters stay replicated)
//
// Checkpoints stay consolidated: rank 0 gathers the moments before saving, and
// a resume (with any world size) loads them whole and keeps its shard.
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "config.hpp"
#include "cpu/adamw.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"

namespace gc::tree {

// The flat array of `total` elements cut into one consecutive shard per rank:
// ⌈total / ranks⌉ elements each (the last ones shorter or empty). Both
// engines shard this way; the planner counts the same (explain --world-size).
struct ZeroShards {
  ZeroShards(std::int64_t total, int rank, int ranks) : per_rank((total + ranks - 1) / ranks), total_(total) {
    for (int r = 0; r < ranks; ++r) {
      const auto [a, b] = range_of(r);
      counts.push_back(int(b - a));
    }
    std::tie(lo, hi) = range_of(rank);
  }
  // Rank r's shard [a, b) of the flat array.
  std::pair<std::int64_t, std::int64_t> range_of(int r) const {
    return {std::min(total_, per_rank * r), std::min(total_, per_rank * (r + 1))};
  }
  // The part [a, b) of tensor i that lies in this rank's shard (b ≤ a: none).
  std::pair<std::int64_t, std::int64_t> overlap(int i) const { return overlap_with(i, lo, hi); }
  // Elements of tensor i in each rank's shard, in rank order (an all-gather of the tensor).
  std::vector<int> tensor_counts(int i) const {
    std::vector<int> out;
    for (int r = 0; r < int(counts.size()); ++r) {
      const auto [a, b] = range_of(r);
      const auto [x, y] = overlap_with(i, a, b);
      out.push_back(int(std::max<std::int64_t>(0, y - x)));
    }
    return out;
  }
  std::int64_t size() const { return hi - lo; }

  std::int64_t per_rank;
  std::vector<int> counts;  // elements of each rank's shard
  std::int64_t lo = 0, hi = 0;

 private:
  std::int64_t total_;
  static std::pair<std::int64_t, std::int64_t> overlap_with(int i, std::int64_t lo, std::int64_t hi) {
    return {std::max(lo, kOffsets.at[i]), std::min(hi, kOffsets.at[i] + kParams[i].numel)};
  }
};

class ZeroOneOptimizer {
 public:
  explicit ZeroOneOptimizer(const gc::rt::Comm& comm)
      : comm_(comm), shard_(kOffsets.at[kNumParams], comm.rank(), comm.size()) {
    m_.assign(std::size_t(shard_.size()), 0.0f);
    v_.assign(m_.size(), 0.0f);
    grad_.assign(m_.size(), 0.0f);
    squares_.assign(std::size_t(kNumParams), 0.0);
  }

  // Steps 1-2: this rank's shard of the summed gradients, and every tensor's Σ g².
  const std::vector<double>& reduce_gradients(const float* grads) {
    comm_.reduce_scatter_sum(grad_.data(), grads, shard_.counts);
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = shard_.overlap(i);
      squares_[std::size_t(i)] = b > a ? cpu::sum_of_squares(grad_.data() + (a - shard_.lo), b - a) : 0.0;
    }
    comm_.allreduce_sum(squares_.data(), kNumParams);
    return squares_;
  }

  // Steps 3-4: AdamW on the shard of `params`, then every shard to every rank.
  void step(float* params, double lr, double clip, std::int64_t t) {
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = shard_.overlap(i);
      if (b <= a) continue;
      const ParamInfo& p = kParams[i];
      const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, t};
      const std::int64_t k = a - shard_.lo;
      cpu::adamw_step(params + a, m_.data() + k, v_.data() + k, grad_.data() + k, b - a, hp, clip);
    }
    comm_.allgather_inplace(params, shard_.counts);
  }

  // Consolidated moments for a checkpoint: on rank 0, `m` and `v` (whole
  // arrays) receive every rank's shard; the other ranks pass nullptr.
  void gather_moments(float* m, float* v) const {
    comm_.gather_to_root(m, m_.data(), shard_.counts);
    comm_.gather_to_root(v, v_.data(), shard_.counts);
  }
  // After loading whole moments (a resume): keep this rank's shard.
  void keep_shard(const float* m, const float* v) {
    std::copy(m + shard_.lo, m + shard_.hi, m_.begin());
    std::copy(v + shard_.lo, v + shard_.hi, v_.begin());
  }

  // Per-tensor Σ g² of the last reduce_gradients.
  const std::vector<double>& squares() const { return squares_; }

  std::int64_t moment_bytes() const { return std::int64_t(m_.size() + v_.size()) * std::int64_t(sizeof(float)); }

 private:
  const gc::rt::Comm& comm_;
  ZeroShards shard_;
  std::vector<float> m_, v_, grad_;
  std::vector<double> squares_;
};

}  // namespace gc::tree
