// Two ranks of the emulator's NCCL: rank 0 sends 8 floats, rank 1 receives the count given on the
// command line. Equal counts: the job ends normally ("received"). A longer receive than the send:
// real NCCL hangs or reads garbage, MPI accepts it silently; the emulator must stop the job,
// naming both sizes (tests/cuda_emulator/nccl_checks/receive_size_test).
#include <cstdio>
#include <cstdlib>

#include <mpi.h>

#include "cuda_runtime.h"
#include "nccl.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || argc != 2) {
    std::fprintf(stderr, "usage: mpirun -np 2 receive_size FLOATS_RANK1_EXPECTS\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int expected = std::atoi(argv[1]);
  ncclUniqueId id;
  if (rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 3);
  float* buffer = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&buffer), 64 * sizeof(float)) != cudaSuccess) MPI_Abort(MPI_COMM_WORLD, 4);
  const ncclResult_t rc = rank == 0 ? ncclSend(buffer, 8, ncclFloat, 1, comm, nullptr)
                                    : ncclRecv(buffer, std::size_t(expected), ncclFloat, 0, comm, nullptr);
  if (rc != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 5);
  cudaDeviceSynchronize();
  if (rank == 1) std::printf("received %d floats\n", expected);
  cudaFree(buffer);
  ncclCommDestroy(comm);
  MPI_Finalize();
  return 0;
}
