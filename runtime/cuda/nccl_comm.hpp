// NCCL for the CUDA engine's data parallelism (docs/distributed.md): one
// communicator per process over the MPI job, set up by broadcasting rank 0's
// ncclUniqueId with MPI. Every call is checked and a failure names it. Only in
// trees whose CMake found NCCL (GC_HAVE_NCCL); under the CUDA emulator the
// calls go to its NCCL over MPI (tests/cuda_emulator/nccl.h).
//
// Every live communicator is listed (NcclComm::abort_all, NcclComm::async_error) for the
// training watchdog (runtime/watchdog.hpp), which polls their asynchronous errors and aborts
// them off the main thread. A communicator destroyed while an exception unwinds is aborted
// rather than destroyed (ncclCommDestroy may wait for work that will never complete).
#pragma once

#ifdef GC_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace gc::rt::cuda {

class NcclComm {
 public:
  explicit NcclComm(const Comm& comm) {
    check_version();
    ncclUniqueId id{};
    std::string bytes(sizeof id, '\0');
    if (comm.root()) {
      check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      std::memcpy(bytes.data(), &id, sizeof id);
    }
    comm.broadcast(bytes);
    std::memcpy(&id, bytes.data(), sizeof id);
    check(ncclCommInitRank(&comm_, comm.size(), id, comm.rank()), "ncclCommInitRank");
    std::lock_guard<std::mutex> lock(registry().mutex);
    registry().comms.push_back(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  ~NcclComm() {
    {
      std::lock_guard<std::mutex> lock(registry().mutex);
      auto& comms = registry().comms;
      comms.erase(std::remove(comms.begin(), comms.end(), comm_), comms.end());
    }
    if (std::uncaught_exceptions() > 0) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }

  // The watchdog's view of every live communicator: aborts them all (a rank blocked in a
  // collective returns), or names the first asynchronous error ("" when none).
  static void abort_all() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (ncclComm_t c : registry().comms) ncclCommAbort(c);
    registry().comms.clear();
  }
  static std::string async_error() {
    std::lock_guard<std::mutex> lock(registry().mutex);
    for (ncclComm_t c : registry().comms) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t rc = ncclCommGetAsyncError(c, &state);
      if (rc != ncclSuccess) return std::string("ncclCommGetAsyncError: ") + ncclGetErrorString(rc);
      if (state != ncclSuccess && state != ncclInProgress) return ncclGetErrorString(state);
    }
    return {};
  }

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
  // In place: every rank's block data[r·block, (r+1)·block) to every rank (T: double, float or bf16).
  template <typename T>
  void all_gather(T* data, std::int64_t block, int rank, cudaStream_t stream) {
    static_assert(sizeof(T) == 8 || sizeof(T) == 4 || sizeof(T) == 2, "all_gather moves fp64, fp32 or bf16");
    check(ncclAllGather(data + std::int64_t(rank) * block, data, std::size_t(block),
                        sizeof(T) == 8 ? ncclFloat64 : sizeof(T) == 4 ? ncclFloat : ncclBfloat16, comm_, stream),
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
  // The library found at run time must be at least the version whose header the tree was
  // compiled against (an older libnccl.so.2 lacks symbols or behaves differently).
  static void check_version() {
    constexpr int kHeader = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
    int loaded = 0;
    check(ncclGetVersion(&loaded), "ncclGetVersion");
    if (loaded < kHeader) {
      const auto text = [](int v) {
        return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
      };
      throw RuntimeError("NCCL", "the NCCL library loaded is version " + text(loaded) + ", older than the " +
                                     text(kHeader) + " this tree was compiled against; put a newer libnccl.so.2 "
                                     "first on LD_LIBRARY_PATH or rebuild the tree against this one");
    }
  }
  struct Registry {
    std::mutex mutex;
    std::vector<ncclComm_t> comms;
  };
  static Registry& registry() {
    static Registry r;
    return r;
  }
  ncclComm_t comm_ = nullptr;
};

}  // namespace gc::rt::cuda

#endif  // GC_HAVE_NCCL
