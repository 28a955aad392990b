// Expert parallelism on GPUs (model/expert_parallel.hpp): one group's exchange over NCCL. The
// rows move by grouped ncclSend / ncclRecv on the compute stream (bf16 rows under bf16); the
// per-expert row counts, which the host plans from, by MPI over the group's host communicator.
// The gradients need nothing of their own here: the engine's all-reduce over the world (its
// buckets) sums each expert's owners, the other ranks adding zeros, so every rank holds every
// expert's gradient and AdamW keeps the weights replicated.
#pragma once

#ifdef GC_HAVE_NCCL

#include <cstdint>
#include <utility>
#include <vector>

#include "config.hpp"
#include "model/expert_parallel.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda/nccl_comm.hpp"

namespace gcm {

template <typename Act>
class NcclExpertExchange final : public ExpertExchange<Act> {
 public:
  explicit NcclExpertExchange(gc::rt::Comm group) : group_(std::move(group)), nccl_(group_) {}
  int ranks() const override { return group_.size(); }
  int rank() const override { return group_.rank(); }
  void exchange(const Act* send, const std::vector<std::int64_t>& send_rows, Act* recv,
                const std::vector<std::int64_t>& recv_rows, int width) override {
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

  std::int64_t bytes_sent = 0;  // to other ranks, over the run
  std::int64_t exchanges = 0;

 private:
  gc::rt::Comm group_;
  gc::rt::cuda::NcclComm nccl_;
};

}  // namespace gcm

#endif  // GC_HAVE_NCCL
