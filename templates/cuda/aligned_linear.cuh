// The dense projections on the CUDA backend (backend.cuh's linear_forward/backward): y = x·Wᵀ,
// dx (+)= dy·W, dW += dyᵀ·x through cuBLASLt, with every width a multiple of 8.
//
// cuBLASLt's Hopper kernels need each operand's contiguous extent to be a multiple of 8 bf16 (16
// bytes), not only its row stride: measured on an H200 (docs/performance.md, 2026-11-28), the
// 1.5B's down projection with d_ff = 5460 ran at 225-262 TFLOP/s (4.47 ms a layer) and at 738 with
// d_ff zero-padded to 5464 (1.51 ms), and moe_3b's LM head (vocabulary 151,643) at 98-127 TFLOP/s.
// So in bf16, a projection whose in or out is not a multiple of 8 runs on zero-padded copies:
//
//   forward   x̂ [N][in⁸] = x | 0,  Ŵ [out⁸][in⁸] = W | 0,  ŷ = x̂·Ŵᵀ,  y = ŷ[:, :out]
//   backward  dŷ = dy | 0,  dx̂ = dŷ·Ŵ,  dx (+)= dx̂[:, :in];  dŴ = dŷᵀ·x̂,  dW += dŴ[:out, :in]
//
// (in⁸, out⁸: rounded up to a multiple of 8). The zeros add nothing to any product, so the results
// are those of the unpadded GEMMs up to the order of fp32 sums. The padded copies live in two
// scratch buffers sized by the plan (plan.hpp's kAlignScratchActElems and kAlignScratchGradElems:
// compiler/plan, align_scratch), allocated once; a call that would need more is a bug and throws,
// naming its shape. fp32 (the parity path) and aligned widths call cuBLASLt directly.
// gcompile explain names the widths a spec pads (compiler/plan/cuda_kernels.cpp, the same rule).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "core/kernel_rules.hpp"
#include "cuda/common.cuh"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::tree::cuda {

namespace aligned {

inline constexpr int kAlign = core::kAlignedWidth;  // elements: 16 bytes of bf16 (core/kernel_rules.hpp)
inline int padded(int n) { return int(core::aligned_width(n)); }

// dst [rows][dst_cols] = src [rows][src_cols] in its first columns, zeros after (dst_cols ≥ src_cols).
template <typename T>
__global__ void pad_columns_kernel(T* __restrict__ dst, const T* __restrict__ src, std::int64_t rows, int src_cols,
                                   int dst_cols) {
  const std::int64_t n = rows * dst_cols;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / dst_cols;
    const int c = int(i - r * dst_cols);
    dst[i] = c < src_cols ? src[r * src_cols + c] : from_float<T>(0.0f);
  }
}

// dst [rows][dst_cols] (+)= src [rows][src_cols]'s first dst_cols columns (src_cols ≥ dst_cols).
template <typename T, typename S, bool ACCUMULATE>
__global__ void crop_columns_kernel(T* __restrict__ dst, const S* __restrict__ src, std::int64_t rows, int src_cols,
                                    int dst_cols) {
  const std::int64_t n = rows * dst_cols;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / dst_cols;
    const int c = int(i - r * dst_cols);
    const float v = to_float(src[r * src_cols + c]);
    if constexpr (ACCUMULATE) {
      dst[i] = from_float<T>(to_float(dst[i]) + v);
    } else {
      dst[i] = from_float<T>(v);
    }
  }
}

inline unsigned grid_for(std::int64_t n) {
  const std::int64_t blocks = (n + 255) / 256;
  return unsigned(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace aligned

template <typename T>
class AlignedLinear {
 public:
  // The scratch the plan sized: act_elems of T (x̂, dŷ or ŷ, dx̂ and Ŵ), grad_elems of fp32 (dŴ).
  void reserve(std::int64_t act_elems, std::int64_t grad_elems) {
    if (act_elems > 0) act_.resize(std::size_t(act_elems));
    if (grad_elems > 0) grad_.resize(std::size_t(grad_elems));
  }

  void forward(gc::rt::cuda::BlasLt& blas, T* y, const T* x, const T* W, int N, int in, int out) {
    if (!needs_padding(in, out)) {
      blas.gemm(false, true, N, out, in, 1.0f, x, in, W, in, 0.0f, y, out);
      return;
    }
    const Layout s = layout(N, in, out);
    const T* xs = pad(s.x, x, N, in, s.in);
    const T* Ws = pad(s.w, W, out, in, s.in, s.out);
    T* ys = out == s.out ? y : s.y;
    blas.gemm(false, true, N, s.out, s.in, 1.0f, xs, s.in, Ws, s.in, 0.0f, ys, s.out);
    if (ys != y) crop<T, false>(y, ys, N, s.out, out);
  }

  void backward(gc::rt::cuda::BlasLt& blas, T* dx, float* dW, const T* dy, const T* x, const T* W, int N, int in,
                int out, bool accumulate_dx) {
    if (!needs_padding(in, out)) {
      blas.gemm(false, false, N, in, out, 1.0f, dy, out, W, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
      blas.gemm(true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW, in);
      return;
    }
    const Layout s = layout(N, in, out);
    const T* dys = pad(s.y, dy, N, out, s.out);
    const T* Ws = pad(s.w, W, out, in, s.in, s.out);
    if (in == s.in) {
      blas.gemm(false, false, N, in, s.out, 1.0f, dys, s.out, Ws, in, accumulate_dx ? 1.0f : 0.0f, dx, in);
    } else {
      blas.gemm(false, false, N, s.in, s.out, 1.0f, dys, s.out, Ws, s.in, 0.0f, s.dx, s.in);
      if (accumulate_dx) {
        crop<T, true>(dx, s.dx, N, s.in, in);
      } else {
        crop<T, false>(dx, s.dx, N, s.in, in);
      }
    }
    const T* xs = pad(s.x, x, N, in, s.in);
    blas.gemm(true, false, s.out, s.in, N, 1.0f, dys, s.out, xs, s.in, 0.0f, grad_.data(), s.in);
    crop<float, true>(dW, grad_.data(), out, s.in, in);
  }

  // Whether y = x·Wᵀ runs on padded copies (bf16 with a width not a multiple of 8).
  static bool needs_padding(int in, int out) {
    return !std::is_same_v<T, float> && !(core::width_is_aligned(in) && core::width_is_aligned(out));
  }
  // Elements of T and of fp32 one such call needs (compiler/plan's align_scratch counts the same).
  static std::int64_t act_elems(std::int64_t N, int in, int out) {
    return needs_padding(in, out) ? core::aligned_act_elems(N, in, out) : 0;
  }
  static std::int64_t grad_elems(int in, int out) { return needs_padding(in, out) ? core::aligned_grad_elems(in, out) : 0; }

 private:
  // Where a call's padded operands go in the scratch: x̂ and dx̂ (when in is padded), ŷ / dŷ (when
  // out is), Ŵ.
  struct Layout {
    int in, out;
    T *x, *dx, *y, *w;
  };
  Layout layout(std::int64_t N, int in, int out) {
    const std::int64_t need = act_elems(N, in, out);
    if (need > std::int64_t(act_.size()) || grad_elems(in, out) > std::int64_t(grad_.size())) {
      throw gc::rt::RuntimeError("the CUDA backend's alignment scratch (planned " + std::to_string(act_.size()) + " + " +
                                 std::to_string(grad_.size()) + " elements) is too small for a " + std::to_string(N) +
                                 " x " + std::to_string(in) + " -> " + std::to_string(out) +
                                 " projection: the plan (compiler/plan, align_scratch) and the model disagree");
    }
    Layout s{aligned::padded(in), aligned::padded(out), nullptr, nullptr, nullptr, nullptr};
    T* next = act_.data();
    if (s.in != in) {
      s.x = next;
      s.dx = next + N * s.in;
      next += 2 * N * s.in;
    }
    if (s.out != out) {
      s.y = next;
      next += N * s.out;
    }
    s.w = next;
    return s;
  }

  // src [rows][cols] into dst [rows⁸][cols⁸] padded with zeros (rows_to: the padded row count; by
  // default rows); src itself when nothing is padded.
  static const T* pad(T* dst, const T* src, std::int64_t rows, int cols, int cols_to, std::int64_t rows_to = -1) {
    if (rows_to < 0) rows_to = rows;
    if (cols == cols_to && rows == rows_to) return src;
    launch(aligned::pad_columns_kernel<T>, aligned::grid_for(rows * cols_to), 256, 0, dst, src, rows, cols, cols_to);
    if (rows_to > rows) {
      GC_CUDA_CHECK(cudaMemsetAsync(dst + rows * cols_to, 0, std::size_t(rows_to - rows) * cols_to * sizeof(T)));
    }
    return dst;
  }
  template <typename D, bool ACCUMULATE, typename S>
  static void crop(D* dst, const S* src, std::int64_t rows, int src_cols, int dst_cols) {
    launch(aligned::crop_columns_kernel<D, S, ACCUMULATE>, aligned::grid_for(rows * dst_cols), 256, 0, dst, src, rows,
           src_cols, dst_cols);
  }

  gc::rt::cuda::DeviceBuffer<T> act_;
  gc::rt::cuda::DeviceBuffer<float> grad_;
};

}  // namespace gc::tree::cuda
