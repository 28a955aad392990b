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

// A Comm keeps its communicator as MPI's Fortran handle (an int in every MPI), so comm.hpp
// needs no MPI header.
MPI_Comm comm_of(int handle) { return MPI_Comm_f2c(MPI_Fint(handle)); }

// An element count as MPI's int, or an error naming what overflowed.
int mpi_count(std::int64_t n, const char* what) {
  if (n < 0 || n > std::int64_t(0x7fffffff)) {
    throw RuntimeError("MPI", std::string(what) + ": " + std::to_string(n) + " elements exceed MPI's int count");
  }
  return int(n);
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
  handle_ = int(MPI_Comm_c2f(MPI_COMM_WORLD));
  MPI_Comm node;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  check(MPI_Comm_rank(node, &local_rank_), "MPI_Comm_rank");
  check(MPI_Comm_size(node, &local_size_), "MPI_Comm_size");
  node_handle_ = int(MPI_Comm_c2f(node));
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  check(MPI_Get_processor_name(name, &length), "MPI_Get_processor_name");
  host_.assign(name, std::size_t(length));
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
    check(MPI_Allreduce(MPI_IN_PLACE, data + done, count, MPI_FLOAT, MPI_SUM, comm_of(handle_)), "MPI_Allreduce");
  }
#else
  (void)data;
  (void)n;
#endif
}

void Comm::allreduce_sum(double* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1 && n > 0) {
    check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_DOUBLE, MPI_SUM, comm_of(handle_)), "MPI_Allreduce");
  }
#else
  (void)data;
  (void)n;
#endif
}

void Comm::allreduce_sum_in_rank_order(double* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1 && n > 0) {
    const int count = mpi_count(n, "allreduce_sum_in_rank_order");
    std::vector<double> all(std::size_t(n) * std::size_t(size_));
    check(MPI_Allgather(data, count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, comm_of(handle_)), "MPI_Allgather");
    for (std::int64_t i = 0; i < n; ++i) {
      double sum = all[std::size_t(i)];
      for (int r = 1; r < size_; ++r) sum += all[std::size_t(r) * std::size_t(n) + std::size_t(i)];
      data[i] = sum;
    }
  }
#else
  (void)data;
  (void)n;
#endif
}

void Comm::allreduce_sum(std::int64_t* data, std::int64_t n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1 && n > 0) {
    check(MPI_Allreduce(MPI_IN_PLACE, data, int(n), MPI_INT64_T, MPI_SUM, comm_of(handle_)), "MPI_Allreduce");
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

#ifdef GC_HAVE_MPI
namespace {

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> out(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) out[r] = out[r - 1] + counts[r - 1];
  return out;
}

}  // namespace
#endif

void Comm::reduce_scatter_sum(float* shard, const float* in, const std::vector<int>& counts) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    check(MPI_Reduce_scatter(in, shard, counts.data(), MPI_FLOAT, MPI_SUM, comm_of(handle_)), "MPI_Reduce_scatter");
    return;
  }
#endif
  for (int i = 0; i < counts[0]; ++i) shard[i] = in[i];
}

void Comm::allgather_inplace(float* all, const std::vector<int>& counts) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    const std::vector<int> displs = displacements(counts);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts.data(), displs.data(), MPI_FLOAT,
                         comm_of(handle_)),
          "MPI_Allgatherv");
  }
#else
  (void)all;
  (void)counts;
#endif
}

void Comm::gather_to_root(float* all, const float* shard, const std::vector<int>& counts) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    const std::vector<int> displs = displacements(counts);
    check(MPI_Gatherv(shard, counts[std::size_t(rank_)], MPI_FLOAT, all, counts.data(), displs.data(), MPI_FLOAT, 0,
                      comm_of(handle_)),
          "MPI_Gatherv");
    return;
  }
#endif
  for (int i = 0; i < counts[0]; ++i) all[i] = shard[i];
}

Comm Comm::split(int color) const {
  Comm sub = *this;
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    MPI_Comm part;
    check(MPI_Comm_split(comm_of(handle_), color, rank_, &part), "MPI_Comm_split");
    check(MPI_Comm_rank(part, &sub.rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(part, &sub.size_), "MPI_Comm_size");
    sub.handle_ = int(MPI_Comm_c2f(part));
  }
#else
  (void)color;
#endif
  return sub;
}


Comm Comm::node() const {
  Comm sub = *this;
#ifdef GC_HAVE_MPI
  if (mpi_ && node_handle_ != 0) {
    sub.handle_ = node_handle_;
    sub.rank_ = local_rank_;
    sub.size_ = local_size_;
  }
#endif
  return sub;
}

std::vector<std::string> Comm::allgather(const std::string& mine) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    const int n = mpi_count(std::int64_t(mine.size()), "Comm::allgather(string)");
    std::vector<int> lengths(std::size_t(size_), 0);
    check(MPI_Allgather(&n, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm_of(handle_)), "MPI_Allgather");
    const std::vector<int> displs = displacements(lengths);
    std::string all(std::size_t(displs.back() + lengths.back()), '\0');
    check(MPI_Allgatherv(mine.data(), n, MPI_CHAR, all.data(), lengths.data(), displs.data(), MPI_CHAR,
                         comm_of(handle_)),
          "MPI_Allgatherv");
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(lengths[std::size_t(r)])));
    return out;
  }
#endif
  return {mine};
}

void Comm::alltoallv(const float* send, const std::vector<std::int64_t>& send_counts, float* recv,
                     const std::vector<std::int64_t>& recv_counts) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    // MPI's int counts; the totals too, so that every displacement fits.
    const auto ints = [](const std::vector<std::int64_t>& counts) {
      std::vector<int> out;
      std::int64_t total = 0;
      for (std::int64_t c : counts) {
        out.push_back(mpi_count(c, "all-to-all"));
        total += c;
      }
      mpi_count(total, "all-to-all total");
      return out;
    };
    const std::vector<int> sc = ints(send_counts), rc = ints(recv_counts);
    check(MPI_Alltoallv(send, sc.data(), displacements(sc).data(), MPI_FLOAT, recv, rc.data(),
                        displacements(rc).data(), MPI_FLOAT, comm_of(handle_)),
          "MPI_Alltoallv");
    return;
  }
#endif
  std::copy(send, send + send_counts[0], recv);
  (void)recv_counts;
}

void Comm::allgather(const std::int64_t* mine, std::int64_t* all, int n) const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) {
    check(MPI_Allgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, comm_of(handle_)), "MPI_Allgather");
    return;
  }
#endif
  std::copy(mine, mine + n, all);
}

void Comm::broadcast(std::string& text) const {
#ifdef GC_HAVE_MPI
  if (!mpi_ || size_ == 1) return;
  long long n = (long long)text.size();
  check(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm_of(handle_)), "MPI_Bcast");
  text.resize(std::size_t(n));
  if (n > 0) check(MPI_Bcast(text.data(), int(n), MPI_CHAR, 0, comm_of(handle_)), "MPI_Bcast");
#else
  (void)text;
#endif
}

void Comm::barrier() const {
#ifdef GC_HAVE_MPI
  if (mpi_ && size_ > 1) check(MPI_Barrier(comm_of(handle_)), "MPI_Barrier");
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
