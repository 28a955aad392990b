// Two ranks of the emulator's NCCL: rank 0 sends 8 floats, rank 1 receives the count given on the
// command line. Equal counts: the job ends normally ("received"). A longer receive than the send:
// real NCCL hangs or reads garbage, MPI accepts it silently; the emulator must stop the job,
// naming both sizes (tests/cuda_emulator/nccl_checks/receive_size_test).
#include <cstdio>
#include <cstdlib>

#include "two_ranks.hpp"

int main(int argc, char** argv) {
  const auto [rank, comm, buffer] = start_two_ranks(argc, argv, "receive_size FLOATS_RANK1_EXPECTS", 64,
                                     [](const char* floats) { return std::atoi(floats) > 0; });
  const int expected = std::atoi(argv[1]);
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
