// The device memory of the in-loop metrics on a GPU: what the generated tree's
// Engine::prepare_metrics allocates (templates/metrics/device_scratch.hpp gives the same
// counts to the CUDA kernels; the emulated data-parallel test holds the two to each other).
#pragma once

#include <cstdint>
#include <vector>

#include "plan/plan.hpp"
#include "spec/spec.hpp"

namespace gc {

// Bytes on one rank whose update-ratio copy covers [lo, hi) of the flat parameter array (a
// ZeRO-1 shard; [0, stored) without sharding).
double estimate_metrics_scratch_bytes(const Spec& spec, const std::vector<ParamEntry>& params, std::int64_t lo,
                                      std::int64_t hi);

// ZeRO-1 under bf16 over several GPUs: the scratch that assembles one tensor's fp32 masters for
// the weight metrics (the largest tensor; 0 without weight metrics).
double estimate_master_gather_bytes(const Spec& spec, const std::vector<ParamEntry>& params);

}  // namespace gc
