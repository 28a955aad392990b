// Expert parallelism on the CPU backend (model/expert_parallel.hpp, docs/distributed.md): the
// communicators and the step's collectives of distributed.expert_parallel = G.
//
// Ranks r = g·G + i form group g (G consecutive ranks; rank i of it owns expert block i). A rank
// holds the weights and gradients of its own expert block only (model/state_layout.hpp's
// expert-block layout: 1/G of the experts'), and its AdamW moments in the same layout: all of
// it without ZeRO-1, under ZeRO-1 its shard of it over the block's owners (engine/zero.hpp).
// Every forward, evaluation included, runs the experts on their owners. Per step, beyond the
// exchanges inside the MoE layers:
//   gradients   every tensor outside the expert blocks: Σ over all ranks (runs of consecutive
//               tensors, one all-reduce each); an expert tensor's own block: Σ over the W/G
//               ranks that own the same block (none when W = G)
//   Σ g²        an expert tensor's sum over its own block, added over the group in rank order
//   AdamW       every tensor outside the experts; of an expert tensor, the own block (its
//               weights and moments are the rank's own); under ZeRO-1 the shard's part of
//               these, whose owners then gather the block (engine/zero.hpp)
// Outside the step:
//   weights     gathered to rank 0 by its group when rank 0 measures or saves them, or prints
//               the sample (gather_layout_to_root); nothing else needs them whole
//   moments     gathered to rank 0 by its group only when a checkpoint is saved
//               (gather_layout_to_root; under ZeRO-1 each block's owners first gather it to
//               the owner in group 0); a resume keeps the rank's part of the whole arrays
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/fingerprint.hpp"
#include "model/expert_parallel.hpp"
#include "model/model.hpp"
#include "model/state_layout.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"

namespace gc::tree {

// Runs [a, b) of consecutive slots of `layout` outside the expert tensors, alignment gaps
// included (zeros): one all-reduce over the world each.
inline std::vector<std::pair<std::int64_t, std::int64_t>> shared_tensor_runs(const StateLayout& layout) {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (int i = 0; i < kNumParams; ++i) {
    if (is_expert_tensor(i)) continue;
    const std::int64_t a = layout.at(i), b = layout.at(i + 1);
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

// The replica check's fingerprint (core/fingerprint.hpp) of a rank's parameters in its
// expert-block `layout`: the tensors outside the experts (the same slots, and values, on every
// rank of the world) mixed with the rank's expert blocks combined over its group in group rank
// order (the same in every group holding the same blocks). fp(a, n): the fingerprint of the n
// slots from slot a. A collective of the group; scratch: reused.
template <typename Fingerprint>
std::uint64_t expert_parallel_fingerprint(const gc::rt::Comm& group, const StateLayout& layout, Fingerprint&& fp,
                                          std::vector<std::int64_t>& scratch) {
  std::uint64_t shared = 0, experts = 0, k = 0;
  for (const auto& [a, b] : shared_tensor_runs(layout)) shared = core::mix64(shared ^ fp(a, b - a) ^ ++k);
  for (int i = 0; i < kNumParams; ++i) {
    if (is_expert_tensor(i)) experts = core::mix64(experts ^ fp(layout.at(i), layout.held(i)) ^ ++k);
  }
  const std::int64_t mine = std::int64_t(experts);
  scratch.assign(std::size_t(group.size()), 0);
  group.allgather(&mine, scratch.data(), 1);
  std::uint64_t blocks = 0;
  for (std::size_t q = 0; q < scratch.size(); ++q) blocks = core::mix64(blocks ^ std::uint64_t(scratch[q]) ^ q);
  return core::mix64(shared ^ core::mix64(blocks));
}

// The elements of expert tensor i that each rank of a group of G holds, in group rank order.
inline std::vector<int> expert_block_counts(int i, int G) {
  const std::int64_t per = kParams[i].numel / kExperts;
  std::vector<int> counts;
  for (int q = 0; q < G; ++q) {
    const auto [lo, hi] = expert_block(q, G);
    counts.push_back(int((hi - lo) * per));
  }
  return counts;
}

// Host arrays in an expert-block layout (`mine`, this rank's) to rank 0's whole array (kOffsets
// layout): every expert tensor's blocks from the ranks of rank 0's group (group 0), the rest
// rank 0's own copy. A collective of group 0; the other groups hold the same and send nothing.
inline void gather_layout_to_root(const gc::rt::Comm& world, const gc::rt::Comm& group, const StateLayout& layout,
                                  float* whole, const float* mine) {
  if (world.rank() >= group.size()) return;  // not group 0
  for (int i = 0; i < kNumParams; ++i) {
    const float* part = mine + layout.at(i);
    if (is_expert_tensor(i)) {
      group.gather_to_root(world.root() ? whole + kOffsets.at[i] : nullptr, part, expert_block_counts(i, group.size()));
    } else if (world.root()) {
      std::copy(part, part + layout.held(i), whole + kOffsets.at[i]);
    }
  }
}

// The transport of a group over MPI (Comm::alltoallv), counting what it moves.
class MpiExpertExchange final : public ExpertExchange<float> {
 public:
  explicit MpiExpertExchange(gc::rt::Comm group) : group_(std::move(group)) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  bool rows_on_device() const override { return false; }
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
  void share_offsets(const std::int64_t* mine, std::int64_t* all) override {
    group_.allgather(mine, all, kExperts + 1);  // the CPU backend's memory is the host's
  }
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
        layout_(StateLayout::of_expert_block(block_)),
        shared_runs_(shared_tensor_runs(layout_)) {}

  MpiExpertExchange& exchange() { return exchange_; }
  // The rank's gradients and moments: its expert block of each expert tensor.
  const StateLayout& layout() const { return layout_; }
  // The W/G ranks that own the same block (ZeRO-1 shards the layout over them).
  const gc::rt::Comm& owners() const { return owners_; }

  // Σ over the ranks of the step's gradients (layout()) as the header says.
  void reduce_gradients(float* grads) const {
    for (const auto& [a, b] : shared_runs_) world_.allreduce_sum(grads + a, b - a);
    if (owners_.size() == 1) return;
    for (int i = 0; i < kNumParams; ++i) {
      if (is_expert_tensor(i)) owners_.allreduce_sum(grads + layout_.at(i), layout_.held(i));
    }
  }
  // Each expert tensor's Σ g² (its own block's) added over the group.
  void complete_squares(double* squares) { add_expert_sums_over_group(exchange_.group(), squares, 1, expert_squares_); }
  // Per-tensor host sums, `per` doubles each (the update ratio's [Σ Δθ², Σ θ²]; an expert tensor's
  // over its own block), with the expert tensors' added over the group (as DeviceExpertGroups').
  void complete_host_sums(double* sums, int per) { add_expert_sums_over_group(exchange_.group(), sums, per, expert_squares_); }
  // The replica check's fingerprint of this rank's parameters (expert_parallel_fingerprint).
  std::uint64_t fingerprint(const float* params) {
    return expert_parallel_fingerprint(exchange_.group(), layout_, [&](std::int64_t a, std::int64_t n) {
      return core::fingerprint_of(params + a, n);
    }, group_values_);
  }
  // A checkpoint's moments: rank 0's `whole` receives them (gather_layout_to_root).
  void gather_to_root(float* whole, const float* mine) const {
    gather_layout_to_root(world_, exchange_.group(), layout_, whole, mine);
  }
  // A resume: this rank's part (layout()) of whole arrays.
  void keep_own_part(float* mine, const float* whole) const { keep_layout_part(layout_, mine, whole); }

 private:
  const gc::rt::Comm& world_;
  MpiExpertExchange exchange_;  // the group: G consecutive ranks
  gc::rt::Comm owners_;         // the W/G ranks owning the same block
  std::pair<int, int> block_;   // this rank's experts [lo, hi)
  StateLayout layout_;          // its gradients and moments
  std::vector<std::pair<std::int64_t, std::int64_t>> shared_runs_;
  std::vector<double> expert_squares_;
  std::vector<std::int64_t> group_values_;
};

}  // namespace gc::tree
