// Two ranks of the emulator's NCCL run one all-reduce each: the same one ("same": the job ends
// normally, "reduced"), one of a different count ("count") or a different call ("call": rank 1
// all-gathers). NCCL does not check that a communicator's ranks run the same collective; a GPU
// hangs or corrupts memory; the emulator must stop the job naming both ranks' calls
// (tests/cuda_emulator/nccl_checks/collective_match_test).
#include <cstdio>
#include <cstring>

#include "two_ranks.hpp"

int main(int argc, char** argv) {
  const auto valid = [](const char* mode) {
    return std::strcmp(mode, "same") == 0 || std::strcmp(mode, "count") == 0 || std::strcmp(mode, "call") == 0;
  };
  const auto [rank, comm, buffer] = start_two_ranks(argc, argv, "collective_match same|count|call", 64, valid);
  const bool other_count = std::strcmp(argv[1], "count") == 0, other_call = std::strcmp(argv[1], "call") == 0;
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
