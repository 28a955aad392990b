// AdamW (Loshchilov & Hutter 2019) with decoupled weight decay as in seed 003 eq. 1:
//
//   g   = clip · grad
//   m   = β1 m + (1 − β1) g            m̂ = m / (1 − β1^t)
//   v   = β2 v + (1 − β2) g²           v̂ = v / (1 − β2^t)
//   θ  ← θ − η_t · m̂ / (sqrt(v̂) + ε) − η_t · λ · θ       (decay uses the pre-update θ)
//
// η_t is passed per call, already multiplied by the schedule and the class lr multiplier; λ is
// the tensor's decay (0 for no-decay groups); t counts steps from 1. This equals PyTorch's
// AdamW (θ ← θ(1 − ηλ), then the Adam step). Element updates are independent, so any thread
// count gives the same bits; arithmetic is in double, moments are stored as T.
//
// Gradient clipping: sum_of_squares sums in double over fixed-size chunks (per-chunk partials
// added serially in chunk order), so a tensor's Σ g² does not depend on the thread count; the
// global norm and the clip multiplier come from step_verdict.hpp's judge_step, which
// both engines share.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace gc::tree::cpu {

struct AdamWHyper {
  double lr;  // η_t
  double beta1;
  double beta2;
  double eps;
  double weight_decay;  // λ
  std::int64_t step;    // t ≥ 1
};

template <typename T>
void adamw_step(T* param, T* m, T* v, const T* grad, std::int64_t n, const AdamWHyper& hp, double grad_scale = 1.0) {
  const double bias1 = 1.0 - std::pow(hp.beta1, double(hp.step));
  const double bias2 = 1.0 - std::pow(hp.beta2, double(hp.step));
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    const double g = grad_scale * double(grad[i]);
    const double mi = hp.beta1 * double(m[i]) + (1.0 - hp.beta1) * g;
    const double vi = hp.beta2 * double(v[i]) + (1.0 - hp.beta2) * g * g;
    m[i] = T(mi);
    v[i] = T(vi);
    const double theta = double(param[i]);
    const double adam = (mi / bias1) / (std::sqrt(vi / bias2) + hp.eps);
    param[i] = T(theta - hp.lr * adam - hp.lr * hp.weight_decay * theta);
  }
}

inline constexpr std::int64_t kNormChunk = std::int64_t(1) << 16;

// Σ x² in double, deterministic: one partial per 65536 elements, added in
// chunk order. The partials live in a per-thread buffer that only grows (no
// allocation per call once the largest tensor has been seen).
template <typename T>
double sum_of_squares(const T* x, std::int64_t n) {
  const std::int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  thread_local std::vector<double> buffer;  // the calling thread's: the workers write through `partial`
  if (buffer.size() < std::size_t(chunks > 0 ? chunks : 0)) buffer.resize(std::size_t(chunks));
  double* const partial = buffer.data();
#pragma omp parallel for
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t end = (c + 1) * kNormChunk < n ? (c + 1) * kNormChunk : n;
    double s = 0.0;
    for (std::int64_t i = c * kNormChunk; i < end; ++i) {
      s += double(x[i]) * double(x[i]);
    }
    partial[c] = s;
  }
  double total = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    total += partial[c];
  }
  return total;
}

}  // namespace gc::tree::cpu
