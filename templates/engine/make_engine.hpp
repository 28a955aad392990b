// The engine a run asks for, in one place (issue 40: train/ and the programs build their engine
// here instead of choosing between engine/cpu_engine.hpp and engine/cuda_engine.cu themselves).
//
//   --device cpu    the CPU engine
//   --device cuda   the CUDA engine; an error in a tree built without the CUDA backend
//   --device auto   the CUDA engine where the tree has the CUDA backend and finds a device, else
//                   the CPU engine
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine/cpu_engine.hpp"
#include "engine/cpu_model.hpp"
#include "engine/engine.hpp"
#include "runtime/error.hpp"

namespace gc::tree {

// Whether a run with --device `device` trains or measures on the GPU.
inline bool runs_on_gpu(const std::string& device) {
#ifdef GC_HAVE_CUDA
  return device == "cuda" || (device == "auto" && cuda_available());
#else
  if (device == "cuda") {
    throw gc::rt::RuntimeError("--device cuda: this tree was built without the CUDA backend (no nvcc was found "
                               "when it was configured); use --device cpu or rebuild with the CUDA toolkit");
  }
  return false;
#endif
}

// The host state the CPU engine works on in place: the fp32 model and the AdamW moments, which
// the caller keeps (checkpoints and metrics read them there).
struct HostEngineState {
  Model<float>* model;
  std::vector<float>* m;
  std::vector<float>* v;
};

// The CUDA engine for kMicroBatch × kSeqLen rows when `on_gpu` (runs_on_gpu), else the CPU
// engine over host_state(), which is called only then (it may allocate the host model).
// `kernels` (train --attention, --experts) picks the CUDA engine's tensor-core kernels; the CPU
// has one kind of each, so asking it for wgmma is an error.
inline std::unique_ptr<Engine> make_engine(bool on_gpu, const std::function<HostEngineState()>& host_state,
                                           const core::KernelChoices& kernels = {}) {
#ifdef GC_HAVE_CUDA
  if (on_gpu) return make_cuda_engine(kMicroBatch, kSeqLen, kernels);
#else
  (void)on_gpu;  // runs_on_gpu is false in a tree without the CUDA backend
#endif
  for (const auto& [flag, choice] :
       {std::pair{"--attention", kernels.attention}, std::pair{"--experts", kernels.experts}}) {
    if (choice == core::TensorCoreKernels::wgmma) {
      throw gc::rt::RuntimeError(std::string(flag) + " wgmma: the Hopper kernels run on the CUDA backend, and this "
                                 "run trains on the CPU (--device cpu, or no usable GPU)");
    }
  }
  const HostEngineState state = host_state();
  return std::make_unique<CpuEngine>(*state.model, *state.m, *state.v);
}

}  // namespace gc::tree
