// CUDA emulator: stands in for <nccl.h> (the part the CUDA engine calls), implemented over MPI
// on the emulator's "device" memory (host memory): src/nccl.cpp, linked only into programs built
// with MPI (tests/cuda_emulator/tree_train). A communicator spans the MPI ranks that initialize it
// with the same unique id (the world's, or an expert-parallel group's); ncclCommInitRank checks
// that nranks and rank are theirs. A collective checks its
// buffers (inside one device allocation each, with the sizes NCCL implies) when it is called, and
// runs in its stream's order (gc_emu/runtime.hpp: on a created stream, only when something waits
// for it), reading and writing the buffers then. Sums of two ranks are exact, so two-rank results
// do not depend on the order; beyond that MPI's order is fixed for a given world size.
#pragma once

#ifndef GC_CUDA_EMULATOR
#error "the CUDA emulator's headers need -DGC_CUDA_EMULATOR"
#endif

#include <cstddef>

#include "gc_emu/types.hpp"

#define NCCL_MAJOR 2
#define NCCL_MINOR 27
#define NCCL_PATCH 0
#define NCCL_UNIQUE_ID_BYTES 128

typedef struct ncclComm* ncclComm_t;
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;

typedef enum {
  ncclInt8 = 0, ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2, ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6, ncclHalf = 6,
  ncclFloat32 = 7, ncclFloat = 7,
  ncclFloat64 = 8, ncclDouble = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Abort: safe from another thread while a collective blocks; makes no MPI call (the MPI
// communicator is left to the process's end: the watchdog ends it at once). GetAsyncError: the
// emulator's collectives fail synchronously, so ncclSuccess, unless GC_EMU_NCCL_ASYNC_ERROR
// names a step count: after that many collectives on the communicator it reports
// ncclRemoteError (to test the watchdog's poll). GC_EMU_NCCL_STALL=N makes one rank's N-th
// collective never return (src/nccl.cpp).
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
// Sums only (ncclSum) of ncclFloat, ncclDouble and ncclInt64; ncclAllGather of any type.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
// recvbuff (significant at root only) = Σ over ranks of sendbuff.
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, std::size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
// sendbuff: recvcount × nranks elements; rank r receives the sum of block r.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, std::size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
// recvbuff: sendcount × nranks elements; block r is rank r's sendbuff.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, std::size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
// Point to point (expert parallelism's exchange): count elements to or from `peer`. Between
// ncclGroupStart and ncclGroupEnd they run together at the group's end.
ncclResult_t ncclSend(const void* sendbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, std::size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
// Collectives between them run as they are issued (each is a whole collective, and every rank
// issues them in the same order); sends and receives wait for the group's end.
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();
