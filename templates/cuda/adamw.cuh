// AdamW, gradient norms and the master → working cast on the GPU. The math is
// cpu/adamw.hpp's (seed 003 eq. 1):
//
//   g   = clip · grad
//   m   = β1 m + (1 − β1) g            m̂ = m / (1 − β1^t)
//   v   = β2 v + (1 − β2) g²           v̂ = v / (1 − β2^t)
//   θ  ← θ − η_t · m̂ / (sqrt(v̂) + ε) − η_t · λ · θ       (decay uses the pre-update θ)
//
// with η_t = lr · lr_mult of the element's tensor. The parameters live in one
// flat array; adamw_step_all updates all of them in one launch. State is fp32
// (master θ, m, v, grad); the working copy (T = float or bf16, what the
// forward pass reads) receives the new master rounded to T.
//
// Arithmetic: fp32 per element, where the CPU backend uses double. The bias
// corrections 1 − β^t, 1 − β1 and 1 − β2 are computed on the host in double
// and rounded once to float. Each step therefore differs from the CPU's by a
// few fp32 roundings, a relative difference of ~1e-7 per step (well inside
// the 1e-4 parity tolerance; an fp32 emulation of this kernel over 5 steps
// gives ~7e-8 on θ, ~1e-6 on θ − θ0, ~9e-8 on m and v). nvcc may contract
// products into FMAs, which removes roundings rather than adding any. Every
// element is independent, so the result does not depend on the launch
// geometry; `working` must not alias `master` (pass nullptr instead).
//
// Norms: sum_squares_per_tensor reproduces cpu::sum_of_squares's chunking
// (65536-element chunks starting at each tensor's first element, one double
// partial per chunk, partials added in chunk order), with a fixed-order
// block tree inside a chunk in place of the CPU's serial loop. No atomics:
// the result is bitwise identical run to run; it matches the CPU to ~1e-15
// relative (not bitwise: the order inside a chunk differs).
//
// The step's end without the host: judge_step_on_device runs step_verdict.hpp's
// judge_step (global norm from the per-tensor sums, clip multiplier, stop on a non-finite loss
// or norm) in one device thread, and adamw_step_judged reads the multiplier and the stop from
// that verdict, so the host queues a whole step without reading anything back.
//
// Layout contract for AdamWTensor tables: rows sorted by offset, ranges
// [offset, offset + numel) disjoint and inside [0, total). Gaps between
// tensors and empty tensors are allowed; elements in gaps are not touched.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "common.cuh"
#include "step_verdict.hpp"

namespace gc::tree::cuda {

struct AdamWTensor {
  std::int64_t offset;
  std::int64_t numel;
  float lr_mult;
  float weight_decay;  // decoupled λ; 0 for exempt tensors
};

namespace detail {

// ---- AdamW -----------------------------------------------------------------

inline constexpr int kAdamWThreads = 256;
inline constexpr int kAdamWPerThread = 8;
inline constexpr std::int64_t kAdamWChunk = std::int64_t(kAdamWThreads) * kAdamWPerThread;  // elements per block

struct AdamWScalars {
  float lr;
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;
  float bias1, bias2;  // 1 − β1^t, 1 − β2^t
  float eps;
  float grad_scale;
};

// Index of the last tensor with offset ≤ i (−1 when i precedes every tensor).
__device__ inline int last_tensor_at_or_before(const AdamWTensor* tensors, int num_tensors, std::int64_t i) {
  int lo = 0, hi = num_tensors;  // answer + 1 lies in [lo, hi]
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (tensors[mid].offset <= i) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo - 1;
}

// One element's step: the new moments and the new θ. adamw_kernel applies it; the update-ratio
// pass (cuda/update_ratio.cuh) evaluates it without writing, so both see the same values.
struct AdamWElement {
  float m, v, theta;
};
__device__ __forceinline__ AdamWElement adamw_element(float theta, float m, float v, float grad, const AdamWScalars& s,
                                                      const AdamWTensor& tensor) {
  const float g = s.grad_scale * grad;
  const float mi = s.beta1 * m + s.one_minus_beta1 * g;
  const float vi = s.beta2 * v + s.one_minus_beta2 * g * g;
  const float adam = (mi / s.bias1) / (sqrtf(vi / s.bias2) + s.eps);
  const float lr_t = s.lr * tensor.lr_mult;
  return {mi, vi, theta - lr_t * adam - lr_t * tensor.weight_decay * theta};
}

// Block b owns flat elements [b·kAdamWChunk, (b+1)·kAdamWChunk); thread x of it
// handles chunk_begin + x + k·kAdamWThreads for k < kAdamWPerThread (coalesced).
// A thread's indices increase, so one binary search finds its first tensor and
// the tensor index then only moves forward. No barriers: early exits are safe.
// With a verdict (judge_step's, on the device) the gradient multiplier is its clip, and a
// stopped run changes nothing; without one it is s.grad_scale.
template <typename T>
__global__ void __launch_bounds__(kAdamWThreads)
    adamw_kernel(float* __restrict__ master, T* __restrict__ working, float* __restrict__ m, float* __restrict__ v,
                 const float* __restrict__ grad, const AdamWTensor* __restrict__ tensors, int num_tensors,
                 std::int64_t total, AdamWScalars s, const StepVerdict* __restrict__ verdict) {
  std::int64_t i = std::int64_t(blockIdx.x) * kAdamWChunk + threadIdx.x;
  if (i >= total) return;
  if (verdict != nullptr) {
    if (verdict->stopped_at != 0) return;
    s.grad_scale = float(verdict->clip);
  }
  int t = last_tensor_at_or_before(tensors, num_tensors, i);
  for (int k = 0; k < kAdamWPerThread; ++k, i += kAdamWThreads) {
    if (i >= total) break;
    while (t + 1 < num_tensors && tensors[t + 1].offset <= i) ++t;
    if (t < 0) continue;  // before the first tensor
    const AdamWTensor tensor = tensors[t];
    if (i >= tensor.offset + tensor.numel) continue;  // in a gap after tensor t

    const AdamWElement e = adamw_element(master[i], m[i], v[i], grad[i], s, tensor);
    m[i] = e.m;
    v[i] = e.v;
    master[i] = e.theta;
    if (working != nullptr) working[i] = from_float<T>(e.theta);
  }
}

// ---- sums of squares ---------------------------------------------------------

inline constexpr std::int64_t kNormChunk = std::int64_t(1) << 16;  // = cpu::kNormChunk
inline constexpr int kNormThreads = 256;
inline constexpr int kFinalizeThreads = 128;

// Σ x² over [begin, end) in double by the whole block, in a fixed order.
// Every thread of the block must call it (it has barriers).
template <typename T>
__device__ inline double block_sum_squares(const T* __restrict__ x, std::int64_t begin, std::int64_t end) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double xi = double(to_float(x[i]));
    s += xi * xi;
  }
  return block_sum(s, scratch);
}

// Chunk slot of tensor t's first chunk: ⌊offset_t / C⌋ + t. Strictly increasing
// in t, and tensor t's chunks take slots first_slot(t) … first_slot(t) +
// ⌈numel_t / C⌉ − 1, which end before first_slot(t + 1) because offset_{t+1} ≥
// offset_t + numel_t. Every slot is below ⌊total / C⌋ + num_tensors.
__device__ inline std::int64_t first_slot(const AdamWTensor& tensor, int t) { return tensor.offset / kNormChunk + t; }

__device__ inline std::int64_t chunk_count(std::int64_t numel) { return (numel + kNormChunk - 1) / kNormChunk; }

// The chunk slot b holds: its tensor t and its elements [begin, end), or t = −1 for an unused slot.
struct SlotChunk {
  int t;
  std::int64_t begin, end;
};
__device__ inline SlotChunk chunk_of_slot(const AdamWTensor* __restrict__ tensors, int num_tensors, std::int64_t b) {
  int lo = 0, hi = num_tensors;  // last t with first_slot(t) ≤ b
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (first_slot(tensors[mid], mid) <= b) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const int t = lo - 1;
  if (t < 0) return {-1, 0, 0};
  const AdamWTensor tensor = tensors[t];
  const std::int64_t c = b - first_slot(tensor, t);
  if (c >= chunk_count(tensor.numel)) return {-1, 0, 0};
  const std::int64_t begin = tensor.offset + c * kNormChunk;
  const std::int64_t end = begin + kNormChunk < tensor.offset + tensor.numel ? begin + kNormChunk
                                                                               : tensor.offset + tensor.numel;
  return {t, begin, end};
}

// One block per slot (grid = ⌊total / C⌋ + num_tensors): block b finds the
// tensor whose slots contain b and writes that chunk's partial to partial[b].
// Unused slots write nothing. The exits are block-uniform, before any barrier.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    tensor_chunk_squares_kernel(double* __restrict__ partial, const T* __restrict__ x,
                                const AdamWTensor* __restrict__ tensors, int num_tensors) {
  const std::int64_t b = blockIdx.x;
  const SlotChunk chunk = chunk_of_slot(tensors, num_tensors, b);
  if (chunk.t < 0) return;
  const double s = block_sum_squares(x, chunk.begin, chunk.end);
  if (threadIdx.x == 0) partial[b] = s;
}

// One thread per tensor adds its chunk partials in chunk order (as the CPU does): kPer values
// per chunk slot (Σ g²: 1; the update-ratio pass's Σ Δθ², Σ θ²: 2), out[kPer·t + j].
template <int kPer>
__global__ void chunk_partials_finalize_kernel(double* __restrict__ out, const double* __restrict__ partial,
                                               const AdamWTensor* __restrict__ tensors, int num_tensors) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tensors) return;
  const AdamWTensor tensor = tensors[t];
  const std::int64_t first = first_slot(tensor, t), chunks = chunk_count(tensor.numel);
  double total[kPer] = {};
  for (std::int64_t c = 0; c < chunks; ++c) {
    for (int j = 0; j < kPer; ++j) total[j] += partial[kPer * (first + c) + j];
  }
  for (int j = 0; j < kPer; ++j) out[kPer * t + j] = total[j];
}

// One buffer: block b sums chunk b; then one thread adds the partials in order.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    buffer_chunk_squares_kernel(double* __restrict__ partial, const T* __restrict__ x, std::int64_t n) {
  const std::int64_t begin = std::int64_t(blockIdx.x) * kNormChunk;
  const std::int64_t end = begin + kNormChunk < n ? begin + kNormChunk : n;
  const double s = block_sum_squares(x, begin, end);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

template <int kUnused = 0>
__global__ void sum_partials_kernel(double* __restrict__ out, const double* __restrict__ partial, std::int64_t count) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double total = 0.0;
  for (std::int64_t c = 0; c < count; ++c) total += partial[c];
  *out = total;
}

// The step's verdict from the loss and the per-tensor Σ g² (step_verdict.hpp), by one thread.
template <int kUnused = 0>
__global__ void judge_step_kernel(StepVerdict* __restrict__ verdict, const double* __restrict__ loss,
                                  const double* __restrict__ squares, int num_tensors, double max_norm,
                                  std::int64_t step) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  judge_step(*verdict, *loss, squares, num_tensors, max_norm, step);
}

// ---- cast ----------------------------------------------------------------------

inline constexpr int kCastThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kCastThreads) cast_copy_kernel(T* __restrict__ out, const float* __restrict__ in,
                                                                 std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = from_float<T>(in[i]);
  }
}

// ---- AdamW's launch -------------------------------------------------------------

inline AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, std::int64_t step,
                                  double grad_scale) {
  AdamWScalars s;
  s.lr = float(lr);
  s.beta1 = float(beta1);
  s.beta2 = float(beta2);
  s.one_minus_beta1 = float(1.0 - beta1);
  s.one_minus_beta2 = float(1.0 - beta2);
  s.bias1 = float(1.0 - std::pow(beta1, double(step)));
  s.bias2 = float(1.0 - std::pow(beta2, double(step)));
  s.eps = float(eps);
  s.grad_scale = float(grad_scale);
  return s;
}

template <typename T>
void launch_adamw(float* master, T* working, float* m, float* v, const float* grad, const AdamWTensor* tensors_device,
                  int num_tensors, std::int64_t total, const AdamWScalars& s, const StepVerdict* verdict) {
  if (total <= 0 || num_tensors <= 0) return;
  const std::int64_t blocks = (total + kAdamWChunk - 1) / kAdamWChunk;
  launch(adamw_kernel<T>, unsigned(blocks), kAdamWThreads, 0, master, working, m, v, grad, tensors_device,
         num_tensors, total, s, verdict);
}

}  // namespace detail

// One AdamW step over every tensor of the flat parameter array, one launch.
// master/m/v/grad: fp32, `total` elements; working: the T copy to refresh with
// the rounded new master, or nullptr when there is none (T = float with the
// master used directly). tensors_device: num_tensors rows in device memory
// (see the layout contract above). lr is the schedule's η (each tensor
// multiplies it by its lr_mult); step counts from 1; grad_scale is the clip
// multiplier. Stream 0, asynchronous.
//
// Launch: ⌈total / 2048⌉ blocks of 256 threads, 8 elements per thread.
template <typename T>
void adamw_step_all(float* master, T* working, float* m, float* v, const float* grad,
                    const AdamWTensor* tensors_device, int num_tensors, std::int64_t total, double lr, double beta1,
                    double beta2, double eps, std::int64_t step, double grad_scale) {
  detail::launch_adamw(master, working, m, v, grad, tensors_device, num_tensors, total,
                       detail::adamw_scalars(lr, beta1, beta2, eps, step, grad_scale), nullptr);
}

// The same step, its gradient multiplier and go-ahead read on the device from a verdict that
// judge_step_on_device wrote earlier on stream 0: the host never reads the norm. After a stopped
// verdict it changes nothing.
template <typename T>
void adamw_step_judged(float* master, T* working, float* m, float* v, const float* grad,
                       const AdamWTensor* tensors_device, int num_tensors, std::int64_t total, double lr, double beta1,
                       double beta2, double eps, std::int64_t step, const StepVerdict* verdict_device) {
  detail::launch_adamw(master, working, m, v, grad, tensors_device, num_tensors, total,
                       detail::adamw_scalars(lr, beta1, beta2, eps, step, 1.0), verdict_device);
}

// *verdict_device = judge_step(*verdict_device, *loss_device, squares_device[0, num_tensors), ...):
// the global norm, clip multiplier and stop of step_verdict.hpp, on the device. Stream 0,
// asynchronous. Launch: one thread.
inline void judge_step_on_device(StepVerdict* verdict_device, const double* loss_device, const double* squares_device,
                                 int num_tensors, double max_norm, std::int64_t step) {
  launch(detail::judge_step_kernel<>, 1, 1, 0, verdict_device, loss_device, squares_device, num_tensors, max_norm,
         step);
}

// Doubles of scratch that sum_squares_per_tensor needs (one per chunk slot),
// and that sum_squares needs for a buffer of `total` elements (num_tensors = 1).
inline std::size_t sum_squares_scratch_doubles(std::int64_t total, int num_tensors) {
  const std::int64_t t = total > 0 ? total : 0;
  return std::size_t(t / detail::kNormChunk) + std::size_t(num_tensors > 0 ? num_tensors : 0) + 1;
}

// out_device[t] = Σ x² over tensor t, in double, deterministic (see the top
// comment). scratch: sum_squares_scratch_doubles(total, num_tensors) doubles.
// Stream 0, asynchronous.
//
// Launch: ⌊total / 65536⌋ + num_tensors blocks of 256 threads (one per chunk
// slot, unused slots exit at once), then ⌈num_tensors / 128⌉ blocks of 128.
inline void sum_squares_per_tensor(double* out_device, double* scratch, const float* x,
                                   const AdamWTensor* tensors_device, int num_tensors, std::int64_t total) {
  if (num_tensors <= 0) return;
  const std::int64_t slots = (total > 0 ? total : 0) / detail::kNormChunk + num_tensors;
  launch(detail::tensor_chunk_squares_kernel<float>, unsigned(slots), detail::kNormThreads, 0, scratch, x,
         tensors_device, num_tensors);
  const int blocks = (num_tensors + detail::kFinalizeThreads - 1) / detail::kFinalizeThreads;
  launch(detail::chunk_partials_finalize_kernel<1>, blocks, detail::kFinalizeThreads, 0, out_device, scratch,
         tensors_device, num_tensors);
}

// Σ x² of one device buffer in double, same chunking and determinism; returns
// the value (synchronizes). scratch: sum_squares_scratch_doubles(n, 1) doubles.
//
// Launch: ⌈n / 65536⌉ blocks of 256 threads, then one thread.
template <typename T>
double sum_squares(const T* x, std::int64_t n, double* scratch) {
  if (n <= 0) return 0.0;
  const std::int64_t chunks = (n + detail::kNormChunk - 1) / detail::kNormChunk;
  launch(detail::buffer_chunk_squares_kernel<T>, unsigned(chunks), detail::kNormThreads, 0, scratch, x, n);
  launch(detail::sum_partials_kernel<>, 1, 1, 0, scratch + chunks, scratch, chunks);
  double total = 0.0;
  gc::rt::cuda::copy_to_host(&total, scratch + chunks, sizeof(double));
  return total;
}

// out[i] = in[i] rounded to T (round to nearest even). Stream 0, asynchronous.
// Launch: grid-stride, blocks_for(n, 256) blocks of 256 threads.
template <typename T>
void cast_copy(T* out, const float* in, std::int64_t n) {
  if (n <= 0) return;
  launch(detail::cast_copy_kernel<T>, blocks_for(n, detail::kCastThreads), detail::kCastThreads, 0, out, in, n);
}

}  // namespace gc::tree::cuda
