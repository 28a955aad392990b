// Times what one rank does around one MoE layer's expert all-to-all at moe_3b's shapes under expert
// parallelism 8 (issue 39), on one GPU: the route, not the all-to-all itself (one GPU cannot hold
// two NCCL ranks). d_model 768, 145 experts, top-9, one micro-batch of 2 × 4096 tokens (73,728
// routed rows a rank), moe.capacity_factor 1.25 (318 rows per expert and sequence), bf16 rows:
//
//   slotted       the route this tree takes with a capacity (model/expert_parallel.hpp): pack the
//                 rank's rows into 8 slots of S rows, build the permutation and the owned
//                 experts' offsets from the group's offsets, unpack the rows that come back
//                 (cuda/expert_slots.cuh). Queued behind the layer's earlier work: no host wait.
//   host_planned  the dropless route's host side: the offsets copied to the host (a wait for the
//                 GPU), the route planned there (cpu::expert_slots_route's loops, the same
//                 O(C + G·E) work as plan_expert_route), the permutation and the owned offsets
//                 copied back.
//
// Each runs behind a busy kernel of about 1 ms that stands for the layer's earlier work; its cost
// is the wall time past the busy kernel alone (for host_planned, the bubble the wait leaves). The
// median of --iters after --warmup. Before timing, the device's permutation, its inverse and the
// owned offsets are compared with the host's (they must be equal). One JSON object per line.
//
//   expert_route_bench [--iters N] [--warmup N]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/expert_slots.hpp"
#include "cuda/expert_slots.cuh"
#include "runtime/cuda/check.hpp"

namespace {

using gc::rt::cuda::DeviceBuffer;
using gc::tree::core::ExpertBlock;
using gc::tree::cuda::bf16;

constexpr int kDModel = 768, kExperts = 145, kTopK = 9, kSeqLen = 4096, kSequences = 2, kGroup = 8;
constexpr std::int64_t kAssignments = std::int64_t(kSequences) * kSeqLen * kTopK;  // 73,728
constexpr std::int64_t kCapacity = 318;  // ceil(1.25 · 4096 · 9 / 145)
constexpr std::int64_t kLocal = (kExperts + kGroup - 1) / kGroup;
constexpr std::int64_t kSlot = std::min<std::int64_t>(kAssignments, kSequences * kCapacity * kLocal);  // 12,084
constexpr std::int64_t kBound = kGroup * kSlot;

// Every group rank's offsets: rows per expert as a router early in training might send them
// (weight 14 + (37·e + 11·rank) mod 29, so the busiest expert gets about 3× the idlest), each
// capped at the capacity of 2 sequences, as moe_apply_capacity would leave them.
std::vector<std::int64_t> group_offsets() {
  std::vector<std::int64_t> all;
  for (int s = 0; s < kGroup; ++s) {
    std::vector<std::int64_t> weight(kExperts);
    std::int64_t total = 0;
    for (int e = 0; e < kExperts; ++e) total += weight[e] = 14 + (37 * e + 11 * s) % 29;
    all.push_back(0);
    for (int e = 0; e < kExperts; ++e) {
      all.push_back(all.back() + std::min(kSequences * kCapacity, kAssignments * weight[e] / total));
    }
  }
  return all;
}

__global__ void busy_kernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

struct Options {
  int iters = 30, warmup = 5;
};

// Median wall milliseconds of [busy kernel, then `route`, then a device synchronize].
template <class F>
double median_wall_ms(const Options& opt, long long busy_cycles, F&& route) {
  std::vector<double> ms;
  for (int i = 0; i < opt.warmup + opt.iters; ++i) {
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    busy_kernel<<<1, 1>>>(busy_cycles);
    route();
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= opt.warmup) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

Options parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool known = a == "--iters" || a == "--warmup";
    const int v = known && i + 1 < argc ? std::atoi(argv[i + 1]) : 0;
    if (!known || v <= 0) {
      std::fprintf(stderr, "usage: expert_route_bench [--iters N] [--warmup N] (bad argument '%s')\n", a.c_str());
      std::exit(2);
    }
    (a == "--iters" ? opt.iters : opt.warmup) = v;
    ++i;
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  const std::vector<std::int64_t> all = group_offsets();
  const std::vector<std::int64_t> mine(all.begin(), all.begin() + (kExperts + 1));  // group rank 0's
  const ExpertBlock block = gc::tree::core::expert_block_of(0, kGroup, kExperts);
  const std::int64_t rows = mine.back();

  DeviceBuffer<std::int64_t> all_d(all.size()), mine_d(mine.size()), local_d(std::size_t(block.hi - block.lo + 1));
  all_d.upload(all.data(), all.size());
  mine_d.upload(mine.data(), mine.size());
  DeviceBuffer<std::int32_t> perm_d{std::size_t(kBound)}, unperm_d{std::size_t(kBound)};
  DeviceBuffer<bf16> x_d(std::size_t(rows) * kDModel), slots_d(std::size_t(kBound) * kDModel);
  GC_CUDA_CHECK(cudaMemset(x_d.data(), 0, x_d.size() * sizeof(bf16)));
  std::vector<std::int32_t> perm(static_cast<std::size_t>(kBound)), unperm(static_cast<std::size_t>(kBound));
  std::vector<std::int64_t> local(std::size_t(block.hi - block.lo + 1)), offsets_host(mine.size());

  auto slotted = [&] {
    gc::tree::cuda::expert_slots_pack(slots_d.data(), x_d.data(), mine_d.data(), kGroup, kSlot, kDModel, kExperts);
    gc::tree::cuda::expert_slots_route(perm_d.data(), unperm_d.data(), local_d.data(), all_d.data(), kGroup, kSlot,
                                       block, kBound, kExperts);
    gc::tree::cuda::expert_slots_unpack(x_d.data(), slots_d.data(), mine_d.data(), kGroup, kSlot, kDModel, kExperts);
  };
  auto host_planned = [&] {
    GC_CUDA_CHECK(cudaMemcpy(offsets_host.data(), mine_d.data(), offsets_host.size() * sizeof(std::int64_t),
                             cudaMemcpyDeviceToHost));
    gc::tree::cpu::expert_slots_route(perm.data(), unperm.data(), local.data(), all.data(), kGroup, kSlot, block,
                                      kBound, kExperts);
    const std::int64_t received = local.back();
    GC_CUDA_CHECK(cudaMemcpy(perm_d.data(), perm.data(), std::size_t(received) * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice));
    GC_CUDA_CHECK(cudaMemcpy(unperm_d.data(), unperm.data(), std::size_t(received) * sizeof(std::int32_t),
                             cudaMemcpyHostToDevice));
    GC_CUDA_CHECK(cudaMemcpy(local_d.data(), local.data(), local.size() * sizeof(std::int64_t),
                             cudaMemcpyHostToDevice));
  };

  // The device's route against the host's (the same definition, core/expert_slots.hpp).
  slotted();
  GC_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<std::int32_t> device_perm(perm.size()), device_unperm(unperm.size());
  std::vector<std::int64_t> device_local(local.size());
  GC_CUDA_CHECK(cudaMemcpy(device_perm.data(), perm_d.data(), device_perm.size() * sizeof(std::int32_t),
                           cudaMemcpyDeviceToHost));
  GC_CUDA_CHECK(cudaMemcpy(device_unperm.data(), unperm_d.data(), device_unperm.size() * sizeof(std::int32_t),
                           cudaMemcpyDeviceToHost));
  GC_CUDA_CHECK(cudaMemcpy(device_local.data(), local_d.data(), device_local.size() * sizeof(std::int64_t),
                           cudaMemcpyDeviceToHost));
  gc::tree::cpu::expert_slots_route(perm.data(), unperm.data(), local.data(), all.data(), kGroup, kSlot, block, kBound,
                                    kExperts);
  const bool same = device_perm == perm && device_unperm == unperm && device_local == local;

  cudaDeviceProp prop{};
  GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int khz = 0;
  GC_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  const long long busy_cycles = (long long)(khz > 0 ? khz : 1500000);  // about 1 ms
  const double busy = median_wall_ms(opt, busy_cycles, [] {});
  const double slotted_ms = median_wall_ms(opt, busy_cycles, slotted) - busy;
  const double host_ms = median_wall_ms(opt, busy_cycles, host_planned) - busy;
  std::printf("{\"device\": \"%s\", \"group\": %d, \"assignments\": %lld, \"slot_rows\": %lld, \"received\": %lld, "
              "\"padding\": %.4f, \"busy_ms\": %.4f, \"route_equal\": %s}\n",
              prop.name, kGroup, (long long)kAssignments, (long long)kSlot, (long long)local.back(),
              double(kBound) / double(kAssignments), busy, same ? "true" : "false");
  std::printf("{\"impl\": \"slotted\", \"ms\": %.4f}\n", slotted_ms);
  std::printf("{\"impl\": \"host_planned\", \"ms\": %.4f}\n", host_ms);
  return same ? 0 : 1;
}
