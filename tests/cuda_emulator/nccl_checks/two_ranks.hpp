// The setup the nccl_checks programs share: MPI on exactly two ranks with the one argument the
// program takes (`valid` says which), an emulated NCCL communicator over both, and a device
// buffer of `floats` floats. Any failure aborts the job with its own status (2: usage, 3: the
// communicator, 4: the buffer), which the *_test scripts tell apart from the check's verdict.
#pragma once

#include <cstddef>
#include <cstdio>

#include <mpi.h>

#include "cuda_runtime.h"
#include "nccl.h"

struct TwoRanks {
  int rank = 0;
  ncclComm_t comm = nullptr;
  float* buffer = nullptr;
};

template <typename Valid>
TwoRanks start_two_ranks(int& argc, char**& argv, const char* usage, std::size_t floats, Valid&& valid) {
  MPI_Init(&argc, &argv);
  TwoRanks t;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &t.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2 || argc != 2 || !valid(argv[1])) {
    std::fprintf(stderr, "usage: mpirun -np 2 %s\n", usage);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  ncclUniqueId id;
  if (t.rank == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (ncclCommInitRank(&t.comm, 2, id, t.rank) != ncclSuccess) MPI_Abort(MPI_COMM_WORLD, 3);
  if (cudaMalloc(reinterpret_cast<void**>(&t.buffer), floats * sizeof(float)) != cudaSuccess) {
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  return t;
}
