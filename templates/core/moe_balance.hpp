// The MoE routing bookkeeping both backends run where the routing lives (the CPU's memory, or
// the GPU's, in one device thread: cuda/moe_stats.cuh), so that no step copies routing state to
// the host (issue 39). E and G·E entries: small next to the step's GEMMs. The formulas are
// cpu/moe.hpp's header comment:
//   selected_e  = rows of expert e + the assignments to e that moe.capacity_factor dropped
//   L_aux       = coef · E · Σ_e f_e · P_e,            f_e = selected_e / (N·k)
//   L_seq       = coef_s · (1/G) Σ_g E · Σ_e f_ge · P_ge, f_ge = counts_ge / (T·k)
//   dL/dp_t[e]  = coef · E · f_e / N  +  coef_s · E · f_ge / (G·T)     (t in sequence g)
//   aux_free    b_e += rate · sign(mean load − load_e) after each step (DeepSeek-V3)
// A tally holds E loads and, at index E, the dropped assignments; loads are exact integers in
// double (below 2^53), so the data-parallel sum can use the collectives' fp64 sum.
#pragma once

#include <stdint.h>

#include "core/host_device.hpp"

namespace gc::tree::core {

// One MoE layer's micro-batch: N rows of k assignments in G sequences of T rows, and the
// balancing losses' coefficients (0: off).
struct MoeBalance {
  int experts = 1, top_k = 1;
  int64_t rows = 0, seq_len = 1;
  double aux_coef = 0.0;  // moe.load_balance = "aux_loss" (moe.load_balance_coef)
  double seq_coef = 0.0;  // moe.seq_aux_loss
  GC_HD int64_t sequences() const { return rows / seq_len; }
  // The rows dL/dp_t is constant over: every row, or one sequence with the sequence loss on.
  GC_HD int64_t gradient_group_rows() const { return seq_coef > 0.0 ? seq_len : rows; }
};

// After the dispatch: selected[e] (this forward's) from the offsets and, with a capacity,
// dropped[g·E + e]; both join the step's tally.
GC_HD inline void count_selected(const MoeBalance& b, const int64_t* offsets, const int64_t* dropped, double* selected,
                                 double* step_tally) {
  const int64_t groups = b.sequences();
  for (int e = 0; e < b.experts; ++e) {
    int64_t lost = 0;
    if (dropped != nullptr) {
      for (int64_t g = 0; g < groups; ++g) lost += dropped[g * b.experts + e];
    }
    const double n = double(offsets[e + 1] - offsets[e] + lost);
    selected[e] = n;
    step_tally[e] += n;
    step_tally[b.experts] += double(lost);
  }
}

// Adds L_seq, then L_aux, of this forward to *aux (the layer's slot, which holds its z-loss):
// mean_prob has E entries (P_e), seq_counts and seq_mean_prob G·E (read when seq_coef > 0).
GC_HD inline void add_balance_loss(const MoeBalance& b, const double* selected, const double* mean_prob,
                                   const int64_t* seq_counts, const double* seq_mean_prob, double* aux) {
  const double E = double(b.experts);
  if (b.seq_coef > 0.0) {
    const int64_t groups = b.sequences();
    const double per_sequence = double(b.seq_len) * b.top_k;
    double total = 0.0;
    for (int64_t g = 0; g < groups; ++g) {
      double sum = 0.0;
      for (int e = 0; e < b.experts; ++e) {
        const int64_t i = g * b.experts + e;
        sum += double(seq_counts[i]) / per_sequence * seq_mean_prob[i];
      }
      total += E * sum;
    }
    *aux += b.seq_coef * (total / double(groups));
  }
  if (b.aux_coef > 0.0) {
    const double A = double(b.rows) * b.top_k;
    double sum = 0.0;
    for (int e = 0; e < b.experts; ++e) sum += selected[e] / A * mean_prob[e];
    *aux += b.aux_coef * E * sum;
  }
}

// dL/dp_t[e] · loss_scale per gradient group (b.gradient_group_rows()): aux_grad[g·E + e].
GC_HD inline void balance_gradient(const MoeBalance& b, const double* selected, const int64_t* seq_counts,
                                   double loss_scale, double* aux_grad) {
  const double E = double(b.experts), A = double(b.rows) * b.top_k;
  const int64_t groups = b.rows / b.gradient_group_rows();
  for (int64_t g = 0; g < groups; ++g) {
    for (int e = 0; e < b.experts; ++e) {
      double a = 0.0;
      if (b.aux_coef > 0.0) a = loss_scale * b.aux_coef * E * (selected[e] / A) / double(b.rows);
      if (b.seq_coef > 0.0) {
        const double f = double(seq_counts[g * b.experts + e]) / (double(b.seq_len) * b.top_k);
        a += loss_scale * b.seq_coef * E * f / (double(groups) * double(b.seq_len));
      }
      aux_grad[g * b.experts + e] = a;
    }
  }
}

// After a step (its tally summed over the ranks): the tally joins the record window, and with
// bias non-null aux_free moves it by rate toward balance.
GC_HD inline void close_step(int experts, const double* step_tally, double* window_tally, float* bias, double rate) {
  double mean = 0.0;
  for (int e = 0; e < experts; ++e) mean += step_tally[e];
  mean /= double(experts);
  for (int e = 0; e <= experts; ++e) window_tally[e] += step_tally[e];
  if (bias == nullptr) return;
  for (int e = 0; e < experts; ++e) {
    const double c = step_tally[e];
    bias[e] += c < mean ? float(rate) : c > mean ? -float(rate) : 0.0f;
  }
}

}  // namespace gc::tree::core
