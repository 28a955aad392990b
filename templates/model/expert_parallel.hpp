// Expert parallelism (distributed.expert_parallel = G; docs/distributed.md): the ranks form
// groups of G consecutive ranks, and rank g of a group computes a contiguous block of the
// experts for every token of the group. After routing and the counting sort (model/moe_block.hpp,
// unchanged), each rank's rows are already sorted by expert, so the rows for rank q's block are
// one consecutive run: an all-to-all sends them to their owner (dispatch), the owner runs its
// experts, and the reverse all-to-all brings the outputs back to the rows' own rank (combine).
// The backward mirrors both. The owner orders its rows by expert, then source rank, then the
// source's token order, so its results do not depend on arrival. Exchanges carry whole rows of
// `width` activations; ExpertExchange hides the transport (MPI on the CPU: engine/expert_groups.hpp;
// NCCL on GPUs: engine/nccl_expert_exchange.cuh).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/expert_slots.hpp"
#include "plan.hpp"
#include "runtime/error.hpp"

namespace gc::tree {

// Rank r of `ranks` owns experts [lo, hi): ⌊E/ranks⌋ each, the first E mod ranks one more
// (145 experts on 8 ranks: 19, 18, ..., 18).
inline std::pair<int, int> expert_block(int r, int ranks) {
  const core::ExpertBlock b = core::expert_block_of(r, ranks, kExperts);
  return {b.lo, b.hi};
}

// Which route a training run takes (train --expert-route): automatic picks the slotted one where
// planning on the host would make the step wait for a device (GPUs) and the host-planned one where
// the host holds the rows anyway (the CPU backend: no wait to save, and no padding to pay).
enum class RouteChoice { automatic, slotted, host };

// The transport of one expert-parallel group (G ranks).
template <typename Act>
class ExpertExchange {
 public:
  virtual ~ExpertExchange() = default;
  // True where the rows live on a device, so that a host-planned route waits for it.
  virtual bool rows_on_device() const = 0;
  virtual int ranks() const = 0;  // G
  virtual int rank() const = 0;   // this rank's place in the group
  // send_rows[q] rows of `width` values (consecutive in `send`, in rank order) to group rank q;
  // recv receives recv_rows[s] rows from each group rank s, in rank order.
  virtual void exchange(const Act* send, const std::vector<std::int64_t>& send_rows, Act* recv,
                        const std::vector<std::int64_t>& recv_rows, int width) = 0;
  // Every group rank's kExperts row counts, in rank order (all: G · kExperts; host memory).
  virtual void share_counts(const std::int64_t* mine, std::int64_t* all) = 0;
  // Every group rank's kExperts + 1 expert offsets, in rank order (all: G · (kExperts + 1)), in the
  // backend's memory: on GPUs an all-gather on the compute stream, with no copy to the host.
  virtual void share_offsets(const std::int64_t* mine, std::int64_t* all) = 0;
  // The bound on the rows a rank's experts receive, as a multiple of its own assignments (0: the
  // dropless worst case; distributed.expert_exchange_factor or train --expert-exchange-factor).
  double receive_factor = 0.0;
  RouteChoice route = RouteChoice::automatic;  // train --expert-route
};

// One MoE layer's exchange in the last training forward (its backward reuses it). Two kinds:
//  host-planned  (dropless, or an exchange factor): the offsets go to the host, which plans the
//                exact rows each rank sends and the permutation (plan_expert_route).
//  slotted       (moe.capacity_factor, no tighter exchange factor): every rank sends every group
//                rank a slot of `slot` rows, of which the capacity lets it fill at most all; the
//                offsets are all-gathered and the permutation built where the rows lie
//                (backend expert_slots_*), so the step copies nothing to the host. The same rows
//                in the same expert-major order as host-planned, so the same training.
struct ExpertRoute {
  bool active = false;                      // the last forward exchanged (training)
  std::int64_t slot = 0;                    // > 0: slotted, with slots of this many rows
  std::vector<std::int64_t> send_rows;      // rows to each group rank (its block's run of xs)
  std::vector<std::int64_t> recv_rows;      // rows from each group rank
  std::vector<std::int64_t> local_offsets;  // kExperts + 1: the owned experts' rows, expert-major
  std::int64_t received = 0;                // rows this rank's experts compute
  std::pair<int, int> block{0, 0};          // those experts [lo, hi)
  // perm[p]: the received row of expert-major row p; unperm its inverse (host; the model copies
  // them where the backend's rows lie). counts, start: scratch (no allocation per step).
  std::vector<std::int32_t> perm, unperm;
  std::vector<std::int64_t> counts, start;
};

// The rows one rank sends one group rank's experts under a capacity: a sequence sends an expert at
// most kMoeCapacity rows, and a group rank owns at most ceil(E/G) experts; never more than the
// rank's own assignments. 0 without a capacity.
inline std::int64_t expert_slot_rows(std::int64_t assignments, int group_ranks) {
  if constexpr (kMoeCapacity > 0) {
    const std::int64_t sequences = assignments / kTopK / kSeqLen, local = (kExperts + group_ranks - 1) / group_ranks;
    return std::min(assignments, sequences * kMoeCapacity * local);
  }
  return 0;
}

// The rows a rank's experts may compute (the exchange buffers' size). Dropless: every assignment
// of the group. With moe.capacity_factor each of the G ranks sends them at most
// expert_slot_rows, so G times that. With an exchange factor f > 0
// (distributed.expert_exchange_factor) at most ceil(f · A): a bound the routing must respect
// (plan_expert_route stops the run otherwise). Never fewer than the rank's own A (the buffers
// hold them before the exchange). The compiler's explain counts the same
// (compiler/explain/explain_experts.cpp).
inline std::int64_t exchange_capacity_rows(std::int64_t assignments, int group_ranks, double factor = 0.0) {
  std::int64_t rows = assignments * group_ranks;
  if constexpr (kMoeCapacity > 0) {
    rows = group_ranks * expert_slot_rows(assignments, group_ranks);
  }
  if (factor > 0.0) rows = std::min(rows, std::int64_t(std::ceil(factor * double(assignments))));
  return std::max(assignments, rows);
}

// The slot of a slotted route for a rank of `assignments` rows in a group of G, or 0 when the
// route is host-planned: no capacity, or an exchange factor whose buffers hold fewer than G slots.
inline std::int64_t slotted_route_rows(std::int64_t assignments, int group_ranks, double factor) {
  const std::int64_t slot = expert_slot_rows(assignments, group_ranks);
  const std::int64_t C = exchange_capacity_rows(assignments, group_ranks, factor);
  return slot > 0 && group_ranks * slot <= C ? slot : 0;
}

// The slot of the route a run takes: slotted_route_rows where `choice` (automatic: where the rows
// are on a device) asks for slots, else 0. Asking for slots where none can be cut is an error.
inline std::int64_t chosen_slot_rows(RouteChoice choice, bool rows_on_device, std::int64_t assignments,
                                     int group_ranks, double factor) {
  if (choice == RouteChoice::host || (choice == RouteChoice::automatic && !rows_on_device)) return 0;
  const std::int64_t slot = slotted_route_rows(assignments, group_ranks, factor);
  if (slot == 0 && choice == RouteChoice::slotted) {
    throw gc::rt::RuntimeError("train", "--expert-route slotted needs moe.capacity_factor (a bound on the rows a "
                                        "rank sends each owner) and no tighter --expert-exchange-factor; use "
                                        "--expert-route auto or host");
  }
  return slot;
}

// Sizes a route's host vectors for a group of G ranks and C rows at most (once, before training),
// and its slot (chosen_slot_rows).
inline void reserve_expert_route(ExpertRoute& route, int G, std::int64_t C, std::int64_t slot) {
  route.slot = slot;
  route.send_rows.assign(std::size_t(G), 0);
  route.recv_rows.assign(std::size_t(G), 0);
  route.local_offsets.assign(std::size_t(kExperts) + 1, 0);
  route.perm.assign(std::size_t(C), 0);
  route.unperm.assign(std::size_t(C), 0);
  route.counts.assign(std::size_t(G + 1) * std::size_t(kExperts), 0);
  route.start.assign(std::size_t(G) * std::size_t(kExperts), 0);
}

// A slotted route's host side, the same every step: slot rows to and from every group rank, the
// buffers' C rows as the bound the kernels read the received count under.
inline void plan_slotted_route(ExpertRoute& route, int G, int rank, std::int64_t C) {
  std::fill(route.send_rows.begin(), route.send_rows.end(), route.slot);
  std::fill(route.recv_rows.begin(), route.recv_rows.end(), route.slot);
  route.block = expert_block(rank, G);
  route.received = C;
  route.active = true;
}

// Every group rank's received rows fit the exchange buffers (C rows, sized by the exchange factor),
// checked by every rank on the counts they all share, so all of them stop together.
inline void check_exchange_bound(const std::int64_t* all, int G, std::int64_t C, double factor) {
  for (int q = 0; q < G; ++q) {
    const auto [qlo, qhi] = expert_block(q, G);
    std::int64_t rows = 0;
    for (int s = 0; s < G; ++s) {
      for (int e = qlo; e < qhi; ++e) rows += all[std::size_t(s) * kExperts + std::size_t(e)];
    }
    if (rows <= C) continue;
    throw gc::rt::RuntimeError(
        "train", "the expert exchange: group rank " + std::to_string(q) + "'s experts " + std::to_string(qlo) + "-" +
                     std::to_string(qhi - 1) + " were routed " + std::to_string(rows) + " rows in an MoE layer, " +
                     "more than the " + std::to_string(C) + " its buffers hold (distributed.expert_exchange_factor = " +
                     std::to_string(factor) + " times a rank's own assignments). Raise it (train " +
                     "--expert-exchange-factor F, or 0 for the dropless worst case; the training is the same for "
                     "any factor that fits, so --resume works with a larger one) or bound the routing with " +
                     "moe.capacity_factor");
  }
}

// The route of one layer from this rank's expert offsets (kExperts + 1 entries), and the
// permutation of the received rows (source-major: source s's rows of expert lo, lo+1, ...) into
// expert-major order.
template <typename Act>
void plan_expert_route(ExpertRoute& route, const std::int64_t* offsets, ExpertExchange<Act>& x) {
  const int G = x.ranks(), E = kExperts;
  std::int64_t* mine = route.counts.data();  // this rank's counts, then every group rank's
  std::int64_t* all = mine + E;
  for (int e = 0; e < E; ++e) mine[e] = offsets[e + 1] - offsets[e];
  x.share_counts(mine, all);
  std::vector<std::int32_t>& perm = route.perm;
  std::vector<std::int32_t>& unperm = route.unperm;
  const auto [lo, hi] = expert_block(x.rank(), G);
  route.block = {lo, hi};
  std::fill(route.recv_rows.begin(), route.recv_rows.end(), 0);
  for (int q = 0; q < G; ++q) {
    const auto [qlo, qhi] = expert_block(q, G);
    route.send_rows[std::size_t(q)] = offsets[qhi] - offsets[qlo];
    for (int e = lo; e < hi; ++e) route.recv_rows[std::size_t(q)] += all[std::size_t(q) * E + std::size_t(e)];
  }
  // Where source s's rows of expert e start among the received rows.
  std::vector<std::int64_t>& start = route.start;
  std::int64_t at = 0;
  for (int s = 0; s < G; ++s) {
    for (int e = lo; e < hi; ++e) {
      start[std::size_t(s) * E + std::size_t(e)] = at;
      at += all[std::size_t(s) * E + std::size_t(e)];
    }
  }
  route.received = at;
  check_exchange_bound(all, G, std::int64_t(perm.size()), x.receive_factor);
  std::int64_t p = 0;
  for (int e = 0; e < E; ++e) {
    route.local_offsets[std::size_t(e)] = p;
    if (e < lo || e >= hi) continue;
    for (int s = 0; s < G; ++s) {
      const std::int64_t n = all[std::size_t(s) * E + std::size_t(e)], first = start[std::size_t(s) * E + std::size_t(e)];
      for (std::int64_t i = 0; i < n; ++i, ++p) {
        perm[std::size_t(p)] = std::int32_t(first + i);
        unperm[std::size_t(first + i)] = std::int32_t(p);
      }
    }
  }
  route.local_offsets[std::size_t(E)] = p;
  route.active = true;
}

}  // namespace gc::tree
