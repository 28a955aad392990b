// Whether a run uses the Hopper (wgmma) kernels of an op or its mma.sync ones (train --attention,
// --experts): the rule the attention (cuda/attention_sm90.cuh) and the experts
// (cuda/expert_linear.cuh) apply once, when the engine is built.
#pragma once

#include <string>

#include "core/kernel_rules.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

// Whether this binary holds sm_90a code for the wgmma kernels: the emulator runs their bodies;
// a tree has it when GC_CUDA_ARCHITECTURES lists 90a (its CMakeLists defines GC_CUDA_SM90A).
#if defined(GC_CUDA_EMULATOR) || defined(GC_CUDA_SM90A)
inline constexpr bool kSm90aBuilt = true;
#else
inline constexpr bool kSm90aBuilt = false;
#endif

// For the choice `want` of flag `flag` (e.g. "--attention"): `shape_refusal` is "" when the op's
// shapes fit the wgmma kernels, else why not. automatic takes them where they can run and
// `by_default` says so; wgmma insists, and throws naming what stops them (the shape, the GPU, the
// build); mma never takes them.
inline bool wgmma_chosen(core::TensorCoreKernels want, const char* flag, const char* what,
                         const std::string& shape_refusal, bool by_default) {
  if (want == core::TensorCoreKernels::mma) return false;
  if (want == core::TensorCoreKernels::automatic && !by_default) return false;  // nothing to ask the device
  std::string refusal = shape_refusal;
  if (refusal.empty()) {
    const cudaDeviceProp prop = gc::rt::cuda::current_device_properties();
    if (prop.major != 9 || prop.minor != 0) {
      refusal = std::string("they need a compute capability 9.0 GPU (H100, H200); this is ") + prop.name + " (" +
                std::to_string(prop.major) + "." + std::to_string(prop.minor) + ")";
    } else if (!kSm90aBuilt) {
      refusal = "this build has no sm_90a code (rebuild the tree with -DGC_CUDA_ARCHITECTURES listing 90a: "
                "gcompile SPEC --cuda-arch 90a)";
    }
  }
  if (want == core::TensorCoreKernels::wgmma && !refusal.empty()) {
    throw gc::rt::RuntimeError(std::string(flag) + " wgmma: the Hopper " + what + " kernels cannot run: " + refusal);
  }
  return refusal.empty() && (want == core::TensorCoreKernels::wgmma || by_default);
}

}  // namespace gc::tree::cuda
