// Mixture-of-experts routing on the CPU: router scores, top-k selection, the
// deterministic dispatch (a stable counting sort by expert), the weighted
// combine, and their backward. The experts themselves are GEMMs over each
// expert's rows (cpu/backend.hpp grouped_linear_*).
//
// Per token t with router logits r_t (E entries):
//   scores      s_t = softmax(r_t)  or  sigmoid(r_t)        (moe.router_scoring)
//   selection   the k largest s_t[e] + bias[e]; ties go to the lower index.
//               The bias (aux_free balancing, DeepSeek-V3) only selects.
//   weights     w_tj = s_t[e_j], divided by Σ_j s_t[e_j] when norm_topk_prob
//   output      y_t = Σ_j w_tj · Expert_{e_j}(x_t)            (j in rank order)
// Balancing loss (Switch / Megatron form, moe.load_balance = "aux_loss"):
//   L_aux = coef · E · Σ_e f_e · P_e,  f_e = (assignments to e)/(N·k),
//   P_e = mean_t p_t[e], p_t = s_t (softmax) or s_t/Σ_e s_t[e] (sigmoid);
//   exactly coef when the load is uniform. f is a count (no gradient).
// Sequence-wise balancing loss (DeepSeek-V3, arXiv 2412.19437 eqs. 17-20; moe.seq_aux_loss):
//   the same form with f and P over each sequence's T tokens (a group of rows),
//   averaged over the sequences: L_seq = coef_s · (1/G) Σ_g E · Σ_e f_ge · P_ge.
// Router z-loss (ST-MoE, arXiv 2202.08906 eq. 5; moe.z_loss, softmax routers):
//   L_z = coef_z · mean_t (lse_t)², lse_t = log Σ_e exp r_t[e];
//   dL_z/dr_t[e] = coef_z · 2 · lse_t · softmax(r_t)[e] / N.
// Capacity (moe.capacity_factor > 0, GShard/Switch): within each sequence, expert e keeps its
//   first C assignments in assignment order (token, then rank) and drops the rest: a dropped
//   assignment adds nothing to its token's output (the other weights are not renormalized) and
//   has no expert row; the selection (and so the balancing losses' f) still counts it.
// Assignment a = t·k + j (token t, rank j); its row in expert order is
// position[a] (-1: dropped); order[p] is the assignment at row p.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common.hpp"

namespace gc::tree::cpu {

struct MoeShape {
  int experts;
  int top_k;
  bool sigmoid;    // scoring: sigmoid (else softmax)
  bool norm_topk;  // renormalize the selected weights
};

namespace detail {

// Whether (v, e) ranks after (v_prev, e_prev): lower value, or equal value and higher index.
inline bool ranks_after(double v, int e, double v_prev, int e_prev) { return v < v_prev || (v == v_prev && e > e_prev); }

}  // namespace detail

// scores [N, E], expert and weight [N, k]. bias: E entries or nullptr.
template <typename T>
void moe_route_forward(T* scores, std::int32_t* expert, T* weight, const T* logits, const float* bias, std::int64_t N,
                       const MoeShape& m) {
  const int E = m.experts, k = m.top_k;
#pragma omp parallel for
  for (std::int64_t t = 0; t < N; ++t) {
    const T* r = logits + t * E;
    T* s = scores + t * E;
    if (m.sigmoid) {
      for (int e = 0; e < E; ++e) {
        s[e] = T(1.0 / (1.0 + std::exp(-double(r[e]))));
      }
    } else {
      double max_r = double(r[0]);
      for (int e = 1; e < E; ++e) {
        max_r = double(r[e]) > max_r ? double(r[e]) : max_r;
      }
      double sum = 0.0;
      for (int e = 0; e < E; ++e) {
        sum += std::exp(double(r[e]) - max_r);
      }
      for (int e = 0; e < E; ++e) {
        s[e] = T(std::exp(double(r[e]) - max_r) / sum);
      }
    }
    // Rank j: the best (value, index) that ranks after rank j-1's.
    double prev_v = INFINITY;
    int prev_e = -1;
    double selected = 0.0;
    for (int j = 0; j < k; ++j) {
      int best = -1;
      double best_v = 0.0;
      for (int e = 0; e < E; ++e) {
        const double v = double(s[e]) + (bias ? double(bias[e]) : 0.0);
        if (!detail::ranks_after(v, e, prev_v, prev_e)) continue;
        if (best < 0 || v > best_v) {
          best = e;
          best_v = v;
        }
      }
      expert[t * k + j] = best;
      weight[t * k + j] = s[best];
      selected += double(s[best]);
      prev_v = best_v;
      prev_e = best;
    }
    if (m.norm_topk) {
      for (int j = 0; j < k; ++j) {
        weight[t * k + j] = T(double(weight[t * k + j]) / selected);
      }
    }
  }
}

// Capacity: kept[a] = expert[a] for the first `capacity` assignments of each expert within each
// sequence of seq_len rows (in assignment order), else -1 (dropped); dropped[g·E + e] counts
// sequence g's dropped assignments to e.
inline void moe_apply_capacity(std::int32_t* kept, std::int64_t* dropped, const std::int32_t* expert, std::int64_t N,
                               std::int64_t seq_len, int experts, int top_k, int capacity) {
  const std::int64_t groups = N / seq_len;
  std::vector<std::int64_t> taken(std::size_t(experts), 0);
  for (std::int64_t g = 0; g < groups; ++g) {
    std::fill(taken.begin(), taken.end(), 0);
    std::int64_t* lost = dropped + g * experts;
    std::fill(lost, lost + experts, 0);
    for (std::int64_t a = g * seq_len * top_k; a < (g + 1) * seq_len * top_k; ++a) {
      const int e = expert[a];
      const bool keep = taken[std::size_t(e)] < capacity;
      kept[a] = keep ? e : -1;
      ++(keep ? taken[std::size_t(e)] : lost[e]);
    }
  }
}

// Stable counting sort of the N·k assignments by expert: expert e's rows are
// offsets[e] .. offsets[e+1] (offsets has E+1 entries), in token order. A dropped assignment
// (expert -1) gets no row: position -1.
inline void moe_dispatch(std::int32_t* order, std::int32_t* position, std::int64_t* offsets, const std::int32_t* expert,
                         std::int64_t N, int experts, int top_k) {
  const std::int64_t A = N * top_k;
  for (int e = 0; e <= experts; ++e) {
    offsets[e] = 0;
  }
  for (std::int64_t a = 0; a < A; ++a) {
    if (expert[a] >= 0) ++offsets[expert[a] + 1];
  }
  for (int e = 0; e < experts; ++e) {
    offsets[e + 1] += offsets[e];
  }
  // Fill each expert's rows in assignment order (offsets[e] advances; restored below).
  for (std::int64_t a = 0; a < A; ++a) {
    if (expert[a] < 0) {
      position[a] = -1;
      continue;
    }
    const std::int64_t p = offsets[expert[a]]++;
    order[p] = std::int32_t(a);
    position[a] = std::int32_t(p);
  }
  for (int e = experts; e > 0; --e) {
    offsets[e] = offsets[e - 1];
  }
  offsets[0] = 0;
}

// xs[p] = x[token of order[p]]: each expert's input rows, contiguous.
template <typename T>
void moe_gather(T* xs, const T* x, const std::int32_t* order, std::int64_t rows, int dim, int top_k) {
#pragma omp parallel for
  for (std::int64_t p = 0; p < rows; ++p) {
    const T* src = x + std::int64_t(order[p] / top_k) * dim;
    T* dst = xs + p * dim;
    for (int c = 0; c < dim; ++c) {
      dst[c] = src[c];
    }
  }
}

// out[t] (+)= Σ_j w_tj · ys[position[t·k+j]], j ascending (dropped ranks add nothing).
template <typename T>
void moe_combine(T* out, const T* ys, const T* weight, const std::int32_t* position, std::int64_t N, int dim, int top_k,
                 bool accumulate) {
#pragma omp parallel for
  for (std::int64_t t = 0; t < N; ++t) {
    T* o = out + t * dim;
    if (!accumulate) {
      for (int c = 0; c < dim; ++c) {
        o[c] = T(0);
      }
    }
    for (int j = 0; j < top_k; ++j) {
      if (position[t * top_k + j] < 0) continue;
      const T w = weight[t * top_k + j];
      const T* y = ys + std::int64_t(position[t * top_k + j]) * dim;
      for (int c = 0; c < dim; ++c) {
        o[c] += w * y[c];
      }
    }
  }
}

// dys[p] = w_a · dout[t] and dweight[a] = dout[t] · ys[p], for a = order[p] over the rows
// kept; a dropped assignment's dweight is 0 (when rows < assignments).
template <typename T>
void moe_combine_backward(T* dys, T* dweight, const T* dout, const T* ys, const T* weight, const std::int32_t* order,
                          std::int64_t rows, std::int64_t assignments, int dim, int top_k) {
  if (rows < assignments) {
    for (std::int64_t a = 0; a < assignments; ++a) {
      dweight[a] = T(0);
    }
  }
#pragma omp parallel for
  for (std::int64_t p = 0; p < rows; ++p) {
    const std::int32_t a = order[p];
    const T* g = dout + std::int64_t(a / top_k) * dim;
    const T* y = ys + p * dim;
    T* dy = dys + p * dim;
    double dot = 0.0;
    for (int c = 0; c < dim; ++c) {
      dy[c] = weight[a] * g[c];
      dot += double(g[c]) * double(y[c]);
    }
    dweight[a] = T(dot);
  }
}

// dx[t] += Σ_j dxs[position[t·k+j]], j ascending (dropped ranks add nothing).
template <typename T>
void moe_scatter_add(T* dx, const T* dxs, const std::int32_t* position, std::int64_t N, int dim, int top_k) {
#pragma omp parallel for
  for (std::int64_t t = 0; t < N; ++t) {
    T* d = dx + t * dim;
    for (int j = 0; j < top_k; ++j) {
      if (position[t * top_k + j] < 0) continue;
      const T* src = dxs + std::int64_t(position[t * top_k + j]) * dim;
      for (int c = 0; c < dim; ++c) {
        d[c] += src[c];
      }
    }
  }
}

// P_ge = mean over group g's rows of p_t[e] (the balancing losses' router probability),
// summed in token order; groups of group_rows rows (N a multiple of it): one group of N rows
// for aux_loss, one per sequence for seq_aux_loss. mean_prob has (N / group_rows) · E entries.
template <typename T>
void moe_mean_probs(double* mean_prob, const T* scores, std::int64_t N, std::int64_t group_rows, const MoeShape& m) {
  const int E = m.experts;
  double* const row_total = thread_scratch<1>(std::size_t(N));  // Σ_e s_t[e] (sigmoid scores)
  if (m.sigmoid) {
#pragma omp parallel for
    for (std::int64_t t = 0; t < N; ++t) {
      double total = 0.0;
      for (int e = 0; e < E; ++e) {
        total += double(scores[t * E + e]);
      }
      row_total[t] = total;
    }
  }
  const std::int64_t groups = N / group_rows;
#pragma omp parallel for
  for (std::int64_t ge = 0; ge < groups * E; ++ge) {
    const std::int64_t g = ge / E;
    const int e = int(ge % E);
    double sum = 0.0;
    for (std::int64_t t = g * group_rows; t < (g + 1) * group_rows; ++t) {
      sum += m.sigmoid ? double(scores[t * E + e]) / row_total[t] : double(scores[t * E + e]);
    }
    mean_prob[ge] = sum / double(group_rows);
  }
}

// counts[g·E + e] = the assignments of group g's rows to expert e (groups of group_rows rows).
inline void moe_group_counts(std::int64_t* counts, const std::int32_t* expert, std::int64_t N, std::int64_t group_rows,
                             int experts, int top_k) {
  const std::int64_t groups = N / group_rows;
  for (std::int64_t i = 0; i < groups * experts; ++i) {
    counts[i] = 0;
  }
  for (std::int64_t a = 0; a < N * top_k; ++a) {
    ++counts[(a / top_k) / group_rows * experts + expert[a]];
  }
}

// lse_t = log Σ_e exp r_t[e] for every row; returns Σ_t lse_t² (summed in row order).
template <typename T>
double moe_router_lse(T* lse, const T* logits, std::int64_t N, int experts) {
#pragma omp parallel for
  for (std::int64_t t = 0; t < N; ++t) {
    const T* r = logits + t * experts;
    double max_r = double(r[0]);
    for (int e = 1; e < experts; ++e) {
      max_r = double(r[e]) > max_r ? double(r[e]) : max_r;
    }
    double sum = 0.0;
    for (int e = 0; e < experts; ++e) {
      sum += std::exp(double(r[e]) - max_r);
    }
    lse[t] = T(max_r + std::log(sum));
  }
  double total = 0.0;
  for (std::int64_t t = 0; t < N; ++t) {
    total += double(lse[t]) * double(lse[t]);
  }
  return total;
}

// dlogits [N, E] from dweight [N, k], the balancing losses' dL/dp_t[e] =
// aux_grad[(t / aux_group_rows)·E + e] (the same for every row of a group; nullptr: no
// balancing loss), and the z-loss's z_scale · lse_t · softmax(r_t)[e] (lse nullptr: none;
// softmax scores only, where s_t = softmax(r_t)).
template <typename T>
void moe_route_backward(T* dlogits, const T* dweight, const T* scores, const std::int32_t* expert, const T* weight,
                        const double* aux_grad, std::int64_t aux_group_rows, const T* lse, double z_scale,
                        std::int64_t N, const MoeShape& m) {
  const int E = m.experts, k = m.top_k;
#pragma omp parallel
  {
    double* ds = thread_scratch<0>(std::size_t(E));  // dL/ds_t
#pragma omp for
    for (std::int64_t t = 0; t < N; ++t) {
      const T* s = scores + t * E;
      const T* w = weight + t * k;
      const T* dw = dweight + t * k;
      const std::int32_t* sel = expert + t * k;
      for (int e = 0; e < E; ++e) {
        ds[e] = 0.0;
      }
      if (m.norm_topk) {
        // w_j = s_j / S:  ds_j = (dw_j − Σ_i dw_i·w_i) / S.
        double S = 0.0, dot = 0.0;
        for (int j = 0; j < k; ++j) {
          S += double(s[sel[j]]);
          dot += double(dw[j]) * double(w[j]);
        }
        for (int j = 0; j < k; ++j) {
          ds[sel[j]] += (double(dw[j]) - dot) / S;
        }
      } else {
        for (int j = 0; j < k; ++j) {
          ds[sel[j]] += double(dw[j]);
        }
      }
      if (aux_grad) {
        const double* a = aux_grad + (t / aux_group_rows) * E;
        if (m.sigmoid) {
          // p_e = s_e / Σs:  ds_e += (a_e − Σ_f a_f·p_f) / Σs.
          double total = 0.0, dot = 0.0;
          for (int e = 0; e < E; ++e) {
            total += double(s[e]);
          }
          for (int e = 0; e < E; ++e) {
            dot += a[e] * double(s[e]) / total;
          }
          for (int e = 0; e < E; ++e) {
            ds[e] += (a[e] - dot) / total;
          }
        } else {
          for (int e = 0; e < E; ++e) {
            ds[e] += a[e];
          }
        }
      }
      T* dr = dlogits + t * E;
      if (m.sigmoid) {
        for (int e = 0; e < E; ++e) {
          dr[e] = T(ds[e] * double(s[e]) * (1.0 - double(s[e])));
        }
      } else {
        double dot = 0.0;
        for (int e = 0; e < E; ++e) {
          dot += ds[e] * double(s[e]);
        }
        const double z = lse ? z_scale * double(lse[t]) : 0.0;
        for (int e = 0; e < E; ++e) {
          dr[e] = T(double(s[e]) * (ds[e] - dot + z));
        }
      }
    }
  }
}

}  // namespace gc::tree::cpu
