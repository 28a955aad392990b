// CUDA emulator: NCCL over MPI (nccl.h). Each collective copies its input when it runs (so the
// in-place forms NCCL allows work), checks that every rank of the communicator runs the same
// collective (call, bytes, root: check_same_collective) and calls the matching MPI collective on
// the communicator's MPI communicator (MPI_Comm_split of MPI_COMM_WORLD by unique id: the ranks
// that share an id).
// Point-to-point sends and receives between ncclGroupStart and ncclGroupEnd run together at the
// group's end (MPI_Isend / MPI_Irecv, then MPI_Waitall), as NCCL requires of a pairwise exchange.
#include "nccl.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "gc_emu/runtime.hpp"
#include "internal.hpp"

struct ncclComm {
  int rank = 0, size = 1;
  std::string last_error;
  MPI_Comm mpi = MPI_COMM_NULL;
  std::atomic<bool> aborted{false};
  std::atomic<long> collectives{0};  // issued so far (GC_EMU_NCCL_ASYNC_ERROR)
  int first_rank = 0;  // GC_EMU_NCCL_SHUFFLE: where this communicator's all-reduce starts adding
};

namespace {

std::size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

// The MPI type of a sum, or MPI_DATATYPE_NULL for a type the emulator does not add.
MPI_Datatype sum_type(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    case ncclInt64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

ncclResult_t fail(ncclComm_t comm, ncclResult_t rc, const std::string& what) {
  std::fprintf(stderr, "gcompile CUDA emulator: NCCL: %s\n", what.c_str());
  if (comm != nullptr) comm->last_error = what;
  return rc;
}

// Both buffers inside device allocations of the sizes the collective reads and writes.
ncclResult_t check_buffers(ncclComm_t comm, const char* call, const void* send, std::size_t send_bytes, void* recv,
                           std::size_t recv_bytes) {
  if (comm == nullptr) return fail(comm, ncclInvalidArgument, std::string(call) + ": null communicator");
  if (!gc::emu::is_device_range(send, send_bytes)) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": sendbuff is not " + std::to_string(send_bytes) +
                                               " bytes of device memory");
  }
  if (!gc::emu::is_device_range(recv, recv_bytes)) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": recvbuff is not " + std::to_string(recv_bytes) +
                                               " bytes of device memory");
  }
  return ncclSuccess;
}

// The MPI type of a sum the emulator does (ncclSum of float, double, int64), or an error.
ncclResult_t sum_of(ncclComm_t comm, const char* call, ncclRedOp_t op, ncclDataType_t datatype, MPI_Datatype* type) {
  *type = sum_type(datatype);
  if (op != ncclSum || *type == MPI_DATATYPE_NULL) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": the emulator sums float, double and int64 only");
  }
  if (comm == nullptr) return fail(comm, ncclInvalidArgument, std::string(call) + ": null communicator");
  return ncclSuccess;
}

// GC_EMU_NCCL_TRACE=DIR: each process appends a line to DIR/rank_<world rank>.txt as each
// collective runs: its issue number (this process's count when it was queued), the call and the
// communicator's size. A rank whose streams ran its collectives out of their issue order shows
// it (tests/e2e/gpu_data_parallel_emulated_test.cpp).
void trace(long issued, const char* call, int ranks) {
  static std::FILE* file = [] {
    const char* dir = std::getenv("GC_EMU_NCCL_TRACE");
    if (dir == nullptr || *dir == '\0') return static_cast<std::FILE*>(nullptr);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return std::fopen((std::string(dir) + "/rank_" + std::to_string(rank) + ".txt").c_str(), "a");
  }();
  if (file == nullptr) return;
  std::fprintf(file, "%ld %s %d\n", issued, call, ranks);
  std::fflush(file);
}

// GC_EMU_NCCL_STALL=N: on world rank GC_EMU_NCCL_STALL_RANK (default 1) the N-th collective to
// run (counting from 0) never returns: a rank stuck inside a collective, for the watchdog's test.
void stall_if_asked(long ran) {
  const char* at = std::getenv("GC_EMU_NCCL_STALL");
  if (at == nullptr || *at == '\0' || std::strtol(at, nullptr, 10) != ran) return;
  const char* who = std::getenv("GC_EMU_NCCL_STALL_RANK");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != (who != nullptr && *who != '\0' ? std::atoi(who) : 1)) return;
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// GC_EMU_NCCL_SHUFFLE=SEED: each communicator's all-reduce adds the ranks' values starting at its
// own rank (first_rank, from SEED and the communicator's id) and going around: the same result on
// every rank of the communicator, as NCCL guarantees, but a different order in another
// communicator of the same size, which NCCL does not rule out (issue 41: replicas that need the
// same bits from different communicators drift apart). Unset: MPI_Allreduce's order.
const char* shuffle_seed() {
  const char* seed = std::getenv("GC_EMU_NCCL_SHUFFLE");
  return seed != nullptr && *seed != '\0' ? seed : nullptr;
}

int shuffled_first_rank(int maker, int count, int size) {
  std::uint64_t h = std::strtoull(shuffle_seed(), nullptr, 10) * 0x9e3779b97f4a7c15ull;
  for (std::uint64_t v : {std::uint64_t(maker), std::uint64_t(count)}) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ull;
  }
  return int((h >> 17) % std::uint64_t(size));
}

// recv[i] = Σ over the communicator's ranks of their send[i], added from rank `first` around.
template <typename T>
void add_in_rotated_order(void* recv, const std::vector<char>& all, std::size_t count, int ranks, int first) {
  const T* values = reinterpret_cast<const T*>(all.data());
  T* out = static_cast<T*>(recv);
  for (std::size_t i = 0; i < count; ++i) {
    T sum = values[std::size_t(first) * count + i];
    for (int k = 1; k < ranks; ++k) sum += values[std::size_t((first + k) % ranks) * count + i];
    out[i] = sum;
  }
}

void all_reduce_shuffled(const std::vector<char>& in, void* recv, std::size_t count, ncclDataType_t datatype,
                         ncclComm_t comm) {
  std::vector<char> all(in.size() * std::size_t(comm->size));
  MPI_Allgather(in.data(), int(in.size()), MPI_BYTE, all.data(), int(in.size()), MPI_BYTE, comm->mpi);
  switch (datatype) {
    case ncclFloat32: add_in_rotated_order<float>(recv, all, count, comm->size, comm->first_rank); break;
    case ncclFloat64: add_in_rotated_order<double>(recv, all, count, comm->size, comm->first_rank); break;
    default: add_in_rotated_order<std::int64_t>(recv, all, count, comm->size, comm->first_rank); break;
  }
}

// What one rank's collective is, which every rank of the communicator must agree on: the call,
// the bytes each rank contributes and the root (-1: none). Point-to-point groups pass none (their
// sizes differ by peer: the receive check below compares them).
struct Signature {
  const char* call = nullptr;
  std::uint64_t bytes = 0;
  std::int64_t root = -1;
};

// Before a collective runs, its ranks compare their signatures (an MPI_Allgather on the
// communicator): NCCL does not check that they match, and a mismatch (another call, count or
// root) hangs or corrupts on GPUs; here it stops the job naming both ranks' calls.
void check_same_collective(ncclComm_t comm, const Signature& mine) {
  const std::uint64_t call_hash = std::hash<std::string>{}(mine.call);
  const std::uint64_t local[3] = {call_hash, mine.bytes, std::uint64_t(mine.root)};
  std::vector<std::uint64_t> all(3 * std::size_t(comm->size));
  MPI_Allgather(local, 3, MPI_UINT64_T, all.data(), 3, MPI_UINT64_T, comm->mpi);
  for (int r = 0; r < comm->size; ++r) {
    const std::uint64_t* theirs = all.data() + 3 * std::size_t(r);
    if (theirs[0] == local[0] && theirs[1] == local[1] && theirs[2] == local[2]) continue;
    fail(comm, ncclInvalidUsage,
         std::string("collective mismatch: rank ") + std::to_string(comm->rank) + " runs " + mine.call + " of " +
             std::to_string(mine.bytes) + " bytes" + (mine.root >= 0 ? " to root " + std::to_string(mine.root) : "") +
             " where rank " + std::to_string(r) + " runs " + (theirs[0] == call_hash ? mine.call : "another call") +
             " of " + std::to_string(theirs[1]) + " bytes" +
             (std::int64_t(theirs[2]) >= 0 ? " to root " + std::to_string(std::int64_t(theirs[2])) : "") +
             " (a GPU would hang or corrupt)");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

ncclResult_t queue(ncclComm_t comm, const char* call, cudaStream_t stream, std::function<void()> op,
                   Signature signature = {}) {
  static std::atomic<long> issued{0}, ran{0};
  if (comm != nullptr && comm->aborted.load()) return fail(comm, ncclInvalidUsage, std::string(call) + ": aborted");
  if (comm != nullptr) ++comm->collectives;
  const long number = issued++;
  const int ranks = comm != nullptr ? comm->size : 0;
  op = [op = std::move(op), number, call, ranks, comm, signature] {
    // ncclCommAbort cancels what the communicator had queued: it never runs (a peer that died
    // would leave it waiting forever; ncclCommDestroy runs the streams before it frees comm).
    if (comm != nullptr && comm->aborted.load()) return;
    trace(number, call, ranks);
    stall_if_asked(ran++);
    if (signature.call != nullptr && comm != nullptr && comm->size > 1) check_same_collective(comm, signature);
    op();
  };
  if (gc::emu::enqueue(stream, std::move(op)) != cudaSuccess) {
    return fail(comm, ncclUnhandledCudaError, std::string(call) + ": not a live stream");
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

// "gcompile-emulated-nccl <world rank> <count>": the ranks that share an id form a communicator.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static int made = 0;
  int world_rank = 0, initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "gcompile-emulated-nccl %d %d", world_rank, made++);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: MPI is not initialized");
  int maker = 0, count = 0;
  if (std::sscanf(id.internal, "gcompile-emulated-nccl %d %d", &maker, &count) != 2 || maker < 0 || count < 0 ||
      count >= 4096) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
  }
  // Every world rank initializes a communicator at the same point (the world's, or its group's
  // under expert parallelism), so one MPI_Comm_split over the world forms them all.
  MPI_Comm mpi = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, maker * 4096 + count, rank, &mpi);
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(mpi, &mpi_rank);
  MPI_Comm_size(mpi, &mpi_size);
  if (nranks != mpi_size || rank != mpi_rank) {
    MPI_Comm_free(&mpi);
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                                  std::to_string(nranks) + ", but the ranks sharing its id make it rank " +
                                                  std::to_string(mpi_rank) + " of " + std::to_string(mpi_size));
  }
  *comm = new ncclComm;
  (*comm)->rank = rank;
  (*comm)->size = nranks;
  (*comm)->mpi = mpi;
  if (shuffle_seed() != nullptr) (*comm)->first_rank = shuffled_first_rank(maker, count, nranks);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  gc::emu::drain_all_streams();  // NCCL's destroy waits for the communicator's queued operations
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm != nullptr && comm->mpi != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm != nullptr) comm->aborted.store(true);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr) return ncclInvalidArgument;
  const char* after = std::getenv("GC_EMU_NCCL_ASYNC_ERROR");
  const long limit = after != nullptr && *after != '\0' ? std::strtol(after, nullptr, 10) : -1;
  *async_error = limit >= 0 && comm->collectives.load() >= limit ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t comm) { return comm != nullptr ? comm->last_error.c_str() : ""; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  if (const ncclResult_t rc = sum_of(comm, "ncclAllReduce", op, datatype, &type)) return rc;
  const std::size_t bytes = count * type_bytes(datatype);
  if (const ncclResult_t rc = check_buffers(comm, "ncclAllReduce", sendbuff, bytes, recvbuff, bytes)) return rc;
  return queue(comm, "ncclAllReduce", stream, [=] {
    std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    if (shuffle_seed() != nullptr) {
      all_reduce_shuffled(in, recvbuff, count, datatype, comm);
      return;
    }
    MPI_Allreduce(in.data(), recvbuff, int(count), type, MPI_SUM, comm->mpi);
  }, {"ncclAllReduce", bytes});
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  if (const ncclResult_t rc = sum_of(comm, "ncclReduce", op, datatype, &type)) return rc;
  if (root < 0 || root >= comm->size) {
    return fail(comm, ncclInvalidArgument, "ncclReduce: root " + std::to_string(root) + " is not a rank");
  }
  const std::size_t bytes = count * type_bytes(datatype);
  const bool at_root = comm->rank == root;
  void* checked_recv = at_root ? recvbuff : const_cast<void*>(sendbuff);  // recvbuff matters at the root only
  if (const ncclResult_t rc = check_buffers(comm, "ncclReduce", sendbuff, bytes, checked_recv, bytes)) return rc;
  return queue(comm, "ncclReduce", stream, [=] {
    std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    MPI_Reduce(in.data(), at_root ? recvbuff : nullptr, int(count), type, MPI_SUM, root, comm->mpi);
  }, {"ncclReduce", bytes, root});
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  if (const ncclResult_t rc = sum_of(comm, "ncclReduceScatter", op, datatype, &type)) return rc;
  const std::size_t bytes = recvcount * type_bytes(datatype);
  const std::size_t send_bytes = bytes * std::size_t(comm->size);
  if (const ncclResult_t rc = check_buffers(comm, "ncclReduceScatter", sendbuff, send_bytes, recvbuff, bytes)) return rc;
  return queue(comm, "ncclReduceScatter", stream, [=] {
    std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + send_bytes);
    MPI_Reduce_scatter_block(in.data(), recvbuff, int(recvcount), type, MPI_SUM, comm->mpi);
  }, {"ncclReduceScatter", send_bytes});
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = sendcount * type_bytes(datatype);
  if (comm == nullptr) return fail(comm, ncclInvalidArgument, "ncclAllGather: null communicator");
  const std::size_t recv_bytes = bytes * std::size_t(comm->size);
  if (const ncclResult_t rc = check_buffers(comm, "ncclAllGather", sendbuff, bytes, recvbuff, recv_bytes)) return rc;
  return queue(comm, "ncclAllGather", stream, [=] {
    std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    MPI_Allgather(in.data(), int(bytes), MPI_BYTE, recvbuff, int(bytes), MPI_BYTE, comm->mpi);
  }, {"ncclAllGather", bytes});
}

namespace {

// The sends and receives of the open group (ncclGroupStart nests; they run at the outermost end).
struct PointToPoint {
  bool send = false;
  void* buffer = nullptr;
  std::size_t bytes = 0;
  int peer = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};
int group_depth = 0;
std::vector<PointToPoint> pending;

ncclResult_t flush_point_to_point() {
  if (pending.empty()) return ncclSuccess;
  std::vector<PointToPoint> ops;
  ops.swap(pending);
  for (const PointToPoint& op : ops) {
    if (op.stream != ops.front().stream) {
      return fail(op.comm, ncclInvalidUsage, "ncclGroupEnd: the emulator runs one group's sends and receives on one stream");
    }
  }
  return queue(ops.front().comm, "ncclGroupEnd", ops.front().stream, [ops] {
    std::vector<MPI_Request> requests(ops.size());
    std::vector<std::vector<char>> copies(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {  // receives first, then sends (copied when they run)
      const PointToPoint& op = ops[i];
      if (op.send) continue;
      MPI_Irecv(op.buffer, int(op.bytes), MPI_BYTE, op.peer, 0, op.comm->mpi, &requests[i]);
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const PointToPoint& op = ops[i];
      if (!op.send) continue;
      copies[i].assign(static_cast<const char*>(op.buffer), static_cast<const char*>(op.buffer) + op.bytes);
      MPI_Isend(copies[i].data(), int(op.bytes), MPI_BYTE, op.peer, 0, op.comm->mpi, &requests[i]);
    }
    std::vector<MPI_Status> statuses(ops.size());
    MPI_Waitall(int(requests.size()), requests.data(), statuses.data());
    // MPI accepts a message shorter than the receive; NCCL's send and receive must match: a
    // mismatch is a bug of the caller, which real NCCL turns into a hang or garbage.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].send) continue;
      int got = 0;
      MPI_Get_count(&statuses[i], MPI_BYTE, &got);
      if (std::size_t(got) != ops[i].bytes) {
        fail(ops[i].comm, ncclInvalidUsage, "ncclRecv from rank " + std::to_string(ops[i].peer) + ": expected " +
                                                std::to_string(ops[i].bytes) + " bytes, the matching ncclSend sent " +
                                                std::to_string(got));
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
    }
  });
}

ncclResult_t point_to_point(bool send, void* buffer, std::size_t count, ncclDataType_t datatype, int peer,
                            ncclComm_t comm, cudaStream_t stream) {
  const char* call = send ? "ncclSend" : "ncclRecv";
  if (comm == nullptr) return fail(comm, ncclInvalidArgument, std::string(call) + ": null communicator");
  if (peer < 0 || peer >= comm->size) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": peer " + std::to_string(peer) + " is not a rank");
  }
  const std::size_t bytes = count * type_bytes(datatype);
  if (const ncclResult_t rc = check_buffers(comm, call, buffer, bytes, buffer, bytes)) return rc;
  pending.push_back({send, buffer, bytes, peer, comm, stream});
  return group_depth > 0 ? ncclSuccess : flush_point_to_point();
}

}  // namespace

ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream);
}

ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return point_to_point(false, recvbuff, count, datatype, peer, comm, stream);
}

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  return --group_depth == 0 ? flush_point_to_point() : ncclSuccess;
}
