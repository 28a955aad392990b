// The one place processes talk to each other (docs/distributed.md). A program
// started by mpirun or srun (Open MPI's OMPI_COMM_WORLD_SIZE, or PMI_SIZE /
// PMIX_RANK under SLURM) joins the MPI job; one started without a launcher is
// a world of one and makes no MPI call at all. Built without MPI (no
// GC_HAVE_MPI), a launched program says so instead of running N independent
// copies.
//
// Collectives are blocking and called in the same order on every rank.
// Reductions of two ranks are exact (a + b = b + a); beyond that MPI's order
// is fixed for a given world size, so runs repeat bit for bit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gc::rt {

class Comm {
 public:
  // Initializes MPI when launched by mpirun/srun (once; later calls return the same world).
  static Comm& world();
  // Whether the environment says a launcher started this process (and how many ranks).
  static int launched_world_size();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }
  bool root() const { return rank_ == 0; }
  // This process's rank among the ranks on its node (MPI_Comm_split_type(MPI_COMM_TYPE_SHARED):
  // right under any launcher, with or without Slurm's variables), how many ranks share the node,
  // and the node's name: the GPU choice (engine/device_choice.cuh).
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  // The ranks on this process's node, numbered as local_rank() (in a world of one, a copy).
  Comm node() const;
  // Every rank's string, in rank order (a collective; in a world of one, {mine}).
  std::vector<std::string> allgather(const std::string& mine) const;

  // In-place sums over all ranks.
  void allreduce_sum(float* data, std::int64_t n) const;
  // In-place sums over all ranks added in rank order (r = 0, 1, ...) on every rank: the same bits
  // everywhere and in every communicator of the same size holding the same values, whatever
  // order the MPI library adds in (for small arrays that feed a replicated value: a gradient
  // norm's partial sums). Costs an all-gather of size() · n values.
  void allreduce_sum_in_rank_order(double* data, std::int64_t n) const;
  void allreduce_sum(double* data, std::int64_t n) const;
  void allreduce_sum(std::int64_t* data, std::int64_t n) const;
  double allreduce_sum(double value) const;
  // ZeRO-1 over a flat array split into consecutive shards, rank r's of
  // counts[r] values starting at the sum of the counts before it:
  //   reduce_scatter_sum  shard (counts[rank] values) = Σ over ranks of that part of `in`
  //   allgather_inplace   every rank's part of `all` (its own already in place) to every rank
  //   gather_to_root      rank 0's `all` receives every rank's `shard` (others pass all = nullptr)
  void reduce_scatter_sum(float* shard, const float* in, const std::vector<int>& counts) const;
  void allgather_inplace(float* all, const std::vector<int>& counts) const;
  void gather_to_root(float* all, const float* shard, const std::vector<int>& counts) const;
  // The ranks of this communicator with the same `color`, numbered in this one's rank order (a
  // collective of every rank here; in a world of one, a copy).
  Comm split(int color) const;
  // Expert parallelism: rank r's send_counts[r] floats (consecutive in `send`, in rank order)
  // go to rank r, and recv receives recv_counts[s] floats from each rank s in rank order.
  void alltoallv(const float* send, const std::vector<std::int64_t>& send_counts, float* recv,
                 const std::vector<std::int64_t>& recv_counts) const;
  // Every rank's n values, in rank order, to every rank (`all` holds size() · n).
  void allgather(const std::int64_t* mine, std::int64_t* all, int n) const;
  // Rank 0's string on every rank.
  void broadcast(std::string& text) const;
  void barrier() const;
  // Stops every rank (MPI_Abort) after `message` went to stderr; returns only in a world of one.
  [[noreturn]] void abort(int code) const;
  // MPI_Finalize (at a normal exit).
  void finalize();

 private:
  Comm();
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool mpi_ = false;
  int handle_ = 0;       // MPI's Fortran handle of the communicator (MPI_COMM_WORLD for world())
  int node_handle_ = 0;  // the same for the ranks on this node (world() only; 0: none)
};

// The micro-batches of one optimizer step that `rank` of `world` computes:
// m = rank, rank + world, ... below `micro_batches`. Every rank reads all of
// them (so the data position does not depend on the world size) and computes
// its own; together the ranks cover each micro-batch exactly once.
inline bool rank_owns_micro_batch(int m, int rank, int world) { return m % world == rank; }

}  // namespace gc::rt
