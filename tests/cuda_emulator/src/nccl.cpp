// CUDA emulator: NCCL over MPI (nccl.h). Each collective copies its input when it runs (so the
// in-place forms NCCL allows work) and calls the matching MPI collective on MPI_COMM_WORLD.
#include "nccl.h"

#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gc_emu/runtime.hpp"

struct ncclComm {
  int rank = 0, size = 1;
  std::string last_error;
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
  if (!gc_emu::is_device_range(send, send_bytes)) {
    return fail(comm, ncclInvalidArgument, std::string(call) + ": sendbuff is not " + std::to_string(send_bytes) +
                                               " bytes of device memory");
  }
  if (!gc_emu::is_device_range(recv, recv_bytes)) {
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

ncclResult_t queue(ncclComm_t comm, const char* call, cudaStream_t stream, std::function<void()> op) {
  if (gc_emu::enqueue(stream, std::move(op)) != cudaSuccess) {
    return fail(comm, ncclUnhandledCudaError, std::string(call) + ": not a live stream");
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_MAJOR * 10000 + NCCL_MINOR * 100 + NCCL_PATCH;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, sizeof id->internal, "gcompile-emulated-nccl");
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return fail(nullptr, ncclInvalidUsage, "ncclCommInitRank: MPI is not initialized");
  if (std::strcmp(id.internal, "gcompile-emulated-nccl") != 0) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: the unique id was not made by ncclGetUniqueId");
  }
  int mpi_rank = 0, mpi_size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
  if (nranks != mpi_size || rank != mpi_rank) {
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                                  std::to_string(nranks) + ", but MPI says rank " +
                                                  std::to_string(mpi_rank) + " of " + std::to_string(mpi_size));
  }
  *comm = new ncclComm{rank, nranks, {}};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
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
    MPI_Allreduce(in.data(), recvbuff, int(count), type, MPI_SUM, MPI_COMM_WORLD);
  });
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
    MPI_Reduce(in.data(), at_root ? recvbuff : nullptr, int(count), type, MPI_SUM, root, MPI_COMM_WORLD);
  });
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
    MPI_Reduce_scatter_block(in.data(), recvbuff, int(recvcount), type, MPI_SUM, MPI_COMM_WORLD);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  const std::size_t bytes = sendcount * type_bytes(datatype);
  if (comm == nullptr) return fail(comm, ncclInvalidArgument, "ncclAllGather: null communicator");
  const std::size_t recv_bytes = bytes * std::size_t(comm->size);
  if (const ncclResult_t rc = check_buffers(comm, "ncclAllGather", sendbuff, bytes, recvbuff, recv_bytes)) return rc;
  return queue(comm, "ncclAllGather", stream, [=] {
    std::vector<char> in(static_cast<const char*>(sendbuff), static_cast<const char*>(sendbuff) + bytes);
    MPI_Allgather(in.data(), int(bytes), MPI_BYTE, recvbuff, int(bytes), MPI_BYTE, MPI_COMM_WORLD);
  });
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }
