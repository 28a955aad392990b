// Helpers for the CUDA kernel tests: skip without a GPU, move vectors to and
// from the device, and convert to bf16. Inputs come from kernels::random_* (never
// zeros); the CPU kernels in templates/cpu are the reference.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common.cuh"
#include "kernels/kernel_test_util.hpp"
#include "runtime/cuda/check.hpp"

namespace gc::test::gpu {

using gc::rt::cuda::DeviceBuffer;
using gc::tree::cuda::bf16;

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
      GTEST_SKIP() << "no CUDA device (scripts/gpu_kit runs these on a GPU)"; \
    }                                                             \
  } while (0)

template <typename T, typename S>
std::vector<T> convert(const std::vector<S>& v) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = gc::tree::cuda::from_float<T>(float(v[i]));
  return out;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = double(gc::tree::cuda::to_float(v[i]));
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

// An attention shape for the kernels' templates (heads, kv heads, head_dim, scale in thousandths).
template <int H, int KV, int HD, int kScaleThousandths>
struct AttentionShape {
  static constexpr int kHeads = H, kKvHeads = KV, kHeadDim = HD;
  static constexpr float kScale = float(kScaleThousandths) / 1000.0f;
};

// Tolerances of the issue: fp32 relative error < 1e-4, bf16 < 1e-2.
template <typename T>
constexpr double tolerance() {
  return std::is_same_v<T, float> ? 1e-4 : 1e-2;
}

// Shared by the kernel tests: names, rounding to T, transfers as double, comparisons.
template <typename T>
std::string type_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

// v rounded to T and back: the values a T buffer made from v holds.
template <typename T>
std::vector<double> rounded(const std::vector<double>& v) {
  return to_double(convert<T>(v));
}

template <typename T>
DeviceBuffer<T> upload_as(const std::vector<double>& v) {
  return upload(convert<T>(v));
}

template <typename T>
std::vector<double> download_double(const DeviceBuffer<T>& d) {
  return to_double(download(d));
}

inline void expect_close(const std::vector<double>& got, const std::vector<double>& ref, double tol,
                         const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const double err = kernels::rel_error(got, ref);
  kernels::report("cuda " + what, err);
  EXPECT_LT(err, tol) << what;
}

template <typename T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

}  // namespace gc::test::gpu
