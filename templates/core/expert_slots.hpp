// The index math of expert parallelism's slotted exchange (model/expert_parallel.hpp's
// ExpertRoute), written once for both backends' kernels (cpu/expert_slots.hpp,
// cuda/expert_slots.cuh).
//
// A group of G ranks; rank q owns experts [lo_q, hi_q) (expert_block_of). Each rank's rows are
// sorted by expert (its offsets: E + 1 entries), so the rows for rank q's experts are one run of
// n_q = offsets[hi_q] − offsets[lo_q] rows. The exchange sends rank q slot q of S rows: that run,
// then padding. The receiver's slot s holds source s's run, in the source's order: expert lo,
// lo + 1, ..., each in the source's token order. Its experts then compute expert-major rows p,
// ordered by expert, then source, then the source's order (the host-planned route's order, so
// both routes compute the same rows in the same order):
//   local_offsets[j] = Σ_{e < lo + j, e ≥ lo} Σ_s count(s, e)          (j = 0 .. hi − lo)
//   p(s, e, i)       = local_offsets[e − lo] + Σ_{s' < s} count(s', e) + i
//   slot row         = s · S + offsets_s[e] − offsets_s[lo] + i
// perm[p] is the slot row of expert-major row p, unperm[slot row] its p. The CUDA kernel maps each
// slot row with slot_row_to_expert_major; the CPU walks the same order expert-major.
#pragma once

#include <cstdint>

#include "core/host_device.hpp"

namespace gc::tree::core {

struct ExpertBlock {
  int lo, hi;
};

// Rank r of `ranks` owns experts [lo, hi): ⌊E/ranks⌋ each, the first E mod ranks one more.
GC_HD inline ExpertBlock expert_block_of(int r, int ranks, int experts) {
  const int base = experts / ranks, extra = experts % ranks;
  const int lo = r * base + (r < extra ? r : extra);
  return {lo, lo + base + (r < extra ? 1 : 0)};
}

// Source s's offsets among all (G · (E + 1), rank order) and its count for expert e.
GC_HD inline std::int64_t slot_count(const std::int64_t* all_offsets, int s, int e, int experts) {
  const std::int64_t* o = all_offsets + std::int64_t(s) * (experts + 1);
  return o[e + 1] - o[e];
}

// The expert-major row of slot row r = s·S + i, or −1 when r is padding (i ≥ n_s).
// local_offsets: as above, already computed.
GC_HD inline std::int64_t slot_row_to_expert_major(const std::int64_t* all_offsets, const std::int64_t* local_offsets,
                                                    std::int64_t r, int G, std::int64_t S, ExpertBlock b,
                                                    int experts) {
  const int s = int(r / S);
  const std::int64_t i = r - std::int64_t(s) * S;
  if (s >= G) return -1;
  const std::int64_t* o = all_offsets + std::int64_t(s) * (experts + 1);
  if (i >= o[b.hi] - o[b.lo]) return -1;
  int e = b.lo;
  while (o[e + 1] - o[b.lo] <= i) ++e;  // the expert of the source's i-th row for this rank
  std::int64_t p = local_offsets[e - b.lo] + (i - (o[e] - o[b.lo]));
  for (int t = 0; t < s; ++t) p += slot_count(all_offsets, t, e, experts);
  return p;
}

// local_offsets[0 .. hi − lo] of the owned experts' expert-major rows.
GC_HD inline void slot_local_offsets(std::int64_t* local_offsets, const std::int64_t* all_offsets, int G,
                                     ExpertBlock b, int experts) {
  std::int64_t at = 0;
  for (int e = b.lo; e < b.hi; ++e) {
    local_offsets[e - b.lo] = at;
    for (int s = 0; s < G; ++s) at += slot_count(all_offsets, s, e, experts);
  }
  local_offsets[b.hi - b.lo] = at;
}

}  // namespace gc::tree::core
