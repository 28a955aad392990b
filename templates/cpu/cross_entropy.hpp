// Mean cross-entropy of the next-token targets, with an optional logit multiplier α
// (μP-style output scaling): z = α · logits.
//
//   ℓ_n   = lse(z_n) − z_n[y_n],   lse computed max-subtracted with a double accumulator
//   L     = (1/S) Σ_n ℓ_n,         p_n(target) = exp(−ℓ_n)
//   backward  dlogits_n = dL · α · (softmax(z_n) − onehot(y_n)) / S
//
// A row whose target is negative (kIgnoreTarget: the anchor task scores the last position
// only) is skipped: ℓ_n = 0, p_n = 0, no gradient. S counts the scored rows (count_scored).
//
// Per-token losses and p(target) are kept for the token-level analyses of seed 000 §2.5
// (Δp between checkpoints, difficulty deciles). The mean is summed serially over the stored
// per-token losses, so it does not depend on the thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "common.hpp"
#include "exp.hpp"
#include "runtime/token_shard.hpp"

namespace gc::tree::cpu {

namespace detail {

// log Σ_v exp(α · row[v]) in double. The max and the sum run in kLanes interleaved lanes (lane c
// takes v ≡ c mod kLanes; the lanes' loops vectorize), combined in lane order at the end: a fixed
// order, so the result depends on the row alone.
inline constexpr int kLanes = 16;

template <typename T>
double scaled_log_sum_exp(const T* row, int V, double alpha) {
  double lane[kLanes];
  for (int c = 0; c < kLanes; ++c) lane[c] = -std::numeric_limits<double>::infinity();
  int v = 0;
  for (; v + kLanes <= V; v += kLanes) {
    for (int c = 0; c < kLanes; ++c) {
      const double z = alpha * double(row[v + c]);
      lane[c] = z > lane[c] ? z : lane[c];
    }
  }
  double max_z = -std::numeric_limits<double>::infinity();
  for (int c = 0; c < kLanes; ++c) max_z = lane[c] > max_z ? lane[c] : max_z;
  for (int u = v; u < V; ++u) max_z = alpha * double(row[u]) > max_z ? alpha * double(row[u]) : max_z;
  for (int c = 0; c < kLanes; ++c) lane[c] = 0.0;
  for (v = 0; v + kLanes <= V; v += kLanes) {
    for (int c = 0; c < kLanes; ++c) lane[c] += exp_fixed(alpha * double(row[v + c]) - max_z);
  }
  double sum = 0.0;
  for (int c = 0; c < kLanes; ++c) sum += lane[c];
  for (; v < V; ++v) sum += exp_fixed(alpha * double(row[v]) - max_z);
  return max_z + std::log(sum);
}

}  // namespace detail

// losses[N] receives ℓ_n; p_target[N] (may be nullptr) receives exp(−ℓ_n); lse[N] (may be
// nullptr) the rows' log-sum-exp, for a backward over the same logits.
template <typename T>
void cross_entropy_rows(T* losses, non_deduced_t<T>* p_target, const T* logits, const std::int32_t* targets,
                        std::int64_t N, int V, double logit_scale = 1.0, double* lse = nullptr) {
#pragma omp parallel for
  for (std::int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    const bool scored = targets[n] >= 0;
    const double row_lse = scored ? detail::scaled_log_sum_exp(row, V, logit_scale) : 0.0;
    const double loss = scored ? row_lse - logit_scale * double(row[targets[n]]) : 0.0;
    losses[n] = T(loss);
    if (lse != nullptr) lse[n] = row_lse;
    if (p_target != nullptr) {
      p_target[n] = T(scored ? exp_fixed(-loss) : 0.0);
    }
  }
}

// L = Σ_n losses[n] / scored (0 when nothing is scored); summed serially in double.
template <typename T>
double mean_scored_loss(const T* losses, std::int64_t N, std::int64_t scored) {
  double total = 0.0;
  for (std::int64_t n = 0; n < N; ++n) {
    total += double(losses[n]);
  }
  return scored > 0 ? total / double(scored) : 0.0;
}

// cross_entropy_rows, then L over these N rows. Returns L.
template <typename T>
double cross_entropy_forward(T* losses, non_deduced_t<T>* p_target, const T* logits, const std::int32_t* targets,
                             std::int64_t N, int V, double logit_scale = 1.0) {
  cross_entropy_rows(losses, p_target, logits, targets, N, V, logit_scale);
  return mean_scored_loss(losses, N, gc::rt::count_scored(targets, N));
}

// dlogits is overwritten and may alias logits (each row is reduced before it is written).
// dloss is the upstream gradient of L (e.g. 1 / grad_accum_steps). `scored` is S, the scored rows
// of the whole batch when these N rows are a chunk of it (negative: count these rows). lse (may
// be nullptr: recomputed) is what cross_entropy_rows gave for these logits.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const std::int32_t* targets, std::int64_t N, int V,
                            double logit_scale = 1.0, double dloss = 1.0, std::int64_t scored = -1,
                            const double* lse = nullptr) {
  if (scored < 0) scored = gc::rt::count_scored(targets, N);
  const double coef = scored > 0 ? dloss * logit_scale / double(scored) : 0.0;
#pragma omp parallel for
  for (std::int64_t n = 0; n < N; ++n) {
    const T* row = logits + n * V;
    T* drow = dlogits + n * V;
    const int target = targets[n];
    if (target < 0) {
      for (int v = 0; v < V; ++v) {
        drow[v] = T(0);
      }
      continue;
    }
    const double row_lse = lse != nullptr ? lse[n] : detail::scaled_log_sum_exp(row, V, logit_scale);
    for (int v = 0; v < V; ++v) {
      const double p = exp_fixed(logit_scale * double(row[v]) - row_lse);
      drow[v] = T(coef * (p - (v == target ? 1.0 : 0.0)));
    }
  }
}

}  // namespace gc::tree::cpu
