// Two ranks of the emulator's NCCL: rank 0 queues an all-reduce on a created stream that rank 1
// never joins (a peer that died or hangs), then tears down the way an exception does: frees its
// buffer, which waits for the device (cudaFree drains the streams, as on a GPU). Mode "abort":
// ncclCommAbort first, which cancels the queued collective, so the teardown ends ("torn down").
// Mode "free": no abort, so the free waits for a collective that can never complete: the job
// hangs, as it would on GPUs (tests/cuda_emulator/nccl_checks/abort_teardown_test; issue 41).
#include <cstdio>
#include <cstring>

#include "two_ranks.hpp"

int main(int argc, char** argv) {
  const auto [rank, comm, buffer] = start_two_ranks(argc, argv, "abort_teardown abort|free", 8, [](const char* mode) {
    return std::strcmp(mode, "abort") == 0 || std::strcmp(mode, "free") == 0;
  });
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
