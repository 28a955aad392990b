// Expert parallelism on GPUs (model/expert_parallel.hpp, docs/distributed.md), over NCCL.
//
// NcclExpertExchange: one group's exchange. The rows move by grouped ncclSend / ncclRecv on the
// compute stream (bf16 rows under bf16); the per-expert row counts, which the host plans a
// host-planned route from, by MPI over the group's host communicator; a slotted route's offsets
// by ncclAllGather on the compute stream (model/expert_parallel.hpp's ExpertRoute).
//
// DeviceExpertGroups: a rank holds the working weights and gradients of its own expert block
// only (layout(): the expert-block StateLayout of model/state_layout.hpp), and the fp32 masters
// and moments in the same layout (under ZeRO-1 its shard of it over the block's owners:
// engine/zero.hpp); the step's collectives are the CPU's (engine/expert_groups.hpp):
//   gradients   outside the experts: all-reduced over the world (the engine's buckets); an expert
//               tensor's own block: over the W/G ranks that own the same block (nothing at W = G)
//   Σ g², update sums   an expert tensor's own block's, added over the group in rank order (the
//               same bits in every group: cuda/group_sums.cuh)
//   AdamW       on the layout's masters and moments (under ZeRO-1 the shard's, which the owners
//               then all-gather through the spent gradient array); the held elements then go
//               to the working weights, in the same layout (cuda/state_parts.cuh); nothing is
//               sent to the rest of the group
//   checkpoints the masters and moments reach rank 0 through its group (gather_layout_to_root),
//               and so do the weights (the masters) when rank 0 measures or saves them
#pragma once

#ifdef GC_HAVE_NCCL

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "config.hpp"
#include "cuda/adamw.cuh"
#include "cuda/fingerprint.cuh"
#include "cuda/group_sums.cuh"
#include "cuda/state_parts.cuh"
#include "engine/expert_groups.hpp"
#include "engine/update_parts.cuh"
#include "model/expert_parallel.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/nccl_comm.hpp"

namespace gc::tree {

template <typename Act>
class NcclExpertExchange final : public ExpertExchange<Act> {
 public:
  explicit NcclExpertExchange(gc::rt::Comm group) : group_(std::move(group)), nccl_(group_) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  bool rows_on_device() const override { return true; }
  void exchange(const Act* send, const std::vector<std::int64_t>& send_rows, Act* recv,
                const std::vector<std::int64_t>& recv_rows, int width) override {
    if (before_collective) before_collective();
    std::int64_t sent = 0, received = 0;
    nccl_.group_start();
    for (int q = 0; q < group_.size(); ++q) {
      const std::int64_t out = send_rows[std::size_t(q)] * width, in = recv_rows[std::size_t(q)] * width;
      if (out > 0) nccl_.send(send + sent, out, q, nullptr);
      if (in > 0) nccl_.recv(recv + received, in, q, nullptr);
      if (q != group_.rank()) bytes_sent += out * std::int64_t(sizeof(Act));
      sent += out;
      received += in;
    }
    nccl_.group_end();
    ++exchanges;
  }
  void share_counts(const std::int64_t* mine, std::int64_t* all) override { group_.allgather(mine, all, kExperts); }
  // On the device, on the compute stream (ordered like exchange()): the offsets are 8-byte words
  // that an all-gather only moves, so they travel as ncclFloat64.
  void share_offsets(const std::int64_t* mine, std::int64_t* all) override {
    if (before_collective) before_collective();
    const std::int64_t n = kExperts + 1;
    GC_CUDA_CHECK(cudaMemcpyAsync(all + group_.rank() * n, mine, std::size_t(n) * sizeof(std::int64_t),
                                  cudaMemcpyDeviceToDevice, nullptr));
    nccl_.all_gather(all, n, group_.rank(), nullptr);
  }
  const gc::rt::Comm& group() const { return group_; }
  gc::rt::cuda::NcclComm& nccl() { return nccl_; }

  std::int64_t bytes_sent = 0;  // to other ranks, over the run
  std::int64_t exchanges = 0;
  // Run before each exchange is queued: the engine orders it after the gradient reductions
  // queued on its other stream (engine/gradient_buckets.cuh's order_before_collective).
  std::function<void()> before_collective;

 private:
  gc::rt::Comm group_;
  gc::rt::cuda::NcclComm nccl_;
};

template <typename Act>
class DeviceExpertGroups {
 public:
  // A collective of the world: the group's communicators (exchange), then the owners'.
  DeviceExpertGroups(const gc::rt::Comm& world, int G)
      : exchange_(world.split(world.rank() / G)),
        block_(expert_block(world.rank() % G, G)),
        layout_(StateLayout::of_expert_block(block_)) {
    gathered_.resize(std::size_t(G) * kNumParams);
    std::vector<std::uint8_t> summed(static_cast<std::size_t>(kNumParams));
    for (int i = 0; i < kNumParams; ++i) summed[std::size_t(i)] = is_expert_tensor(i) ? 1 : 0;
    summed_.resize(summed.size());
    summed_.upload(summed.data(), summed.size());
    owners_host_ = std::make_unique<gc::rt::Comm>(world.split(world.rank() % G));
    owners_ = std::make_unique<gc::rt::cuda::NcclComm>(*owners_host_);
    world_runs_ = shared_tensor_runs(layout_);
    for (int i = 0; i < kNumParams; ++i) {
      if (!is_expert_tensor(i)) continue;
      if (owners_host_->size() > 1) owner_runs_.push_back({layout_.at(i), layout_.at(i) + layout_.held(i)});
    }
    const std::vector<cuda::AdamWTensor> held = UpdateParts{ZeroShards(layout_, 0, 1)}.table();
    layout_table_.resize(held.size());
    layout_table_.upload(held.data(), held.size());
    std::vector<std::int64_t> slots(static_cast<std::size_t>(kNumParams));
    for (int i = 0; i < kNumParams; ++i) slots[std::size_t(i)] = layout_.at(i);
    weight_slots_.resize(slots.size());
    weight_slots_.upload(slots.data(), slots.size());
  }
  NcclExpertExchange<Act>& exchange() { return exchange_; }
  // Where this rank keeps working weights, gradients, masters and moments.
  const StateLayout& layout() const { return layout_; }
  // The W/G ranks that own the same block (ZeRO-1 shards the layout over them).
  const gc::rt::Comm& owners_host() const { return *owners_host_; }
  gc::rt::cuda::NcclComm& owners() { return *owners_; }

  // Per-tensor Σ g² over the rank's whole block of summed gradients (on the compute stream; the
  // same bits on every rank of a group, whatever shard of it ZeRO-1 updates). scratch:
  // cuda::sum_squares_scratch_doubles(layout().total(), kNumParams) doubles.
  void sum_block_squares(double* sums, double* scratch, const float* grads) {
    cuda::sum_squares_per_tensor(sums, scratch, grads, layout_table_.data(), kNumParams, layout_.total());
  }
  // The block's updated masters into the working weights (both in layout() slots; rounded to
  // bf16 under bf16; the alignment gaps untouched: cuda/state_parts.cuh).
  void write_block(Act* weights, const float* masters) {
    cuda::copy_parts_to_whole(weights, masters, layout_table_.data(), weight_slots_.data(), kNumParams,
                              layout_.total());
  }

  // Σ over the ranks of grads[a, b) (layout() slots) as the header says, on `stream`.
  void reduce(float* grads, std::int64_t a, std::int64_t b, gc::rt::cuda::NcclComm& world, cudaStream_t stream) {
    for (const auto& [x, y] : world_runs_) {
      const std::int64_t lo = std::max(a, x), hi = std::min(b, y);
      if (hi > lo) world.all_reduce(grads + lo, hi - lo, stream);
    }
    for (const auto& [x, y] : owner_runs_) {
      const std::int64_t lo = std::max(a, x), hi = std::min(b, y);
      if (hi > lo) owners_->all_reduce(grads + lo, hi - lo, stream);
    }
  }
  // Per-tensor Σ g² on the device (kParams order; the own block's for an expert tensor, on the
  // compute stream) completed over the group: the expert tensors' added in rank order after an
  // all-gather, so every group gets the same bits (an all-reduce's order may differ between the
  // groups' communicators); the others keep group rank 0's value (all ranks hold the same).
  void complete_device_sums(double* sums) {
    const int G = exchange_.group().size(), me = exchange_.group().rank();
    double* all = gathered_.data();
    GC_CUDA_CHECK(cudaMemcpyAsync(all + std::int64_t(me) * kNumParams, sums, std::size_t(kNumParams) * sizeof(double),
                                  cudaMemcpyDeviceToDevice, nullptr));
    exchange_.nccl().all_gather(all, kNumParams, me, nullptr);
    cuda::add_rows_in_rank_order(sums, all, summed_.data(), G, kNumParams);
  }
  // The same on the host (the update sums, which the host reads anyway).
  void complete_host_sums(double* sums, int per) { add_expert_sums_over_group(exchange_.group(), sums, per, scratch_); }
  // Host arrays in layout() to rank 0's whole array (a collective of group 0).
  void gather_to_root(const gc::rt::Comm& world, float* whole, const float* mine) const {
    gather_layout_to_root(world, exchange_.group(), layout_, whole, mine);
  }
  // The replica check's fingerprint of this rank's working weights (engine/expert_groups.hpp's
  // expert_parallel_fingerprint).
  std::uint64_t fingerprint(const Act* params, cuda::DeviceFingerprint& fp) {
    return expert_parallel_fingerprint(exchange_.group(), layout_, [&](std::int64_t a, std::int64_t n) {
      return fp.of(params + a, n);
    }, group_values_);
  }

 private:
  NcclExpertExchange<Act> exchange_;                  // the group: G consecutive ranks
  std::pair<int, int> block_;                         // this rank's experts [lo, hi)
  StateLayout layout_;                                // its gradients, masters and moments
  std::unique_ptr<gc::rt::Comm> owners_host_;         // the W/G ranks owning the same block
  std::unique_ptr<gc::rt::cuda::NcclComm> owners_;
  std::vector<std::pair<std::int64_t, std::int64_t>> world_runs_, owner_runs_;
  std::vector<double> scratch_;  // complete_host_sums
  std::vector<std::int64_t> group_values_;  // combine_over_group
  // complete_device_sums: every group rank's per-tensor sums (G · kNumParams), and which tensors
  // are added over the group (the experts; the others are rank 0's).
  gc::rt::cuda::DeviceBuffer<double> gathered_;
  gc::rt::cuda::DeviceBuffer<std::uint8_t> summed_;
  // The layout's AdamW table (each tensor's held part) and each part's slot in the working
  // weights (write_block).
  gc::rt::cuda::DeviceBuffer<cuda::AdamWTensor> layout_table_;
  gc::rt::cuda::DeviceBuffer<std::int64_t> weight_slots_;
};

}  // namespace gc::tree

#endif  // GC_HAVE_NCCL
