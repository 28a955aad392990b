// ZeRO stage 1 on the CPU backend (distributed.zero_stage = 1): the AdamW
// moments are sharded over the ranks. The flat parameter array (kOffsets
// layout, gaps included) is cut into consecutive shards, one per rank. A step:
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
#include <vector>

#include "config.hpp"
#include "cpu/adamw.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"

namespace gcm {

class ZeroOneOptimizer {
 public:
  explicit ZeroOneOptimizer(const gc::rt::Comm& comm) : comm_(comm) {
    const std::int64_t total = kOffsets.at[kNumParams];
    const std::int64_t per_rank = (total + comm.size() - 1) / comm.size();
    for (int r = 0; r < comm.size(); ++r) {
      const std::int64_t lo = std::min(total, per_rank * r), hi = std::min(total, per_rank * (r + 1));
      counts_.push_back(int(hi - lo));
    }
    lo_ = std::min(total, per_rank * comm.rank());
    hi_ = lo_ + counts_[std::size_t(comm.rank())];
    m_.assign(std::size_t(hi_ - lo_), 0.0f);
    v_.assign(m_.size(), 0.0f);
    grad_.assign(m_.size(), 0.0f);
    squares_.assign(std::size_t(kNumParams), 0.0);
  }

  // Steps 1-2: this rank's shard of the summed gradients, and every tensor's Σ g².
  const std::vector<double>& reduce_gradients(const float* grads) {
    comm_.reduce_scatter_sum(grad_.data(), grads, counts_);
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = overlap(i);
      squares_[std::size_t(i)] = b > a ? cpu::sum_of_squares(grad_.data() + (a - lo_), b - a) : 0.0;
    }
    comm_.allreduce_sum(squares_.data(), kNumParams);
    return squares_;
  }

  // Steps 3-4: AdamW on the shard of `params`, then every shard to every rank.
  void step(float* params, double lr, double clip, std::int64_t t) {
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = overlap(i);
      if (b <= a) continue;
      const ParamInfo& p = kParams[i];
      const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, t};
      cpu::adamw_step(params + a, m_.data() + (a - lo_), v_.data() + (a - lo_), grad_.data() + (a - lo_), b - a, hp,
                      clip);
    }
    comm_.allgather_inplace(params, counts_);
  }

  // Consolidated moments for a checkpoint: on rank 0, `m` and `v` (whole
  // arrays) receive every rank's shard; the other ranks pass nullptr.
  void gather_moments(float* m, float* v) const {
    comm_.gather_to_root(m, m_.data(), counts_);
    comm_.gather_to_root(v, v_.data(), counts_);
  }
  // After loading whole moments (a resume): keep this rank's shard.
  void keep_shard(const float* m, const float* v) {
    std::copy(m + lo_, m + hi_, m_.begin());
    std::copy(v + lo_, v + hi_, v_.begin());
  }

  std::int64_t moment_bytes() const { return std::int64_t(m_.size() + v_.size()) * std::int64_t(sizeof(float)); }

 private:
  // The part [a, b) of tensor i that lies in this rank's shard.
  std::pair<std::int64_t, std::int64_t> overlap(int i) const {
    const std::int64_t a = std::max(lo_, kOffsets.at[i]), b = std::min(hi_, kOffsets.at[i] + kParams[i].numel);
    return {a, b};
  }

  const gc::rt::Comm& comm_;
  std::vector<int> counts_;
  std::int64_t lo_ = 0, hi_ = 0;
  std::vector<float> m_, v_, grad_;
  std::vector<double> squares_;
};

}  // namespace gcm
