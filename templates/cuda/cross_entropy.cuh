// Cross-entropy of the next-token targets on the GPU, the semantics of
// templates/cpu/cross_entropy.hpp, with the logit multiplier α (μP-style output scaling):
// z = α · logits,
//
//   ℓ_n   = lse(z_n) − z_n[y_n],      p_n(target) = exp(−ℓ_n)
//   L     = (1/S) Σ_n ℓ_n             (sum_losses gives Σ_n ℓ_n; the caller divides by S)
//   backward  dlogits_n = loss_scale · α · (softmax(z_n) − onehot(y_n)) / S
//
// A row whose target is negative (kIgnoreTarget) is skipped: ℓ_n = 0, p_n = 0, no gradient;
// S counts the scored rows (gc::rt::count_scored on the host targets).
//
// The logits stay T [N, V] (never copied to fp32). One block per row (block-stride over rows):
// thread t reads the packs p ≡ t (mod threads) of the row — kVec consecutive elements in one
// access of up to 16 bytes (8 bf16), the widest that divides V — and keeps an online (running
// max m, Σ exp(z − m)) over them, in fp32; the block then takes the max M of the m's and sums
// the shares rescaled to M. Every step has a fixed order, so the results repeat bitwise run to
// run (no atomics).
//
// Specialized: the vocabulary V and α are compile-time (LogitShape below, or a test's own shape
// S with kVocab and kScale), so each thread's strided walk over a row has a constant trip count
// and α is a literal.
#pragma once

#include <cstdint>

#include "common.cuh"
#include "gc/knob.hpp"

namespace gc::tree::cuda {

// ---- the output layer of this experiment (gcompile folds the spec's values in) ---------------
struct LogitShape {
  static constexpr int kVocab = gc::knob<int>("model.vocab_size", 256);
  static constexpr float kScale = gc::knob<float>("plan.logit_scale", 1.0f);  // α: z = α · logits
};

inline constexpr int kCrossEntropyThreads = 512;
inline constexpr int kSumLossesThreads = 1024;
inline constexpr std::int64_t kCrossEntropyMaxBlocks = 65535LL * 16;

// A logit row of shape S in packs: kVec elements per access, kPacks packs per row.
template <class S, typename T>
struct LogitPacks {
  static constexpr int kVec = row_pack<T>(S::kVocab);
  static constexpr int kPacks = S::kVocab / kVec;
};

// log Σ_v exp(α · row[v]) over the block; every thread gets the result. Must be called by all
// threads of the block (it synchronizes). Thread t reads exactly the packs p ≡ t (mod
// blockDim), the same ones it writes in the backward, so an in-place backward is safe.
template <class S, typename T>
__device__ inline float block_scaled_lse(const T* row, float* scratch_max, float* scratch_sum) {
  using P = LogitPacks<S, T>;
  float m = -INFINITY, s = 0.0f;  // s = Σ exp(z − m) over this thread's elements so far
  for (int p = threadIdx.x; p < P::kPacks; p += kCrossEntropyThreads) {
    float z[P::kVec];
    load_pack<P::kVec>(z, row + std::int64_t(p) * P::kVec);
#pragma unroll
    for (int e = 0; e < P::kVec; ++e) {
      const float zv = S::kScale * z[e];
      if (zv > m) {
        s = s * expf(m - zv) + 1.0f;  // rescale to the new max (first element: 0 · 0 + 1)
        m = zv;
      } else {
        s += expf(zv - m);
      }
    }
  }
  const float max_z = block_max(m, scratch_max);
  const float share = s > 0.0f ? s * expf(m - max_z) : 0.0f;  // a thread with no element has m = −inf
  return max_z + logf(block_sum(share, scratch_sum));
}

template <class S, typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_forward_kernel(float* losses, float* p_target, const T* logits, const std::int32_t* targets,
                                 std::int64_t N) {
  __shared__ float scratch_max[kWarp], scratch_sum[kWarp];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {  // block-uniform loop
    const T* row = logits + n * S::kVocab;
    if (targets[n] < 0) {  // not scored (block-uniform: no thread reaches the reductions)
      if (threadIdx.x == 0) {
        losses[n] = 0.0f;
        if (p_target != nullptr) p_target[n] = 0.0f;
      }
      continue;
    }
    const float lse = block_scaled_lse<S>(row, scratch_max, scratch_sum);
    if (threadIdx.x == 0) {
      const float loss = lse - S::kScale * to_float(row[targets[n]]);
      losses[n] = loss;
      if (p_target != nullptr) p_target[n] = expf(-loss);
    }
  }
}

template <class S, typename T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    cross_entropy_backward_kernel(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
                                  float coef) {
  __shared__ float scratch_max[kWarp], scratch_sum[kWarp];
  for (std::int64_t n = blockIdx.x; n < N; n += gridDim.x) {  // block-uniform loop
    const T* row = logits + n * S::kVocab;
    T* drow = dlogits + n * S::kVocab;
    using P = LogitPacks<S, T>;
    if (targets[n] < 0) {  // not scored: no gradient (block-uniform)
      float zero[P::kVec] = {};
      for (int p = threadIdx.x; p < P::kPacks; p += kCrossEntropyThreads) {
        store_pack<P::kVec>(drow + std::int64_t(p) * P::kVec, zero);
      }
      continue;
    }
    // The whole row is reduced before any element is written (and each thread rewrites only the
    // elements it read), so dlogits may alias logits.
    const float lse = block_scaled_lse<S>(row, scratch_max, scratch_sum);
    const int target = targets[n];
    for (int p = threadIdx.x; p < P::kPacks; p += kCrossEntropyThreads) {
      float z[P::kVec];
      load_pack<P::kVec>(z, row + std::int64_t(p) * P::kVec);
#pragma unroll
      for (int e = 0; e < P::kVec; ++e) {
        const float prob = expf(S::kScale * z[e] - lse);
        z[e] = coef * (prob - (p * P::kVec + e == target ? 1.0f : 0.0f));
      }
      store_pack<P::kVec>(drow + std::int64_t(p) * P::kVec, z);
    }
  }
}

inline unsigned cross_entropy_blocks(std::int64_t N) {
  return unsigned(N < kCrossEntropyMaxBlocks ? N : kCrossEntropyMaxBlocks);
}

// losses [N] (fp32) receive ℓ_n; p_target [N] (may be nullptr) receives exp(−ℓ_n).
// logits T [N, S::kVocab], targets [N] in [0, V) or negative (not scored).
template <class S, typename T>
void cross_entropy_forward(float* losses, float* p_target, const T* logits, const std::int32_t* targets,
                           std::int64_t N) {
  if (N <= 0) return;
  check_pack_aligned<LogitPacks<S, T>::kVec, T>("cross_entropy_forward", logits);
  launch(cross_entropy_forward_kernel<S, T>, cross_entropy_blocks(N), kCrossEntropyThreads, 0, losses, p_target,
         logits, targets, N);
}

// Σ_n losses[n] in double, by one block: thread t sums n = t, t+1024, … in order, then the
// fixed-order block sum. (Templated on the block size so the header defines no non-template kernel.)
// kAccumulate: *out += scale · Σ instead of *out = Σ.
template <int kThreads, bool kAccumulate>
__global__ void sum_losses_kernel(double* out, const float* losses, std::int64_t N, double scale) {
  __shared__ double scratch[kWarp];
  double acc = 0.0;
  for (std::int64_t n = threadIdx.x; n < N; n += kThreads) acc += double(losses[n]);
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    if constexpr (kAccumulate) {
      *out += scale * total;
    } else {
      *out = total;
    }
  }
}

// *out_device = Σ_n losses[n] (double, device memory; 0 when N = 0). Deterministic.
inline void sum_losses(double* out_device, const float* losses, std::int64_t N) {
  launch(sum_losses_kernel<kSumLossesThreads, false>, 1, kSumLossesThreads, 0, out_device, losses, N < 0 ? 0 : N, 1.0);
}

// *acc_device += scale · Σ_n losses[n], on the device (the step's loss without a host read).
inline void accumulate_losses(double* acc_device, const float* losses, std::int64_t N, double scale) {
  launch(sum_losses_kernel<kSumLossesThreads, true>, 1, kSumLossesThreads, 0, acc_device, losses, N < 0 ? 0 : N,
         scale);
}

// acc[0] += Σ α·x, acc[1] += Σ (α·x)² over x[0, n) (the logit_std metric over a chunk of N × V
// logits: a billion values at the 0.1B specs). Two passes, deterministic: block b sums the b-th
// of kMomentBlocks consecutive slices (its threads strided in order, then the fixed-order block
// sum) into partials[2b], partials[2b+1]; one block then adds the partials in order. (One block
// over the whole chunk took ~60 ms a batch on an H200.)
inline constexpr int kMomentBlocks = 256;  // compiler/plan/plan.cpp counts 2 · kMomentBlocks doubles
inline constexpr int kMomentThreads = 256;

template <typename T>
__global__ void slice_moments_kernel(double* partials, const T* x, std::int64_t n, double alpha) {
  __shared__ double scratch[kWarp];
  const std::int64_t per = (n + kMomentBlocks - 1) / kMomentBlocks;
  const std::int64_t lo = std::min(n, per * blockIdx.x), hi = std::min(n, lo + per);
  double s = 0.0, sq = 0.0;
  for (std::int64_t i = lo + threadIdx.x; i < hi; i += kMomentThreads) {
    const double v = alpha * double(to_float(x[i]));
    s += v;
    sq += v * v;
  }
  s = block_sum(s, scratch);
  sq = block_sum(sq, scratch);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = s;
    partials[2 * blockIdx.x + 1] = sq;
  }
}

template <typename = void>
__global__ void add_moment_partials_kernel(double* acc, const double* partials) {
  __shared__ double scratch[kWarp];
  const double s = block_sum(partials[2 * threadIdx.x], scratch);
  const double sq = block_sum(partials[2 * threadIdx.x + 1], scratch);
  if (threadIdx.x == 0) {
    acc[0] += s;
    acc[1] += sq;
  }
}

// partials: 2 · kMomentBlocks doubles of device scratch.
template <typename T>
void accumulate_moments(double* acc_device, double* partials, const T* x, std::int64_t n, double alpha) {
  launch(slice_moments_kernel<T>, unsigned(kMomentBlocks), kMomentThreads, 0, partials, x, n < 0 ? 0 : n, alpha);
  launch(add_moment_partials_kernel<>, 1u, kMomentBlocks, 0, acc_device, partials);
}

// dlogits T [N, S::kVocab] = loss_scale · α · (softmax(α · logits) − onehot(targets)) / S, overwritten
// (S = scored rows; zero rows where the target is negative); loss_scale is the upstream
// gradient of the mean loss L (e.g. 1 / grad_accum_steps). dlogits may alias logits (in place).
template <class S, typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N,
                            float loss_scale, std::int64_t scored) {
  if (N <= 0) return;
  check_pack_aligned<LogitPacks<S, T>::kVec, T>("cross_entropy_backward", dlogits, logits);
  const float coef = scored > 0 ? float(double(loss_scale) * double(S::kScale) / double(scored)) : 0.0f;
  launch(cross_entropy_backward_kernel<S, T>, cross_entropy_blocks(N), kCrossEntropyThreads, 0, dlogits, logits,
         targets, N, coef);
}

}  // namespace gc::tree::cuda
