// The MoE routing bookkeeping on the GPU (core/moe_balance.hpp, the functions the CPU backend
// calls): one device thread runs each, since they touch E or G·E values (moe_3b: 145 experts,
// 2 sequences), so the step never copies routing state to the host and the sums keep the CPU's
// order. Launched on the compute stream after the kernels that write their inputs.
#pragma once

#include <cstdint>

#include "core/moe_balance.hpp"
#include "cuda/common.cuh"

namespace gc::tree::cuda {

template <int = 0>
__global__ void moe_record_routing_kernel(core::MoeBalance b, const std::int64_t* offsets, const std::int64_t* dropped,
                                          double* selected, double* step_tally, const double* mean_prob,
                                          const std::int64_t* seq_counts, const double* seq_mean_prob, double* aux) {
  core::count_selected(b, offsets, dropped, selected, step_tally);
  core::add_balance_loss(b, selected, mean_prob, seq_counts, seq_mean_prob, aux);
}

template <int = 0>
__global__ void moe_balance_gradient_kernel(core::MoeBalance b, const double* selected, const std::int64_t* seq_counts,
                                            double loss_scale, double* aux_grad) {
  core::balance_gradient(b, selected, seq_counts, loss_scale, aux_grad);
}

template <int = 0>
__global__ void moe_close_step_kernel(int experts, double* step_tally, double* window_tally, float* bias, double rate) {
  core::close_step(experts, step_tally, window_tally, bias, rate);
}

// *acc += weight · Σ_i values[i], i ascending (a training forward's balancing losses, layer by
// layer, into the step's accumulator).
template <int = 0>
__global__ void add_weighted_sum_kernel(double* acc, const double* values, int n, double weight) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += values[i];
  *acc += weight * sum;
}

// ---- launchers (device pointers) ------------------------------------------------------------

// After the dispatch: selected and the step's tally from the offsets (and the dropped), then the
// balancing losses added to *aux.
inline void moe_record_routing(const core::MoeBalance& b, const std::int64_t* offsets, const std::int64_t* dropped,
                               double* selected, double* step_tally, const double* mean_prob,
                               const std::int64_t* seq_counts, const double* seq_mean_prob, double* aux) {
  launch(moe_record_routing_kernel<>, 1u, 1u, 0, b, offsets, dropped, selected, step_tally, mean_prob, seq_counts,
         seq_mean_prob, aux);
}

inline void moe_balance_gradient(const core::MoeBalance& b, const double* selected, const std::int64_t* seq_counts,
                                 double loss_scale, double* aux_grad) {
  launch(moe_balance_gradient_kernel<>, 1u, 1u, 0, b, selected, seq_counts, loss_scale, aux_grad);
}

inline void moe_close_step(int experts, double* step_tally, double* window_tally, float* bias, double rate) {
  launch(moe_close_step_kernel<>, 1u, 1u, 0, experts, step_tally, window_tally, bias, rate);
}

inline void add_weighted_sum(double* acc, const double* values, int n, double weight) {
  launch(add_weighted_sum_kernel<>, 1u, 1u, 0, acc, values, n, weight);
}

}  // namespace gc::tree::cuda
