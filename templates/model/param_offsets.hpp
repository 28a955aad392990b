// Where each parameter tensor lies in the flat parameter array (and, without expert
// parallelism, in the gradient and optimizer-state arrays: model/state_layout.hpp).
#pragma once

#include <cstdint>

#include "plan.hpp"

namespace gc::tree {

// Offsets of each tensor in the flat parameter (and gradient) array. Each
// tensor starts on a multiple of kTensorAlign elements (256 bytes in bf16,
// 512 in fp32), so every GEMM operand is as aligned as cuBLASLt's fastest
// kernels assume; the gaps stay zero and no kernel reads them.
inline constexpr std::int64_t kTensorAlign = 128;

struct ParamOffsets {
  std::int64_t at[kNumParams + 1] = {};
  constexpr ParamOffsets() {
    for (int i = 0; i < kNumParams; ++i) {
      const std::int64_t end = at[i] + kParams[i].numel;
      at[i + 1] = (end + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
    }
  }
};
inline constexpr ParamOffsets kOffsets{};
static_assert(kOffsets.at[kNumParams] == kStoredParams,
              "the flat parameter array differs from the planner's (compiler/plan: ParamCounts::stored)");

}  // namespace gc::tree
