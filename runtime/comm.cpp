#include "runtime/comm.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#ifdef GC_HAVE_MPI
#include <mpi.h>
#endif

#include "runtime/error.hpp"

namespace gc::rt {

namespace {

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? int(n) : fallback;
}

#ifdef GC_HAVE_MPI
void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw RuntimeError("MPI", std::string(what) + " failed (error " + std::to_string(rc) + ")");
}
#endif

}  // namespace

int Comm::launched_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE"}) {
    const int n = env_int(name, -1);
    if (n > 0) return n;
  }
  return 0;
}

Comm& Comm::world() {
  static Comm comm;
  return comm;
}

Comm::Comm() {
  const int launched = launched_world_size();
  if (launched == 0) return;  // no launcher: a world of one, no MPI call
#ifdef GC_HAVE_MPI
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) check(MPI_Init(nullptr, nullptr), "MPI_Init");
  mpi_ = true;
  check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  local_rank_ = env_int("OMPI_COMM_WORLD_LOCAL_RANK", env_int("SLURM_LOCALID", env_int("MPI_LOCALRANKID", 0)));
#else
  if (launched > 1) {
    throw RuntimeError("train", "launched as one of " + std::to_string(launched) +
                                    " processes, but this tree was built without MPI (no MPI was found when it was "
                                    "configured; install libopenmpi-dev and rebuild), so each process would train "
                                    "alone");
  }
#endif
}

void Comm::allreduce_sum(float* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  // MPI counts are int: reduce in chunks below 2^30 elements.
  for (std::int64_t done = 0; mpi_ && size_ > 1 && done < n; done += std::int64_t(1) << 30) {
    const int count = int(std::min<std::int64_t>(n - done, std::int64_t(1) << 30));
    check(MPI_Allreduce(MPI_IN_PLACE, data + done, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
#else
  (void)data;
  (void)n;
#endif
}

void Comm::allreduce_sum(double* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1 && n > 0) {
    check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
#else
  (void)data;
  (void)n;
#endif
}

void Comm::allreduce_sum(std::int64_t* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1 && n > 0) {
    check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
#else
  (void)data;
  (void)n;
#endif
}

double Comm::allreduce_sum(double value) const {
  allreduce_sum(&value, 1);
  return value;
}

void Comm::reduce_scatter_sum(float* out, const float* in, std::int64_t n) const {
  const std::int64_t shard = n / size_;
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    check(MPI_Reduce_scatter_block(in, out, int(shard), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
          "MPI_Reduce_scatter_block");
    return;
  }
#endif
  for (std::int64_t i = 0; i < shard; ++i) out[i] = in[i];
}

void Comm::allgather(float* all, const float* shard, std::int64_t shard_n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    check(MPI_Allgather(shard, int(shard_n), MPI_FLOAT, all, int(shard_n), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgather");
    return;
  }
#endif
  if (all != shard) {
    for (std::int64_t i = 0; i < shard_n; ++i) all[i] = shard[i];
  }
}

void Comm::broadcast(std::string& text) const {
#ifdef GC_HAVE_MPI
  if (!mpi_ || size_ == 1) return;
  long long n = (long long)text.size();
  check(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
  text.resize(std::size_t(n));
  if (n > 0) check(MPI_Bcast(text.data(), int(n), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
#else
  (void)text;
#endif
}

void Comm::barrier() const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
#endif
}

void Comm::abort(int code) const {
  std::fflush(stderr);
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void Comm::finalize() {
#ifdef GC_HAVE_MPI
  if (mpi_) {
    int done = 0;
    MPI_Finalized(&done);
    if (!done) MPI_Finalize();
    mpi_ = false;
  }
#endif
}

}  // namespace gc::rt
