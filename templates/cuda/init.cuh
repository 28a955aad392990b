// Parameter initialization on the GPU with the CPU backend's Philox stream
// (core/philox.hpp): element i of tensor t under seed s evaluates the same
// GC_HD functions as core::fill_normal / fill_truncated_normal / fill_uniform,
// with the same double arithmetic and the same final rounding to float:
//
//   normal         out_i = float(σ · philox_normal(s, t, i))
//   trunc_normal   out_i = float(σ · philox_truncated_normal(s, t, i, c))   (same rejection over draws)
//   uniform        out_i = float(h · (2 · philox_uniform(s, t, i) − 1)),  h = sqrt(3) · σ on the host
//   ones           out_i = 1
//
// The raw Philox words are identical. Uniform is bitwise identical (no
// transcendental functions; h is computed by the same host expression).
// Normal and truncated normal go through Box-Muller's double log/sin/cos,
// which libdevice and the host libm may round differently by an ulp of
// double; after the rounding to float that changes a value only when it lies
// within ~1e-16 relative of a float rounding boundary (about one element in
// 10^8), and then by one float ulp (~6e-8 relative). A rejection decision
// |z| ≤ c could flip only for z within an ulp of c.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "common.cuh"
#include "core/philox.hpp"
#include "plan.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

namespace detail {

inline constexpr int kInitThreads = 256;

// Grid-stride over [0, n); `kind` is uniform across the grid.
template <typename T>
__global__ void __launch_bounds__(kInitThreads)
    init_kernel(T* __restrict__ out, std::int64_t n, InitKind kind, double std_dev, double half_width, double cutoff,
                std::uint64_t seed, std::uint32_t tensor_id, std::int64_t first) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint64_t index = std::uint64_t(first + i);
    double value = 1.0;
    switch (kind) {
      case InitKind::normal:
        value = std_dev * core::philox_normal(seed, tensor_id, index);
        break;
      case InitKind::trunc_normal:
        value = std_dev * core::philox_truncated_normal(seed, tensor_id, index, cutoff);
        break;
      case InitKind::uniform:
        value = half_width * (2.0 * core::philox_uniform(seed, tensor_id, index) - 1.0);
        break;
      case InitKind::ones:
        value = 1.0;
        break;
    }
    out[i] = from_float<T>(float(value));
  }
}

}  // namespace detail

// Fills out[0, n) with elements first … first + n − 1 of tensor `tensor_id`'s
// initial values under `seed`, as the CPU fills do (see the top comment),
// rounded to T (bf16: the rounding of the fp32 value). first > 0 draws a part
// of a tensor (a ZeRO-1 shard of the master weights). std_dev: σ; cutoff: the
// truncated normal's ±cutoff·σ bound (must be > 0 for trunc_normal: the
// rejection loop would not end otherwise). Stream 0, asynchronous.
//
// Launch: grid-stride, blocks_for(n, 256) blocks of 256 threads.
template <typename T>
void init_tensor(T* out, std::int64_t n, InitKind kind, double std_dev, double cutoff, std::uint64_t seed,
                 std::uint32_t tensor_id, std::int64_t first = 0) {
  if (n <= 0) return;
  if (kind == InitKind::trunc_normal && !(cutoff > 0.0)) {
    throw gc::rt::RuntimeError("init_tensor: truncated normal needs cutoff > 0, got " + std::to_string(cutoff));
  }
  const double half_width = std::sqrt(3.0) * std_dev;  // the expression of core::fill_uniform
  launch(detail::init_kernel<T>, blocks_for(n, detail::kInitThreads), detail::kInitThreads, 0, out, n, kind, std_dev,
         half_width, cutoff, seed, tensor_id, first);
}

}  // namespace gc::tree::cuda
