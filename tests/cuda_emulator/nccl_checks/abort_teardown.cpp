// Two ranks of the emulator's NCCL: rank 0 queues an all-reduce on a created stream that rank 1
// never joins (a peer that died or hangs), then tears down the way an exception does: frees its
// buffer, which waits for the device (cudaFree drains the streams, as on a GPU). Mode "abort":
// ncclCommAbort first, which cancels the queued collective, so the teardown ends ("torn down").
// Mode "free": no abort, so the free waits for a collective that can never complete: the job
// hangs, as it would on GPUs (tests/cuda_emulator/nccl_checks/abort_teardown_test; issue 41).
#include <cstdio>
#include <cstring>

#include <mpi.h>

#include "cuda_runtime.h"
#include "nccl.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || argc != 2 || (std::strcmp(argv[1], "abort") != 0 && std::strcmp(argv[1], "free") != 0)) {
    std::fprintf(stderr, "usage: mpirun -np 2 abort_teardown abort|free\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 3);
  float* buffer = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&buffer), 8 * sizeof(float)) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 4);
  if (rank == 0) {
    cudaStream_t side = nullptr;
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 5);
    if (ncclAllReduce(buffer, buffer, 8, ncclFloat, ncclSum, comm, side) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 6);
    if (std::strcmp(argv[1], "abort") == 0) ncclCommAbort(comm);
    cudaFree(buffer);  // waits for the device
    std::printf("rank 0 torn down\n");
    std::fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}
