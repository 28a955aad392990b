// The CUDA backend's scratch for projections whose width is not a multiple of 8 (bf16): they run
// on zero-padded copies of their operands (templates/cuda/aligned_linear.cuh, which counts the
// same elements per call). The plan sizes the scratch for the largest such call of the model.
#pragma once

#include <cstdint>

#include "spec/spec.hpp"

namespace gc {

struct AlignScratch {
  std::int64_t act_elems = 0;   // of the activation type: x̂ and dx̂, ŷ / dŷ, Ŵ
  std::int64_t grad_elems = 0;  // of fp32: dŴ
  double bytes(double act_bytes) const { return double(act_elems) * act_bytes + double(grad_elems) * 4.0; }
};

// The largest need over the model's dense projections (attention Q, K, V, gate and output; the
// dense MLP and the shared experts, stacked or not; the LM head over head_rows rows); zero in fp32
// and when every width is a multiple of 8.
AlignScratch align_scratch(const Spec& spec, std::int64_t head_rows);

}  // namespace gc
