// Helpers for the CUDA kernel tests: skip without a GPU, move vectors to and
// from the device, and convert to bf16. Inputs come from kt::random_* (never
// zeros); the CPU kernels in templates/cpu are the reference.
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "cuda/common.cuh"
#include "kernels/kernel_test_util.hpp"
#include "runtime/cuda/check.hpp"

namespace ct {

using gc::rt::cuda::DeviceBuffer;
using gcm::cuda::bf16;

// True when the tests run on the CPU emulator (tests/cuda_emulator: GC_REQUIRE_GPU() passes there),
// for a test whose size would make emulation slow.
#ifdef GC_CUDA_EMULATOR
inline constexpr bool kEmulated = true;
#else
inline constexpr bool kEmulated = false;
#endif

#define GC_REQUIRE_GPU()                                          \
  do {                                                            \
    if (gc::rt::cuda::device_count() == 0) {                      \
      GTEST_SKIP() << "no CUDA device (checked by scripts/gpu_check)"; \
    }                                                             \
  } while (0)

template <typename T, typename S>
std::vector<T> convert(const std::vector<S>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = gcm::cuda::from_float<T>(float(v[i]));
  return out;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = double(gcm::cuda::to_float(v[i]));
  return out;
}

template <typename T>
DeviceBuffer<T> upload(const std::vector<T>& host) {
  DeviceBuffer<T> d(host.size());
  d.upload(host.data(), host.size());
  return d;
}

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  GC_CUDA_CHECK(cudaDeviceSynchronize());
  d.download(host.data(), host.size());
  return host;
}

// Tolerances of the issue: fp32 relative error < 1e-4, bf16 < 1e-2.
template <typename T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-2;
}

}  // namespace ct
