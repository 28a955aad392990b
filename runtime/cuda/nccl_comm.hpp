// NCCL for the CUDA engine's data parallelism (docs/distributed.md): one
// communicator per process over the MPI job, set up by broadcasting rank 0's
// ncclUniqueId with MPI. Every call is checked and a failure names it. Only in
// trees whose CMake found NCCL (GC_HAVE_NCCL); under the CUDA emulator the
// calls go to its NCCL over MPI (tests/cuda_emulator/nccl.h).
#pragma once

#ifdef GC_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace gc::rt::cuda {

class NcclComm {
 public:
  explicit NcclComm(const Comm& comm) {
    ncclUniqueId id{};
    std::string bytes(sizeof id, '\0');
    if (comm.root()) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      std::memcpy(bytes.data(), &id, sizeof id);
    }
    comm.broadcast(bytes);
    std::memcpy(&id, bytes.data(), sizeof id);
    check(ncclCommInitRank(&comm_, comm.size(), id, comm.rank()), "ncclCommInitRank");
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() { ncclCommDestroy(comm_); }

  // data[0, n) = Σ over ranks, in place (T: float or double).
  template <typename T>
  void all_reduce(T* data, std::int64_t n, cudaStream_t stream) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "all_reduce sums fp32 or fp64");
    check(ncclAllReduce(data, data, std::size_t(n), std::is_same_v<T, float> ? ncclFloat : ncclDouble, ncclSum,
                        comm_, stream),
          "ncclAllReduce");
  }
  // In place at `root`: data[0, n) = Σ over ranks there (the other ranks' data is unchanged).
  void reduce(float* data, std::int64_t n, int root, cudaStream_t stream) {
    check(ncclReduce(data, data, std::size_t(n), ncclFloat, ncclSum, root, comm_, stream), "ncclReduce");
  }
  // Point to point (expert parallelism's exchange, inside group_start/group_end): n elements
  // of T (fp32 or bf16) to or from `peer`.
  template <typename T>
  void send(const T* data, std::int64_t n, int peer, cudaStream_t stream) {
    check(ncclSend(data, std::size_t(n), type_of<T>(), peer, comm_, stream), "ncclSend");
  }
  template <typename T>
  void recv(T* data, std::int64_t n, int peer, cudaStream_t stream) {
    check(ncclRecv(data, std::size_t(n), type_of<T>(), peer, comm_, stream), "ncclRecv");
  }
  // The collectives issued between group_start and group_end run as one operation.
  void group_start() { check(ncclGroupStart(), "ncclGroupStart"); }
  void group_end() { check(ncclGroupEnd(), "ncclGroupEnd"); }
  // In place: rank r's block data[r·block, (r+1)·block) becomes Σ over ranks of that block.
  void reduce_scatter(float* data, std::int64_t block, int rank, cudaStream_t stream) {
    check(ncclReduceScatter(data, data + std::int64_t(rank) * block, std::size_t(block), ncclFloat, ncclSum, comm_,
                            stream),
          "ncclReduceScatter");
  }
  // In place: every rank's block data[r·block, (r+1)·block) to every rank (T: float or bf16).
  template <typename T>
  void all_gather(T* data, std::int64_t block, int rank, cudaStream_t stream) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 2, "all_gather moves fp32 or bf16");
    check(ncclAllGather(data + std::int64_t(rank) * block, data, std::size_t(block),
                        sizeof(T) == 4 ? ncclFloat : ncclBfloat16, comm_, stream),
          "ncclAllGather");
  }

 private:
  template <typename T>
  static ncclDataType_t type_of() {
    static_assert(sizeof(T) == 4 || sizeof(T) == 2, "the exchange moves fp32 or bf16");
    return sizeof(T) == 4 ? ncclFloat : ncclBfloat16;
  }
  static void check(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) throw RuntimeError("NCCL", std::string(what) + ": " + ncclGetErrorString(rc));
  }
  ncclComm_t comm_ = nullptr;
};

}  // namespace gc::rt::cuda

#endif  // GC_HAVE_NCCL
