// Mixture-of-experts routing on the GPU, the semantics of templates/cpu/moe.hpp
// (scores, top-k with ties to the lower index, the stable counting sort by
// expert, gather, weighted combine and their backward). No atomics: every sum
// has one owner and a fixed order, so results do not depend on scheduling.
//
//   route            one thread per token (scores in double, as on the CPU)
//   dispatch         per expert one block, each thread a contiguous segment of
//                    the assignments: count them, then place them in
//                    assignment order after one block-wide prefix sum
//   gather/combine   one thread per pack of up to 16 bytes of a row (V elements),
//                    ranks added in order
//   combine backward one warp per expert row (the dweight dot product)
//   route backward   one thread per token, E partials in registers (E fixed)
// The router runs in fp32 (scores, weights and their gradients are float:
// a bf16 router gradient would lose most of its digits to cancellation); the
// expert rows are T.
//
// Specialized: a routing layout M (MoeLayout below, or a test's own) fixes the
// row width M::kDim, the experts E = M::kExperts, top-k K = M::kTopK, the
// scoring (M::kScoring) and the renormalization (M::kNormTopk) at compile
// time: the router's loops over E and K have constant trip counts, its
// per-token score and gradient arrays live in registers, and the scoring
// branch is decided by the compiler.
#pragma once

#include <cstdint>
#include <type_traits>

#include "common.cuh"
#include "gc/knob.hpp"
#include "runtime/cuda/check.hpp"
#include "vocabulary.hpp"

namespace gc::tree::cuda {

// ---- the mixture of experts of this experiment (gcompile folds the spec's values in) ---------
struct MoeLayout {
  static constexpr int kDim = gc::knob<int>("model.d_model", 64);  // the rows routed to experts
  static constexpr int kExperts = gc::knob<int>("plan.moe_experts", 1);
  static constexpr int kTopK = gc::knob<int>("plan.moe_top_k", 1);
  static constexpr RouterScoring kScoring = gc::knob<RouterScoring>("plan.moe_router_scoring", RouterScoring::softmax);
  static constexpr bool kNormTopk = gc::knob<bool>("plan.moe_norm_topk_prob", false);
};

inline constexpr int kMoeThreads = 256;

template <class M, typename T>
__global__ void moe_route_kernel(T* scores, std::int32_t* expert, T* weight, const T* logits, const float* bias,
                                 std::int64_t N) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= N) return;
  constexpr int E = M::kExperts, k = M::kTopK;
  const T* r = logits + t * E;
  T* s = scores + t * E;
  if (M::kScoring == RouterScoring::sigmoid) {
    for (int e = 0; e < E; ++e) s[e] = from_float<T>(float(1.0 / (1.0 + exp(-double(to_float(r[e]))))));
  } else {
    double max_r = double(to_float(r[0]));
    for (int e = 1; e < E; ++e) max_r = fmax(max_r, double(to_float(r[e])));
    double sum = 0.0;
    for (int e = 0; e < E; ++e) sum += exp(double(to_float(r[e])) - max_r);
    for (int e = 0; e < E; ++e) s[e] = from_float<T>(float(exp(double(to_float(r[e])) - max_r) / sum));
  }
  double prev_v = 0.0, selected = 0.0;
  int prev_e = -1;
  for (int j = 0; j < k; ++j) {
    int best = -1;
    double best_v = 0.0;
    for (int e = 0; e < E; ++e) {
      const double v = double(to_float(s[e])) + (bias ? double(bias[e]) : 0.0);
      const bool after = prev_e < 0 || v < prev_v || (v == prev_v && e > prev_e);
      if (after && (best < 0 || v > best_v)) {
        best = e;
        best_v = v;
      }
    }
    expert[t * k + j] = best;
    weight[t * k + j] = s[best];
    selected += double(to_float(s[best]));
    prev_v = best_v;
    prev_e = best;
  }
  if (M::kNormTopk) {
    for (int j = 0; j < k; ++j) weight[t * k + j] = from_float<T>(float(double(to_float(weight[t * k + j])) / selected));
  }
}


// Capacity (cpu::moe_apply_capacity): thread g·E + e walks sequence g's assignments in order
// and keeps expert e's first `capacity` of them; the rest get kept -1 and position -1, and are
// counted in dropped[g·E + e]. Every assignment has one expert, so one thread writes it.
template <class M>
__global__ void moe_capacity_kernel(std::int32_t* kept, std::int32_t* position, std::int64_t* dropped,
                                    const std::int32_t* expert, std::int64_t groups, std::int64_t seq_len,
                                    int capacity) {
  constexpr int experts = M::kExperts, k = M::kTopK;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups * experts) return;
  const std::int64_t g = i / experts;
  const int e = int(i % experts);
  std::int64_t taken = 0, lost = 0;
  for (std::int64_t a = g * seq_len * k; a < (g + 1) * seq_len * k; ++a) {
    if (expert[a] != e) continue;
    if (taken < capacity) {
      kept[a] = e;
      ++taken;
    } else {
      kept[a] = -1;
      position[a] = -1;
      ++lost;
    }
  }
  dropped[i] = lost;
}

// Dispatch: block e owns expert e. Thread i of a block owns the i-th of blockDim.x contiguous
// segments of the A assignments, so a block reads the assignments once per pass with one prefix
// sum in all (the rows stay in assignment order: a stable counting sort, as on the CPU).
__device__ __forceinline__ void assignment_segment(std::int64_t A, std::int64_t& begin, std::int64_t& end) {
  const std::int64_t per = (A + blockDim.x - 1) / blockDim.x;
  begin = min(A, std::int64_t(threadIdx.x) * per);
  end = min(A, begin + per);
}

__device__ __forceinline__ int count_in_segment(const std::int32_t* expert, std::int64_t begin, std::int64_t end,
                                                int e) {
  int c = 0;
  for (std::int64_t a = begin; a < end; ++a) c += expert[a] == e;
  return c;
}

// counts[e] = assignments to expert e (block e; a dropped assignment, -1, counts for none).
template <class M>
__global__ void moe_count_kernel(std::int64_t* counts, const std::int32_t* expert, std::int64_t A) {
  __shared__ int scratch[kWarp];
  std::int64_t begin, end;
  assignment_segment(A, begin, end);
  const int c = block_sum(count_in_segment(expert, begin, end, int(blockIdx.x)), scratch);
  if (threadIdx.x == 0) counts[blockIdx.x] = c;
}

// offsets[0] = 0, offsets[e+1] = offsets[e] + counts[e] (E is small: one thread).
template <class M>
__global__ void moe_offsets_kernel(std::int64_t* offsets, const std::int64_t* counts) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  offsets[0] = 0;
  for (int e = 0; e < M::kExperts; ++e) offsets[e + 1] = offsets[e] + counts[e];
}

// Block e writes expert e's rows: the assignments with expert e, in assignment order, go to rows
// offsets[e], offsets[e] + 1, ...: thread i starts at offsets[e] + (expert e's assignments in
// the segments before its own), an exclusive prefix sum over the block.
template <class M>
__global__ void moe_place_kernel(std::int32_t* order, std::int32_t* position, const std::int64_t* offsets,
                                 const std::int32_t* expert, std::int64_t A) {
  __shared__ int before[kMoeThreads];
  const int e = blockIdx.x;
  std::int64_t begin, end;
  assignment_segment(A, begin, end);
  const int mine = count_in_segment(expert, begin, end, e);
  before[threadIdx.x] = mine;
  __syncthreads();
  for (int step = 1; step < int(blockDim.x); step *= 2) {  // inclusive prefix sum (Hillis–Steele)
    const int add = int(threadIdx.x) >= step ? before[threadIdx.x - step] : 0;
    __syncthreads();
    before[threadIdx.x] += add;
    __syncthreads();
  }
  std::int64_t p = offsets[e] + before[threadIdx.x] - mine;
  for (std::int64_t a = begin; a < end; ++a) {
    if (expert[a] != e) continue;
    order[p] = std::int32_t(a);
    position[a] = std::int32_t(p);
    ++p;
  }
}

// Row p of xs is row order[p] / K of x, copied in packs of V elements (V = 1: element by element).
template <class M, typename T, int V>
__global__ void moe_gather_kernel(T* xs, const T* x, const std::int32_t* order, const std::int64_t* live_rows,
                                  std::int64_t rows) {
  constexpr int P = M::kDim / V;  // packs per row
  using Row = Pack<V, T>;
  const std::int64_t n = (live_rows != nullptr ? *live_rows : rows) * P, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t p = i / P;
    reinterpret_cast<Row*>(xs)[i] = reinterpret_cast<const Row*>(x)[std::int64_t(order[p] / M::kTopK) * P + i % P];
  }
}

// Expert parallelism: dst[p] = src[rows[p]] for p < n rows of dim values.
template <typename T>
__global__ void gather_rows_kernel(T* dst, const T* src, const std::int32_t* rows, std::int64_t n, int dim) {
  const std::int64_t total = n * dim, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    dst[i] = src[std::int64_t(rows[i / dim]) * dim + i % dim];
  }
}

// out[t] (+)= Σ_j w_tj · ys[position_tj], in packs of V elements, the ranks j added in order.
template <class M, typename T, typename W, int V>
__global__ void moe_combine_kernel(T* out, const T* ys, const W* weight, const std::int32_t* position, std::int64_t N,
                                   bool accumulate) {
  constexpr int P = M::kDim / V, K = M::kTopK;
  const std::int64_t n = N * P, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t t = i / P, c = (i % P) * V;
    float acc[V];
    if (accumulate) {
      load_pack<V>(acc, out + t * M::kDim + c);
    } else {
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int32_t p = position[t * K + j];  // -1: dropped (moe.capacity_factor)
      if (p < 0) continue;
      const float w = to_float(weight[t * K + j]);
      float y[V];
      load_pack<V>(y, ys + std::int64_t(p) * M::kDim + c);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] += w * y[v];
    }
    store_pack<V>(out + t * M::kDim + c, acc);
  }
}

// One warp per row p: dys[p] = w_a·dout[t], dweight[a] = dout[t]·ys[p].
template <class M, typename T, typename W, int V>
__global__ void moe_combine_backward_kernel(T* dys, W* dweight, const T* dout, const T* ys, const W* weight,
                                            const std::int32_t* order, const std::int64_t* live_rows,
                                            std::int64_t rows) {
  constexpr int D = M::kDim;
  const std::int64_t p = (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (p >= (live_rows != nullptr ? *live_rows : rows)) return;
  const std::int32_t a = order[p];
  const T* g = dout + std::int64_t(a / M::kTopK) * D;
  const float w = to_float(weight[a]);
  float dot = 0.0f;
  for (int c = lane * V; c < D; c += kWarp * V) {
    float gv[V], yv[V], dv[V];
    load_pack<V>(gv, g + c);
    load_pack<V>(yv, ys + p * D + c);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      dv[v] = w * gv[v];
      dot += gv[v] * yv[v];
    }
    store_pack<V>(dys + p * D + c, dv);
  }
  dot = warp_sum(dot);
  if (lane == 0) dweight[a] = from_float<W>(dot);
}

// dx[t] += Σ_j dxs[position_tj], in packs of V elements, the ranks j added in order.
template <class M, typename T, int V>
__global__ void moe_scatter_add_kernel(T* dx, const T* dxs, const std::int32_t* position, std::int64_t N) {
  constexpr int P = M::kDim / V, K = M::kTopK;
  const std::int64_t n = N * P, stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t t = i / P, c = (i % P) * V;
    float acc[V];
    load_pack<V>(acc, dx + t * M::kDim + c);
#pragma unroll
    for (int j = 0; j < K; ++j) {
      const std::int32_t p = position[t * K + j];  // -1: dropped
      if (p < 0) continue;
      float g[V];
      load_pack<V>(g, dxs + std::int64_t(p) * M::kDim + c);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] += g[v];
    }
    store_pack<V>(dx + t * M::kDim + c, acc);
  }
}

// Σ_e s_t[e] per token (sigmoid scores' normalization for P).
template <class M, typename T>
__global__ void moe_row_total_kernel(double* total, const T* scores, std::int64_t N) {
  constexpr int experts = M::kExperts;
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= N) return;
  double s = 0.0;
  for (int e = 0; e < experts; ++e) s += double(to_float(scores[t * experts + e]));
  total[t] = s;
}

// Block g·E + e: P_ge = mean over group g's rows of p_t[e] (row_total null for softmax scores).
template <class M, typename T>
__global__ void moe_mean_probs_kernel(double* mean_prob, const T* scores, const double* row_total,
                                      std::int64_t group_rows) {
  constexpr int experts = M::kExperts;
  __shared__ double scratch[kWarp];
  const std::int64_t g = blockIdx.x / experts;
  const int e = int(blockIdx.x % experts);
  double sum = 0.0;
  for (std::int64_t t = g * group_rows + threadIdx.x; t < (g + 1) * group_rows; t += blockDim.x) {
    const double s = double(to_float(scores[t * experts + e]));
    sum += row_total ? s / row_total[t] : s;
  }
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) mean_prob[blockIdx.x] = sum / double(group_rows);
}

// Thread g·E + e counts group g's assignments to expert e (group_rows rows of K each).
template <class M>
__global__ void moe_group_counts_kernel(std::int64_t* counts, const std::int32_t* expert, std::int64_t groups,
                                        std::int64_t group_rows) {
  constexpr int experts = M::kExperts, k = M::kTopK;
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups * experts) return;
  const std::int64_t g = i / experts;
  const int e = int(i % experts);
  std::int64_t count = 0;
  for (std::int64_t a = g * group_rows * k; a < (g + 1) * group_rows * k; ++a) count += expert[a] == e ? 1 : 0;
  counts[i] = count;
}

// One thread per row: lse_t = log Σ_e exp r_t[e] (in double, as on the CPU), and lse_t².
template <class M, typename T>
__global__ void moe_router_lse_kernel(T* lse, double* squares, const T* logits, std::int64_t N) {
  constexpr int experts = M::kExperts;
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= N) return;
  const T* r = logits + t * experts;
  double max_r = double(to_float(r[0]));
  for (int e = 1; e < experts; ++e) max_r = fmax(max_r, double(to_float(r[e])));
  double sum = 0.0;
  for (int e = 0; e < experts; ++e) sum += exp(double(to_float(r[e])) - max_r);
  const T value = from_float<T>(float(max_r + log(sum)));
  lse[t] = value;
  squares[t] = double(to_float(value)) * double(to_float(value));
}

// One block: *aux += coef · (Σ_t squares[t]) / N, the sum in a fixed order (a template: defined
// in a header).
template <int = 0>
__global__ void moe_sum_kernel(double* aux, const double* squares, std::int64_t N, double coef) {
  __shared__ double scratch[kWarp];
  double sum = 0.0;
  for (std::int64_t t = threadIdx.x; t < N; t += blockDim.x) sum += squares[t];
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) *aux += coef * sum / double(N);
}

// dlogits from dweight, the balancing losses' dL/dp (aux_grad: E values per group of
// aux_group_rows rows, or null) and the z-loss's z_scale · lse_t · s_t (lse null: none).
template <class M, typename T>
__global__ void moe_route_backward_kernel(T* dlogits, const T* dweight, const T* scores, const std::int32_t* expert,
                                          const T* weight, const double* aux_grad, std::int64_t aux_group_rows,
                                          const T* lse, double z_scale, std::int64_t N) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= N) return;
  constexpr int E = M::kExperts, k = M::kTopK;
  constexpr bool kSigmoid = M::kScoring == RouterScoring::sigmoid;
  const T* s = scores + t * E;
  double ds[E];
  for (int e = 0; e < E; ++e) ds[e] = 0.0;
  if (M::kNormTopk) {
    double S = 0.0, dot = 0.0;
    for (int j = 0; j < k; ++j) {
      S += double(to_float(s[expert[t * k + j]]));
      dot += double(to_float(dweight[t * k + j])) * double(to_float(weight[t * k + j]));
    }
    for (int j = 0; j < k; ++j) ds[expert[t * k + j]] += (double(to_float(dweight[t * k + j])) - dot) / S;
  } else {
    for (int j = 0; j < k; ++j) ds[expert[t * k + j]] += double(to_float(dweight[t * k + j]));
  }
  if (aux_grad) {
    const double* a = aux_grad + (t / aux_group_rows) * E;
    if (kSigmoid) {
      double total = 0.0, dot = 0.0;
      for (int e = 0; e < E; ++e) total += double(to_float(s[e]));
      for (int e = 0; e < E; ++e) dot += a[e] * double(to_float(s[e])) / total;
      for (int e = 0; e < E; ++e) ds[e] += (a[e] - dot) / total;
    } else {
      for (int e = 0; e < E; ++e) ds[e] += a[e];
    }
  }
  T* dr = dlogits + t * E;
  if (kSigmoid) {
    for (int e = 0; e < E; ++e) {
      const double se = double(to_float(s[e]));
      dr[e] = from_float<T>(float(ds[e] * se * (1.0 - se)));
    }
  } else {
    double dot = 0.0;
    for (int e = 0; e < E; ++e) dot += ds[e] * double(to_float(s[e]));
    const double z = lse ? z_scale * double(to_float(lse[t])) : 0.0;
    for (int e = 0; e < E; ++e) dr[e] = from_float<T>(float(double(to_float(s[e])) * (ds[e] - dot + z)));
  }
}

// ---- launchers (device pointers unless named _host) ----------------------------------------

template <class M, typename T>
void moe_route_forward(T* scores, std::int32_t* expert, T* weight, const T* logits, const float* bias,
                       std::int64_t N) {
  static_assert(M::kTopK >= 1 && M::kTopK <= M::kExperts, "top_k must be between 1 and the number of experts");
  if (N <= 0) return;
  launch(moe_route_kernel<M, T>, blocks_for(N, kMoeThreads), kMoeThreads, 0, scores, expert, weight, logits, bias, N);
}

// dropped: (N / seq_len) · E on the device.
template <class M>
void moe_apply_capacity(std::int32_t* kept, std::int32_t* position, std::int64_t* dropped, const std::int32_t* expert,
                        std::int64_t N, std::int64_t seq_len, int capacity) {
  if (N <= 0) return;
  const std::int64_t groups = N / seq_len;
  launch(moe_capacity_kernel<M>, blocks_for(groups * M::kExperts, kMoeThreads), kMoeThreads, 0, kept, position, dropped,
         expert, groups, seq_len, capacity);
}

// counts: E device scratch; offsets: E+1 on the device (where the grouped GEMMs read them).
template <class M>
void moe_dispatch(std::int32_t* order, std::int32_t* position, std::int64_t* offsets, std::int64_t* counts,
                  const std::int32_t* expert, std::int64_t N) {
  const std::int64_t A = N * M::kTopK;
  launch(moe_count_kernel<M>, unsigned(M::kExperts), kMoeThreads, 0, counts, expert, A);
  launch(moe_offsets_kernel<M>, 1u, 1, 0, offsets, counts);
  launch(moe_place_kernel<M>, unsigned(M::kExperts), kMoeThreads, 0, order, position, offsets, expert, A);
}

// Calls run(V) with V a compile-time constant: row_pack<T>(M::kDim) when every pointer may be read
// in packs of V elements, else 1 (element by element): the row-moving kernels below take V.
template <class M, typename T, typename Run, typename... P>
void with_row_pack(Run&& run, const P*... pointers) {
  constexpr int V = row_pack<T>(M::kDim);
  if (packs_aligned<V, T>(pointers...)) {
    run(std::integral_constant<int, V>{});
  } else {
    run(std::integral_constant<int, 1>{});
  }
}

// xs [rows, D]: row p is x[order[p] / K] (rows = N·K, or with live_rows non-null a bound: the
// rows are *live_rows, read on the device).
template <class M, typename T>
void moe_gather(T* xs, const T* x, const std::int32_t* order, std::int64_t rows,
                const std::int64_t* live_rows = nullptr) {
  if (rows <= 0) return;
  with_row_pack<M, T>(
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        launch(moe_gather_kernel<M, T, V>, blocks_for(rows * (M::kDim / V), kMoeThreads), kMoeThreads, 0, xs, x, order,
               live_rows, rows);
      },
      xs, x);
}

// dst [n, dim]: row p is src[rows[p]] (cpu::moe_gather with top_k 1).
template <typename T>
void gather_rows(T* dst, const T* src, const std::int32_t* rows, std::int64_t n, int dim) {
  if (n <= 0) return;
  launch(gather_rows_kernel<T>, blocks_for(n * dim, kMoeThreads), kMoeThreads, 0, dst, src, rows, n, dim);
}

template <class M, typename T, typename W>
void moe_combine(T* out, const T* ys, const W* weight, const std::int32_t* position, std::int64_t N, bool accumulate) {
  if (N <= 0) return;
  with_row_pack<M, T>(
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        launch(moe_combine_kernel<M, T, W, V>, blocks_for(N * (M::kDim / V), kMoeThreads), kMoeThreads, 0, out, ys,
               weight, position, N, accumulate);
      },
      out, ys);
}

// rows: the rows kept, or with live_rows non-null a bound (the rows kept are *live_rows, on the
// device: then dweight is zeroed first); a dropped assignment's dweight is 0.
template <class M, typename T, typename W>
void moe_combine_backward(T* dys, W* dweight, const T* dout, const T* ys, const W* weight, const std::int32_t* order,
                          std::int64_t rows, std::int64_t assignments, const std::int64_t* live_rows = nullptr) {
  if (rows < assignments || live_rows != nullptr) GC_CUDA_CHECK(cudaMemsetAsync(dweight, 0, std::size_t(assignments) * sizeof(W), nullptr));
  if (rows <= 0) return;
  with_row_pack<M, T>(
      [&](auto v) {
        launch(moe_combine_backward_kernel<M, T, W, decltype(v)::value>, blocks_for(rows * kWarp, kMoeThreads),
               kMoeThreads, 0, dys, dweight, dout, ys, weight, order, live_rows, rows);
      },
      dys, dout, ys);
}

template <class M, typename T>
void moe_scatter_add(T* dx, const T* dxs, const std::int32_t* position, std::int64_t N) {
  if (N <= 0) return;
  with_row_pack<M, T>(
      [&](auto v) {
        constexpr int V = decltype(v)::value;
        launch(moe_scatter_add_kernel<M, T, V>, blocks_for(N * (M::kDim / V), kMoeThreads), kMoeThreads, 0, dx, dxs,
               position, N);
      },
      dx, dxs);
}

// mean_prob: (N / group_rows) · E doubles on the device; row_total: N doubles of scratch
// (sigmoid only).
template <class M, typename T>
void moe_mean_probs(double* mean_prob, double* row_total, const T* scores, std::int64_t N, std::int64_t group_rows) {
  constexpr bool kSigmoid = M::kScoring == RouterScoring::sigmoid;
  if (N <= 0) return;
  if (kSigmoid) {
    launch(moe_row_total_kernel<M, T>, blocks_for(N, kMoeThreads), kMoeThreads, 0, row_total, scores, N);
  }
  launch(moe_mean_probs_kernel<M, T>, unsigned(N / group_rows * M::kExperts), kMoeThreads, 0, mean_prob, scores,
         kSigmoid ? static_cast<const double*>(row_total) : nullptr, group_rows);
}

// counts: (N / group_rows) · E on the device.
template <class M>
void moe_group_counts(std::int64_t* counts, const std::int32_t* expert, std::int64_t N, std::int64_t group_rows) {
  if (N <= 0) return;
  const std::int64_t groups = N / group_rows;
  launch(moe_group_counts_kernel<M>, blocks_for(groups * M::kExperts, kMoeThreads), kMoeThreads, 0, counts, expert,
         groups, group_rows);
}

// lse: N values; squares: N doubles of scratch; *aux += coef · Σ lse² / N (the z-loss; the sum in
// a fixed order).
template <class M, typename T>
void moe_router_lse(T* lse, double* squares, double* aux, double coef, const T* logits, std::int64_t N) {
  if (N <= 0) return;
  launch(moe_router_lse_kernel<M, T>, blocks_for(N, kMoeThreads), kMoeThreads, 0, lse, squares, logits, N);
  launch(moe_sum_kernel<>, 1u, kMoeThreads, 0, aux, static_cast<const double*>(squares), N, coef);
}

// fp32 gradient of the router logits → T, for the router's backward GEMMs.
template <typename T>
__global__ void moe_cast_kernel(T* out, const float* in, std::int64_t n) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = from_float<T>(in[i]);
  }
}

template <typename T>
void moe_cast(T* out, const float* in, std::int64_t n) {
  if (n <= 0) return;
  launch(moe_cast_kernel<T>, blocks_for(n, kMoeThreads), kMoeThreads, 0, out, in, n);
}

template <class M, typename T>
void moe_route_backward(T* dlogits, const T* dweight, const T* scores, const std::int32_t* expert, const T* weight,
                        const double* aux_grad, std::int64_t aux_group_rows, const T* lse, double z_scale,
                        std::int64_t N) {
  if (N <= 0) return;
  launch(moe_route_backward_kernel<M, T>, blocks_for(N, kMoeThreads), kMoeThreads, 0, dlogits, dweight, scores, expert,
         weight, aux_grad, aux_group_rows, lse, z_scale, N);
}

}  // namespace gc::tree::cuda
