// Expert parallelism on the CPU backend (model/expert_parallel.hpp, docs/distributed.md): the
// communicators and the step's collectives of distributed.expert_parallel = G.
//
// Ranks r = g·G + i form group g (G consecutive ranks; rank i of it owns expert block i). Per
// step, beyond the exchanges inside the MoE layers:
//   gradients   every tensor outside the expert blocks: Σ over all ranks (runs of consecutive
//               tensors, one all-reduce each); an expert tensor's own block: Σ over the W/G
//               ranks that own the same block (none when W = G). Other blocks stay zero here.
//   Σ g²        an expert tensor's sum over its own block (the rest is zero), added over the group
//   AdamW       every tensor outside the experts; of an expert tensor, the own block only
//   parameters  each expert tensor's blocks all-gathered inside the group, so every rank holds
//               the whole current model (checkpoints, metrics, evaluation and the sample read it)
//   moments     gathered inside the group only before a checkpoint (assemble_moments)
// Under ZeRO-1 none of this runs: the world's reduce-scatter already sums each block's owners
// (the others add zeros) and its all-gather replicates every parameter (engine/zero.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "config.hpp"
#include "model/expert_parallel.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"

namespace gcm {

// Whether tensor i is a stacked expert tensor [E, out, in] (an MoE layer's gate, up or down).
inline bool is_expert_tensor(int i) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    const MoeParams P = moe_params(l);
    if (i == P.gate || i == P.up || i == P.down) return true;
  }
  return false;
}

// Expert parallelism: the flat elements [a, b) of experts [block.first, block.second) of expert
// tensor i, or all of tensor i when it is not an expert tensor.
inline std::pair<std::int64_t, std::int64_t> expert_block_part(int i, std::pair<int, int> block) {
  if (!is_expert_tensor(i)) return {kOffsets.at[i], kOffsets.at[i] + kParams[i].numel};
  const std::int64_t per = kParams[i].numel / kExperts;
  return {kOffsets.at[i] + block.first * per, kOffsets.at[i] + block.second * per};
}

// Runs [a, b) of consecutive tensors outside the experts, alignment gaps included (zeros): one
// all-reduce over the world each.
inline std::vector<std::pair<std::int64_t, std::int64_t>> shared_tensor_runs() {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (int i = 0; i < kNumParams; ++i) {
    if (is_expert_tensor(i)) continue;
    const std::int64_t a = kOffsets.at[i], b = kOffsets.at[i + 1];
    if (!runs.empty() && runs.back().second == a) {
      runs.back().second = b;
    } else {
      runs.push_back({a, b});
    }
  }
  return runs;
}

// Per-tensor sums on the host (`per` doubles each, kParams order; an expert tensor's entries its
// own block's) with the expert tensors' entries added over the group (the other entries are
// already the same on every rank). scratch: reused, no allocation after the first call.
inline void add_expert_sums_over_group(const gc::rt::Comm& group, double* sums, int per, std::vector<double>& scratch) {
  scratch.clear();
  for (int i = 0; i < kNumParams; ++i) {
    if (is_expert_tensor(i)) scratch.insert(scratch.end(), sums + std::int64_t(i) * per, sums + std::int64_t(i + 1) * per);
  }
  group.allreduce_sum_in_rank_order(scratch.data(), std::int64_t(scratch.size()));  // same bits in every group
  std::size_t k = 0;
  for (int i = 0; i < kNumParams; ++i) {
    if (!is_expert_tensor(i)) continue;
    for (int j = 0; j < per; ++j) sums[std::int64_t(i) * per + j] = scratch[k++];
  }
}

// The transport of a group over MPI (Comm::alltoallv), counting what it moves.
class MpiExpertExchange final : public ExpertExchange<float> {
 public:
  explicit MpiExpertExchange(gc::rt::Comm group) : group_(std::move(group)) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void exchange(const float* send, const std::vector<std::int64_t>& send_rows, float* recv,
                const std::vector<std::int64_t>& recv_rows, int width) override {
    const auto t0 = std::chrono::steady_clock::now();
    send_counts_.resize(send_rows.size());
    recv_counts_.resize(recv_rows.size());
    for (std::size_t q = 0; q < send_rows.size(); ++q) {
      send_counts_[q] = send_rows[q] * width;
      recv_counts_[q] = recv_rows[q] * width;
      if (int(q) != group_.rank()) bytes_sent += send_counts_[q] * std::int64_t(sizeof(float));
    }
    group_.alltoallv(send, send_counts_, recv, recv_counts_);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++exchanges;
  }
  void share_counts(const std::int64_t* mine, std::int64_t* all) override { group_.allgather(mine, all, kExperts); }
  const gc::rt::Comm& group() const { return group_; }

  std::int64_t bytes_sent = 0;  // to other ranks, over the run
  double seconds = 0.0;         // inside the exchanges (waiting included)
  std::int64_t exchanges = 0;

 private:
  gc::rt::Comm group_;
  std::vector<std::int64_t> send_counts_, recv_counts_;
};

class ExpertGroups {
 public:
  ExpertGroups(const gc::rt::Comm& world, int group_ranks)
      : world_(world),
        exchange_(world.split(world.rank() / group_ranks)),
        owners_(world.split(world.rank() % group_ranks)),
        block_(expert_block(world.rank() % group_ranks, group_ranks)),
        shared_runs_(shared_tensor_runs()) {}

  MpiExpertExchange& exchange() { return exchange_; }
  // This rank's part [a, b) of tensor i's flat elements (all of a tensor outside the experts).
  std::pair<std::int64_t, std::int64_t> own_part(int i) const { return expert_block_part(i, block_); }

  // Σ over the ranks of the step's gradients as the header says.
  void reduce_gradients(float* grads) const {
    for (const auto& [a, b] : shared_runs_) world_.allreduce_sum(grads + a, b - a);
    if (owners_.size() == 1) return;
    for (int i = 0; i < kNumParams; ++i) {
      if (!is_expert_tensor(i)) continue;
      const auto [a, b] = own_part(i);
      owners_.allreduce_sum(grads + a, b - a);
    }
  }
  // Each expert tensor's Σ g² (its own block's, the rest being zero here) added over the group.
  void complete_squares(double* squares) { add_expert_sums_over_group(exchange_.group(), squares, 1, expert_squares_); }
  // Every expert tensor's blocks to every rank of the group (the parameters after a step, or the
  // moments before a checkpoint).
  void share_expert_blocks(float* flat) const {
    const gc::rt::Comm& group = exchange_.group();
    for (int i = 0; i < kNumParams; ++i) {
      if (!is_expert_tensor(i)) continue;
      const std::int64_t per = kParams[i].numel / kExperts;
      std::vector<int> counts;
      for (int q = 0; q < group.size(); ++q) {
        const auto [lo, hi] = expert_block(q, group.size());
        counts.push_back(int((hi - lo) * per));
      }
      group.allgather_inplace(flat + kOffsets.at[i], counts);
    }
  }

 private:
  const gc::rt::Comm& world_;
  MpiExpertExchange exchange_;  // the group: G consecutive ranks
  gc::rt::Comm owners_;         // the W/G ranks owning the same block
  std::pair<int, int> block_;   // this rank's experts [lo, hi)
  std::vector<std::pair<std::int64_t, std::int64_t>> shared_runs_;
  std::vector<double> expert_squares_;
};

}  // namespace gcm
