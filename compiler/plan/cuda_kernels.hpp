// Which CUDA kernels a spec gets (gcompile explain's "Kernels" section; issue 38 item 4). The
// rules mirror the templates' compile-time choices, each named beside its rule in cuda_kernels.cpp;
// a change to one of those conditions changes the rule here too.
#pragma once

#include <string>
#include <vector>

#include "spec/spec.hpp"

namespace gc {

struct KernelChoice {
  std::string op;      // "attention", "sm_90a attn", "projections", "experts", "sm_90a exp"
  std::string kernel;  // the template file and the instructions it runs on
  std::string why;     // the spec values that decide it
};

// The CUDA backend's kernels for `spec`, in the order a layer runs them.
std::vector<KernelChoice> cuda_kernels(const Spec& spec);

// The widths of the dense projections that are not a multiple of 8 under bf16, as "d_ff 5460" (a
// projection in or out of one runs on zero-padded copies: templates/cuda/aligned_linear.cuh);
// empty in fp32.
std::vector<std::string> unaligned_widths(const Spec& spec);

}  // namespace gc
