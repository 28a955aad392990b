// Whether the GPU in the machine can run this tree's kernels (train and parity ask before they
// allocate): compute capability 8.0 or newer, and a kernel image in this build for it.
#pragma once

#include <cstdint>
#include <string>

#include "cuda/common.cuh"
#include "runtime/cuda/check.hpp"

namespace gc::tree::cuda {

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * std::int64_t(blockDim.x) + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
  }
}

// "" when a device of compute capability MAJOR.MINOR named NAME can run this
// tree's kernels, else why not; IMAGE_ERROR is the error of the kernel-image
// probe (nullptr when the probe found this build's kernels). The kernels need
// compute capability 8.0 or newer (bf16 arithmetic); the tree builds them for
// GC_CUDA_ARCHITECTURES (by default sm_80, 86, 89 and 90a, with PTX that newer
// GPUs compile at load time), and a device none of those covers has no image.
inline std::string device_refusal(const std::string& name, int major, int minor, const char* image_error) {
  const std::string device =
      name + " (compute capability " + std::to_string(major) + "." + std::to_string(minor) + ")";
  if (major < 8) {
    return device + ": the CUDA backend needs compute capability 8.0 or newer (Ampere, Ada, Hopper or later)";
  }
  if (image_error != nullptr) {
    return device + ": this build has no kernels for it (" + image_error +
           "); rebuild the tree with -DGC_CUDA_ARCHITECTURES=" + std::to_string(major * 10 + minor) +
           (major == 9 ? "a" : "") + " (gcompile SPEC --cuda-arch ...)";
  }
  return "";
}

// "" when device 0 can run this tree's kernels, else why not (train and
// parity both ask): device_refusal for the device in the machine.
inline std::string unusable_device_reason() {
  if (gc::rt::cuda::device_count() == 0) return "no CUDA device is available (cudaGetDeviceCount found none)";
  cudaDeviceProp prop{};
  GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 8) return device_refusal(prop.name, prop.major, prop.minor, nullptr);
  cudaFuncAttributes attributes{};
  const cudaError_t image = cudaFuncGetAttributes(&attributes, add_kernel<float>);
  if (image != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error of the probe
    return device_refusal(prop.name, prop.major, prop.minor, cudaGetErrorString(image));
  }
  return "";
}

}  // namespace gc::tree::cuda
