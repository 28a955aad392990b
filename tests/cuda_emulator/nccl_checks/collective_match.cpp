// Two ranks of the emulator's NCCL run one all-reduce each: the same one ("same": the job ends
// normally, "reduced"), one of a different count ("count") or a different call ("call": rank 1
// all-gathers). NCCL does not check that a communicator's ranks run the same collective; a GPU
// hangs or corrupts memory; the emulator must stop the job naming both ranks' calls
// (tests/cuda_emulator/nccl_checks/collective_match_test).
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
  if (size != 2 || argc != 2) {
    std::fprintf(stderr, "usage: mpirun -np 2 collective_match same|count|call\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const bool other_count = std::strcmp(argv[1], "count") == 0, other_call = std::strcmp(argv[1], "call") == 0;
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 3);
  float* buffer = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&buffer), 64 * sizeof(float)) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 4);
  ncclResult_t rc = ncclSuccess;
  if (rank == 1 && other_call) {
    rc = ncclAllGather(buffer, buffer + 16, 8, ncclFloat, comm, nullptr);
  } else {
    rc = ncclAllReduce(buffer, buffer, rank == 1 && other_count ? 4 : 8, ncclFloat, ncclSum, comm, nullptr);
  }
  if (rc != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 5);
  cudaDeviceSynchronize();
  if (rank == 0) std::printf("reduced\n");
  cudaFree(buffer);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
