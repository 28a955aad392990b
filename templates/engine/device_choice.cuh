// Which GPU each rank of a multi-process job trains on (make_cuda_engine, before any allocation).
// The ranks of one node (MPI_COMM_TYPE_SHARED: right under mpirun, srun or any other launcher)
// see D devices each:
//   D ≥ the node's ranks   one launcher, every rank sees every GPU: local rank r takes device r;
//   D = 1                  the launcher gave each rank its own GPU (srun --gpus-per-task=1, or
//                          CUDA_VISIBLE_DEVICES set per rank): device 0;
//   otherwise              no mapping: an error.
// Then the node's ranks compare the UUIDs of the devices they chose: NCCL refuses two ranks of one
// communicator on one GPU, so two ranks on one device are an error naming both. Every rank learns
// every rank's outcome (one all-gather on the node), so all of them stop together with the same
// message and none waits in a later collective.
#pragma once

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/comm.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree {

namespace detail {

// The launcher's variables that say how GPUs and local ranks were assigned (unset ones omitted).
inline std::string launcher_variables() {
  std::string out;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                           "SLURM_LOCALID", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_TASK"}) {
    if (const char* v = std::getenv(name)) out += std::string(out.empty() ? "" : ", ") + name + "=" + v;
  }
  return out.empty() ? "none of CUDA_VISIBLE_DEVICES, OMPI_COMM_WORLD_LOCAL_*, SLURM_* set" : out;
}

inline std::string uuid_text(const cudaUUID_t& id) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 16; ++i) {
    const unsigned char b = static_cast<unsigned char>(id.bytes[i]);
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

// The GPUs this process sees (0 where none is usable: unusable_device_reason says why, after
// the choice).
inline int visible_devices() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) {
    cudaGetLastError();
    devices = 0;
  }
  return devices;
}

// This rank's proposal among `devices` visible GPUs: "ok <device> <uuid>", "none" or "error <why>".
inline std::string propose_device(const gc::rt::Comm& world, int devices) {
  const int local = world.local_rank(), ranks = world.local_size();
  if (devices == 0) return "none";
  int device = -1;
  if (devices >= ranks) {
    device = local;
  } else if (devices == 1) {
    device = 0;
  } else {
    return "error " + std::to_string(ranks) + " ranks share the node but each sees " + std::to_string(devices) +
           " GPUs (fewer than the ranks, more than one): no GPU per rank";
  }
  GC_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return "ok " + std::to_string(device) + " " + uuid_text(prop.uuid);
}

}  // namespace detail

// Sets this rank's device (a multi-process job); throws on every rank of the node, naming the
// rank, the host, what it sees and the launcher's variables, when no valid mapping exists.
inline void choose_device(const gc::rt::Comm& world) {
  const int devices = detail::visible_devices();
  const std::vector<std::string> all = world.node().allgather(detail::propose_device(world, devices));
  const std::string where = "rank " + std::to_string(world.rank()) + " (local rank " +
                            std::to_string(world.local_rank()) + " of " + std::to_string(world.local_size()) +
                            " on host " + world.host() + ", " + std::to_string(devices) +
                            " visible GPU(s); " + detail::launcher_variables() + ")";
  const char* remedy = "launch one rank per GPU: mpirun --map-by ppr:GPUS:node, or srun --gpus-per-task=1 "
                       "--kill-on-bad-exit=1 (docs/distributed.md), or train on the CPU backend (--device cpu)";
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r].rfind("error ", 0) == 0) {
      throw gc::rt::RuntimeError("--device cuda", "local rank " + std::to_string(r) + " of host " + world.host() +
                                                      ": " + all[r].substr(6) + "; seen from " + where + "; " +
                                                      remedy);
    }
  }
  // Every rank checks every pair, so all of them stop on a shared GPU, not only its two ranks.
  const auto uuid_of = [&](std::size_t r) {
    return all[r].rfind("ok ", 0) == 0 ? all[r].substr(all[r].rfind(' ') + 1) : std::string();
  };
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      if (uuid_of(i).empty() || uuid_of(i) != uuid_of(j)) continue;
      throw gc::rt::RuntimeError("--device cuda", "local ranks " + std::to_string(i) + " and " + std::to_string(j) +
                                                      " of host " + world.host() + " share one GPU (UUID " +
                                                      uuid_of(i) + "), which NCCL refuses; seen from " + where +
                                                      "; " + remedy);
    }
  }
}

}  // namespace gc::tree
