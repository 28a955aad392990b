// The experts' projections on the CUDA backend (backend.cuh's grouped_linear_forward/backward):
// W stacked [E, out, in], expert e's rows offsets[e] .. offsets[e+1] of the row-major activations
// (the host's copy of the offsets, as the model keeps them). In bf16, when the shapes allow, one
// grouped launch per projection and direction (cuda/grouped_gemm.cuh), reading a device copy of
// the offsets that is uploaded without a wait, and only when they changed (a layer's three
// projections share one upload); otherwise, and in fp32 (the parity path), one cuBLASLt GEMM per
// expert with rows. An expert's row count changes every step, so those GEMMs are not timed
// (runtime/cuda/blaslt.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/common.cuh"
#include "cuda/grouped_gemm.cuh"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/cuda/pinned_upload.hpp"

namespace gcm::cuda {

template <typename T>
class ExpertLinear {
 public:
  // The device copy of the offsets and its staging (prepare(), with the other MoE buffers).
  void reserve() {
    device_offsets_.resize(std::size_t(kExperts) + 1);
    staging_.reserve(std::size_t(kExperts) + 1);
  }

  void forward(gc::rt::cuda::BlasLt& blas, T* y, const T* x, const T* W, const std::int64_t* offsets, int in,
               int out) {
    if (with_grouped_shape(in, out, [&](auto in_c, auto out_c) {
          grouped::forward<decltype(in_c)::value, decltype(out_c)::value>(
              y, x, W, device_offsets(offsets), kExperts, grouped::row_tiles(offsets, kExperts));
        })) {
      return;
    }
    for (int e = 0; e < kExperts; ++e) {
      const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
      if (rows == 0) continue;
      blas.gemm(false, true, int(rows), out, in, 1.0f, x + begin * in, in, W + std::int64_t(e) * out * in, in, 0.0f,
                y + begin * out, out, kVaryingRows);
    }
  }

  void backward(gc::rt::cuda::BlasLt& blas, T* dx, float* dW, const T* dy, const T* x, const T* W,
                const std::int64_t* offsets, int in, int out, bool accumulate_dx) {
    if (with_grouped_shape(in, out, [&](auto in_c, auto out_c) {
          grouped::backward<decltype(in_c)::value, decltype(out_c)::value>(
              dx, dW, dy, x, W, device_offsets(offsets), kExperts, grouped::row_tiles(offsets, kExperts), accumulate_dx);
        })) {
      return;
    }
    for (int e = 0; e < kExperts; ++e) {
      const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
      if (rows == 0) continue;
      const std::int64_t w = std::int64_t(e) * out * in;
      blas.gemm(false, false, int(rows), in, out, 1.0f, dy + begin * out, out, W + w, in, accumulate_dx ? 1.0f : 0.0f,
                dx + begin * in, in, kVaryingRows);
      blas.gemm(true, false, out, in, int(rows), 1.0f, dy + begin * out, out, x + begin * in, in, 1.0f, dW + w, in,
                kVaryingRows);
    }
  }

 private:
  static constexpr auto kVaryingRows = gc::rt::cuda::BlasLt::Shape::varying_rows;
  template <int IN, int OUT>
  static constexpr bool kGroupedKernel = std::is_same_v<T, bf16> && kMoe && grouped::kSupported<IN, OUT>;

  // Calls f(IN, OUT) as compile-time constants when (in, out) is an expert projection the grouped
  // kernels take; false otherwise.
  template <typename F>
  static bool with_grouped_shape(int in, int out, F&& f) {
    if constexpr (kGroupedKernel<kDModel, kExpertDff>) {
      if (in == kDModel && out == kExpertDff) {
        f(std::integral_constant<int, kDModel>{}, std::integral_constant<int, kExpertDff>{});
        return true;
      }
      if (in == kExpertDff && out == kDModel) {
        f(std::integral_constant<int, kExpertDff>{}, std::integral_constant<int, kDModel>{});
        return true;
      }
    }
    (void)in;
    (void)out;
    (void)f;
    return false;
  }

  // The device copy of these offsets: uploaded (queued after the kernels that read the previous
  // ones) unless it already holds them.
  const std::int64_t* device_offsets(const std::int64_t* offsets_host) {
    const std::size_t n = std::size_t(kExperts) + 1;
    if (uploaded_.size() != n || !std::equal(offsets_host, offsets_host + n, uploaded_.begin())) {
      staging_.upload(device_offsets_.data(), offsets_host, n);
      uploaded_.assign(offsets_host, offsets_host + n);
    }
    return device_offsets_.data();
  }

  gc::rt::cuda::DeviceBuffer<std::int64_t> device_offsets_;
  gc::rt::cuda::PinnedUploader<std::int64_t> staging_;  // host → device without a wait
  std::vector<std::int64_t> uploaded_;                  // what device_offsets_ holds
};

}  // namespace gcm::cuda
