// The mixture-of-experts MLP of one layer (seed 000 Table 3), composed from a
// backend's kernels like the rest of the model (cpu/moe.hpp has the math):
//
//   r = b·Wrᵀ; s, top-k experts e_j and weights w_j from r (moe.router_scoring,
//   moe.norm_topk_prob; the aux_free bias only selects)
//   rows of b sorted by expert (stable counting sort: deterministic, dropless)
//   y_t = Σ_j w_tj · SwiGLU_{e_j}(b_t) + SharedSwiGLU(b_t)
//   L_aux = coef · E · Σ_e f_e · P_e (moe.load_balance = "aux_loss", per micro-batch)
//   + the same per sequence, averaged over sequences (moe.seq_aux_loss)
//   + coef_z · mean_t lse_t² (moe.z_loss, the router z-loss)
//
// MoeLayer holds what the backward needs; MoeScratch is shared by all layers. Every piece of
// routing state lives where the backend keeps its tensors (on the GPU, device memory): the
// offsets, the counts, the balancing losses and their gradient are computed there
// (core/moe_balance.hpp), so a step copies nothing to the host (issue 39); only expert
// parallelism without a capacity reads the offsets on the host, to size its exchange (with one,
// the exchange moves fixed slots: model/expert_parallel.hpp's ExpertRoute).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/moe_balance.hpp"
#include "model/expert_parallel.hpp"
#include "profile/step_profile.hpp"
#include "plan.hpp"

namespace gc::tree {

// Row indices of one MoE layer's tensors (kParams; shared_* are -1 without shared experts).
struct MoeParams {
  int router, gate, up, down, shared_gate, shared_up, shared_down;
};

// Whether layer l has an MoE MLP (the plan's layer layout: moe.n_dense_layers, moe.layer_interval).
constexpr bool is_moe_layer(int l) { return kLayerParams[l].router >= 0; }
constexpr MoeParams moe_params(int l) {
  const LayerParams& P = kLayerParams[l];
  return {P.router, P.experts_gate, P.experts_up, P.experts_down, P.shared_gate, P.shared_up, P.shared_down};
}

// The balancing losses' shape for a micro-batch of N rows in sequences of seq_len.
inline core::MoeBalance moe_balance(std::int64_t N, int seq_len) {
  core::MoeBalance b;
  b.experts = kExperts;
  b.top_k = kTopK;
  b.rows = N;
  b.seq_len = seq_len;
  b.aux_coef = kLoadBalance == LoadBalance::aux_loss ? kLoadBalanceCoef : 0.0;
  b.seq_coef = kMoeSeqAuxLoss;
  return b;
}

template <typename Backend>
struct MoeLayer {
  using Act = typename Backend::Act;
  using Stat = typename Backend::Stat;
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;

  Buffer<Stat> scores, weight;  // the router's, in fp32 on the GPU
  Buffer<Act> xs, eu, ew, es, ys, su, sw, ss;
  Buffer<std::int32_t> expert, order, position;
  Buffer<std::int64_t> offsets;  // expert e's rows: offsets[e] .. offsets[e+1]
  Buffer<float> bias;            // aux_free selection bias (saved in checkpoints)
  // Assignments per expert before any dropping: the last forward's (selected), and the tallies
  // of the step and of the routing-record window (E loads, then the dropped).
  Buffer<double> selected, step_tally, window_tally;
  Buffer<double> mean_prob;  // P_e of the last forward
  // moe.seq_aux_loss: per sequence g of the last forward the assignments and P of each expert,
  // [g·E + e]; the balancing losses' dL/dp per gradient group (the backward's).
  Buffer<std::int64_t> seq_counts;
  Buffer<double> seq_mean_prob, aux_grad;
  Buffer<Stat> lse;  // moe.z_loss: log Σ_e exp r_t[e] per row
  // moe.capacity_factor: the assignments kept (expert, or -1 when dropped) and the dropped per
  // sequence and expert of the last forward.
  Buffer<std::int32_t> kept;
  Buffer<std::int64_t> dropped;
  // Expert parallelism (model/expert_parallel.hpp; empty without it): the rows this rank's
  // experts computed in expert-major order, the last training forward's route (host-planned from
  // a host copy of the offsets, or slotted), and the permutation between the received
  // (source-major) and the expert-major rows.
  Buffer<Act> xe;
  ExpertRoute route;
  std::vector<std::int64_t> host_offsets;
  Buffer<std::int64_t> local_offsets;  // route.local_offsets where the rows lie
  Buffer<std::int32_t> perm, unperm;   // route.perm and route.unperm where the rows lie
};

template <typename Backend>
struct MoeScratch {
  using Act = typename Backend::Act;
  using Stat = typename Backend::Stat;
  template <typename U>
  using Buffer = typename Backend::template Buffer<U>;
  Buffer<Stat> logits, dweight;  // router logits (then their gradient), dL/dw
  Buffer<Act> dys, des, deu, dew, dxs, dsu, dsw, dss;
  Buffer<Act> xr, ye, dxe;  // expert parallelism: rows as exchanged, the experts' outputs, their dx
  Buffer<std::int64_t> all_offsets;  // a slotted route's: every group rank's offsets (G · (E + 1))
};

// Allocates a layer's buffers for N rows through `alloc(buffer, elements)`.
template <typename Backend, typename Alloc>
void allocate_moe_layer(MoeLayer<Backend>& L, std::int64_t N, int seq_len, Alloc&& alloc) {
  const std::int64_t A = N * kTopK, D = kDModel;
  alloc(L.scores, N * kExperts);
  alloc(L.weight, A);
  for (auto* buf : {&L.xs, &L.ys}) alloc(*buf, A * D);
  for (auto* buf : {&L.eu, &L.ew, &L.es}) alloc(*buf, A * kExpertDff);
  if constexpr (kSharedDff > 0) {
    for (auto* buf : {&L.su, &L.sw, &L.ss}) alloc(*buf, N * kSharedDff);
  }
  for (auto* buf : {&L.expert, &L.order, &L.position}) alloc(*buf, A);
  const std::int64_t sequences = N / std::max(seq_len, 1), E = kExperts;
  alloc(L.offsets, E + 1);
  alloc(L.bias, E);
  alloc(L.selected, E);
  alloc(L.step_tally, E + 1);
  alloc(L.window_tally, E + 1);
  alloc(L.mean_prob, E);
  if constexpr (kMoeSeqAuxLoss > 0.0) {
    alloc(L.seq_counts, sequences * E);
    alloc(L.seq_mean_prob, sequences * E);
  }
  alloc(L.aux_grad, (kMoeSeqAuxLoss > 0.0 ? sequences : 1) * E);
  if constexpr (kMoeZLoss > 0.0) {
    alloc(L.lse, N);
  }
  if constexpr (kMoeCapacity > 0) {
    alloc(L.kept, A);
    alloc(L.dropped, sequences * E);
  }
}

template <typename Backend, typename Alloc>
void allocate_moe_scratch(MoeScratch<Backend>& S, std::int64_t N, Alloc&& alloc) {
  const std::int64_t A = N * kTopK, D = kDModel;
  alloc(S.logits, N * kExperts);
  alloc(S.dweight, A);
  for (auto* buf : {&S.dys, &S.dxs}) alloc(*buf, A * D);
  for (auto* buf : {&S.des, &S.deu, &S.dew}) alloc(*buf, A * kExpertDff);
  if constexpr (kSharedDff > 0) {
    for (auto* buf : {&S.dsu, &S.dsw, &S.dss}) alloc(*buf, N * kSharedDff);
  }
}

// Expert parallelism over a group of G ranks: the buffers that hold the rows this rank's
// experts compute grow to C rows (exchange_capacity_rows: the dropless worst case G · N · k, or
// the bound of moe.capacity_factor or of the exchange factor), and the exchange buffers appear.
// grow(buffer, elements) reallocates.
template <typename Backend, typename Grow>
void allocate_expert_parallel(std::vector<MoeLayer<Backend>>& layers, MoeScratch<Backend>& S, std::int64_t N, int G,
                              double factor, std::int64_t slot, Grow&& grow) {
  const std::int64_t C = exchange_capacity_rows(N * kTopK, G, factor), D = kDModel;
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    MoeLayer<Backend>& L = layers[std::size_t(l)];
    grow(L.xe, C * D);
    for (auto* buf : {&L.eu, &L.ew, &L.es}) grow(*buf, C * kExpertDff);
    grow(L.perm, C);
    grow(L.unperm, C);
    grow(L.local_offsets, kExperts + 1);
    L.host_offsets.assign(std::size_t(kExperts) + 1, 0);
    reserve_expert_route(L.route, G, C, slot);
  }
  for (auto* buf : {&S.xr, &S.ye, &S.dxe}) grow(*buf, C * D);
  grow(S.all_offsets, std::int64_t(G) * (kExperts + 1));
  for (auto* buf : {&S.des, &S.deu, &S.dew}) grow(*buf, C * kExpertDff);
}

// Bytes allocate_expert_parallel adds to a model of `rows` tokens for a group of G ranks (the
// plan counts the same: compiler/explain/explain_experts.cpp): per MoE layer the expert-major
// rows (C · d_model), the expert activations grown from N·k to C rows (3 · d_expert each) and
// the two permutations (C int32 each) and the owned experts' offsets (E + 1 int64); once, the exchange buffers (3 · C · d_model), the
// expert gradients grown likewise (3 · d_expert) and the group's offsets (G · (E + 1) int64).
// C = exchange_capacity_rows (G · N · k dropless).
inline std::int64_t expert_parallel_buffer_bytes(std::int64_t rows, int G, int act_bytes, double factor = 0.0) {
  int moe_layers = 0;
  for (int l = 0; l < kLayers; ++l) moe_layers += is_moe_layer(l) ? 1 : 0;
  if (G <= 1 || moe_layers == 0) return 0;
  const std::int64_t A = rows * kTopK, C = exchange_capacity_rows(A, G, factor), D = kDModel, F = kExpertDff;
  const std::int64_t per_layer = (C * D + 3 * (C - A) * F) * act_bytes + 2 * C * 4 + (kExperts + 1) * 8;
  const std::int64_t scratch = (3 * C * D + 3 * (C - A) * F) * act_bytes + std::int64_t(G) * (kExperts + 1) * 8;
  return std::int64_t(moe_layers) * per_layer + scratch;
}

// This forward's route (model/expert_parallel.hpp's ExpertRoute). Slotted: the group's offsets
// all-gathered and the permutation built where the rows lie. Host-planned: the offsets copied to
// the host (the one device → host copy such a layer makes), the route planned there and its
// permutation and owned offsets copied back.
template <typename Backend>
void route_expert_rows(Backend& ops, MoeLayer<Backend>& L, MoeScratch<Backend>& S,
                       ExpertExchange<typename Backend::Act>& x) {
  using PC = profile::Category;
  using profile::kFwd;
  const int G = x.ranks();
  const std::int64_t C = std::int64_t(L.route.perm.size());
  if (L.route.slot > 0) {
    plan_slotted_route(L.route, G, x.rank(), C);
    profile::timed(ops.profiler, profile::memory(PC::communication, "share_offsets", kFwd, 8.0 * G * (kExperts + 1)), [&] {
      x.share_offsets(L.offsets.data(), S.all_offsets.data());
    });
    const auto [lo, hi] = L.route.block;
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "expert_slots_route", kFwd, 12.0 * C), [&] {
      ops.expert_slots_route(L.perm.data(), L.unperm.data(), L.local_offsets.data(), S.all_offsets.data(), G,
                             L.route.slot, lo, hi, C);
    });
    return;
  }
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "offsets_to_host", kFwd, 8.0 * (kExperts + 1)), [&] {
    Backend::to_host(L.host_offsets.data(), L.offsets.data(), std::int64_t(kExperts) + 1);
  });
  plan_expert_route(L.route, L.host_offsets.data(), x);
  const std::int64_t R = L.route.received;
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "copy_indices", kFwd, 1.0 * R * sizeof(std::int32_t)), [&] {
    Backend::from_host(L.perm.data(), L.route.perm.data(), R);
  });
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "copy_indices", kFwd, 1.0 * R * sizeof(std::int32_t)), [&] {
    Backend::from_host(L.unperm.data(), L.route.unperm.data(), R);
  });
  const auto [lo, hi] = L.route.block;
  Backend::from_host(L.local_offsets.data(), L.route.local_offsets.data() + lo, std::int64_t(hi - lo) + 1);
}

// `rows` (this rank's, sorted by expert: L.offsets) to the owners of their experts, received
// source-major into `received`. A slotted route first packs them into G slots in `staging`.
template <typename Backend>
void send_to_owners(Backend& ops, MoeLayer<Backend>& L, ExpertExchange<typename Backend::Act>& x,
                    const typename Backend::Act* rows, typename Backend::Act* received,
                    typename Backend::Act* staging, profile::Pass direction) {
  using PC = profile::Category;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const ExpertRoute& r = L.route;
  const typename Backend::Act* send = rows;
  if (r.slot > 0) {
    const double bytes = 2.0 * x.ranks() * r.slot * kDModel * kActBytes;
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "expert_slots_pack", direction, bytes), [&] {
      ops.expert_slots_pack(staging, rows, L.offsets.data(), x.ranks(), r.slot, kDModel);
    });
    send = staging;
  }
  profile::timed(ops.profiler, profile::memory(PC::communication, "expert_exchange", direction, 0.0), [&] {
    x.exchange(send, r.send_rows, received, r.recv_rows, kDModel);
  });
}

// The reverse: the owners' rows (source-major in `sent`) back to their own ranks' `rows`.
template <typename Backend>
void return_to_sources(Backend& ops, MoeLayer<Backend>& L, ExpertExchange<typename Backend::Act>& x,
                       const typename Backend::Act* sent, typename Backend::Act* rows,
                       typename Backend::Act* staging, profile::Pass direction) {
  using PC = profile::Category;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const ExpertRoute& r = L.route;
  profile::timed(ops.profiler, profile::memory(PC::communication, "expert_exchange", direction, 0.0), [&] {
    x.exchange(sent, r.recv_rows, r.slot > 0 ? staging : rows, r.send_rows, kDModel);
  });
  if (r.slot > 0) {
    const double bytes = 2.0 * x.ranks() * r.slot * kDModel * kActBytes;
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "expert_slots_unpack", direction, bytes), [&] {
      ops.expert_slots_unpack(rows, staging, L.offsets.data(), x.ranks(), r.slot, kDModel);
    });
  }
}

// The experts' part of the MoE forward under expert parallelism: xs (this rank's rows, sorted
// by expert) to the experts' owners, the owned experts on the rows received, ys back.
template <typename Backend, typename Weights>
void moe_experts_forward_exchanged(Backend& ops, MoeLayer<Backend>& L, MoeScratch<Backend>& S, const MoeParams& P,
                                   Weights&& W, ExpertExchange<typename Backend::Act>& x) {
  using PC = profile::Category;  // the step profile's names (profile/step_profile.hpp)
  using profile::kFwd, profile::kBwd;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const int D = kDModel;
  route_expert_rows(ops, L, S, x);
  const std::int64_t R = L.route.received;
  // The owned experts [lo, hi): their rows' offsets (from 0), weights and gradients.
  const auto [lo, hi] = L.route.block;
  const int owned = hi - lo;
  const std::int64_t* off = L.local_offsets.data();
  const std::int64_t skip = std::int64_t(lo) * kDModel * kExpertDff;  // elements of the experts before lo
  send_to_owners(ops, L, x, L.xs.data(), S.xr.data(), S.ye.data(), kFwd);  // dispatch
  // expert-major
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "gather_rows", kFwd, 2.0 * R * D * kActBytes), [&] {
    ops.gather_rows(L.xe.data(), S.xr.data(), L.perm.data(), R, D);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, D, kExpertDff), [&] {
    ops.grouped_linear_forward(L.eu.data(), L.xe.data(), W(P.gate, skip), off, owned, R, D, kExpertDff);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, D, kExpertDff), [&] {
    ops.grouped_linear_forward(L.ew.data(), L.xe.data(), W(P.up, skip), off, owned, R, D, kExpertDff);
  });
  profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_forward", kFwd, 3.0 * double(R * kExpertDff) * kActBytes), [&] {
    ops.swiglu_forward(L.es.data(), L.eu.data(), L.ew.data(), R * kExpertDff);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, kExpertDff, D), [&] {
    ops.grouped_linear_forward(S.ye.data(), L.es.data(), W(P.down, skip), off, owned, R, kExpertDff, D);
  });
  // source-major
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "gather_rows", kFwd, 2.0 * R * D * kActBytes), [&] {
    ops.gather_rows(S.xr.data(), S.ye.data(), L.unperm.data(), R, D);
  });
  return_to_sources(ops, L, x, S.xr.data(), L.ys.data(), S.dxe.data(), kFwd);  // combine
}

// Its backward: dys to the owners, the owned experts' backward (their weight gradients here),
// dxs back to the rows' own ranks.
template <typename Backend, typename Weights, typename Grads>
void moe_experts_backward_exchanged(Backend& ops, MoeLayer<Backend>& L, MoeScratch<Backend>& S, const MoeParams& P,
                                    Weights&& W, Grads&& G, ExpertExchange<typename Backend::Act>& x) {
  using PC = profile::Category;  // the step profile's names (profile/step_profile.hpp)
  using profile::kFwd, profile::kBwd;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const int D = kDModel;
  const std::int64_t R = L.route.received;
  const std::int64_t* off = L.local_offsets.data();  // the owned experts' (moe_experts_forward_exchanged)
  const auto [lo, hi] = L.route.block;
  const int owned = hi - lo;
  const std::int64_t skip = std::int64_t(lo) * kDModel * kExpertDff;
  send_to_owners(ops, L, x, S.dys.data(), S.xr.data(), S.dxe.data(), kBwd);
  // dL/dy, expert-major
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "gather_rows", kBwd, 2.0 * R * D * kActBytes), [&] {
    ops.gather_rows(S.ye.data(), S.xr.data(), L.perm.data(), R, D);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, kExpertDff, D), [&] {
    ops.grouped_linear_backward(S.des.data(), G(P.down, skip), S.ye.data(), L.es.data(), W(P.down, skip), off, owned,
                                R, kExpertDff, D);
  });
  profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_backward", kBwd, 5.0 * double(R * kExpertDff) * kActBytes), [&] {
    ops.swiglu_backward(S.deu.data(), S.dew.data(), S.des.data(), L.eu.data(), L.ew.data(), R * kExpertDff);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, D, kExpertDff), [&] {
    ops.grouped_linear_backward(S.dxe.data(), G(P.gate, skip), S.deu.data(), L.xe.data(), W(P.gate, skip), off, owned,
                                R, D, kExpertDff);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, D, kExpertDff), [&] {
    ops.grouped_linear_backward(S.dxe.data(), G(P.up, skip), S.dew.data(), L.xe.data(), W(P.up, skip), off, owned,
                                R, D, kExpertDff, /*accumulate_dx=*/true);
  });
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "gather_rows", kBwd, 2.0 * R * D * kActBytes), [&] {
    ops.gather_rows(S.xr.data(), S.dxe.data(), L.unperm.data(), R, D);
  });
  return_to_sources(ops, L, x, S.xr.data(), S.dxs.data(), S.ye.data(), kBwd);
}

// After the dispatch, where the routing lives: the balancing losses' P (and per sequence the
// counts and P), the assignments per expert before dropping (into the step's tally), and the
// losses added to *aux (core/moe_balance.hpp).
template <typename Backend>
void record_routing(Backend& ops, MoeLayer<Backend>& L, int N, int seq_len, const std::int64_t* dropped, double* aux) {
  using PC = profile::Category;
  using profile::kFwd;
  const std::int64_t* seq_counts = nullptr;
  const double* seq_mean_prob = nullptr;
  if constexpr (kMoeSeqAuxLoss > 0.0) {
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_group_counts", kFwd, 1.0 * N * kTopK * sizeof(std::int32_t)), [&] {
      ops.moe_group_counts(L.seq_counts.data(), L.expert.data(), N, seq_len);
    });
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_mean_probs", kFwd, 1.0 * N * kExperts * sizeof(float)), [&] {
      ops.moe_mean_probs(L.seq_mean_prob.data(), L.scores.data(), N, seq_len);
    });
    seq_counts = L.seq_counts.data();
    seq_mean_prob = L.seq_mean_prob.data();
  }
  if constexpr (kLoadBalance == LoadBalance::aux_loss) {
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_mean_probs", kFwd, 1.0 * N * kExperts * sizeof(float)), [&] {
      ops.moe_mean_probs(L.mean_prob.data(), L.scores.data(), N, N);
    });
  }
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_record_routing", kFwd, 8.0 * 4 * kExperts), [&] {
    ops.moe_record_routing(moe_balance(N, seq_len), L.offsets.data(), dropped, L.selected.data(), L.step_tally.data(),
                           L.mean_prob.data(), seq_counts, seq_mean_prob, aux);
  });
}

// m = MoE(b) for N rows. W(i) gives parameter row i, W(i, from) and G(i, from) its weights and
// gradient from element `from` on (the model's param_from and grad_from: under expert
// parallelism a rank holds its experts' only). The layer's balancing losses are added to *aux
// (backend memory, zeroed by the caller). With `exchange` (every forward under expert
// parallelism) the experts run on their owners.
template <typename Backend, typename Weights>
void moe_forward(Backend& ops, MoeLayer<Backend>& L, MoeScratch<Backend>& S, typename Backend::Act* m,
                 const typename Backend::Act* b, const MoeParams& P, Weights&& W, int N, int seq_len, double* aux,
                 ExpertExchange<typename Backend::Act>* exchange = nullptr) {
  using PC = profile::Category;  // the step profile's names (profile/step_profile.hpp)
  using profile::kFwd, profile::kBwd;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const int D = kDModel;
  const std::int64_t A = std::int64_t(N) * kTopK;
  profile::timed(ops.profiler, profile::gemm(PC::gemm_router, kFwd, N, D, kExperts), [&] {
    ops.router_forward(S.logits.data(), b, W(P.router), N);
  });
  const float* bias = nullptr;
  if constexpr (kLoadBalance == LoadBalance::aux_free) {
    bias = L.bias.data();
  }
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_route_forward", kFwd, 2.0 * N * kExperts * sizeof(float)), [&] {
    ops.moe_route_forward(L.scores.data(), L.expert.data(), L.weight.data(), S.logits.data(), bias, N);
  });
  if constexpr (kMoeZLoss > 0.0) {  // before the logits' scratch is reused
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_router_lse", kFwd, 1.0 * N * kExperts * sizeof(float)), [&] {
      ops.moe_router_lse(L.lse.data(), S.logits.data(), N, aux, kMoeZLoss);
    });
  }
  const std::int32_t* routed = L.expert.data();  // the assignments dispatched
  const std::int64_t* dropped = nullptr;
  if constexpr (kMoeCapacity > 0) {
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_apply_capacity", kFwd, 3.0 * A * sizeof(std::int32_t)), [&] {
      ops.moe_apply_capacity(L.kept.data(), L.position.data(), L.dropped.data(), L.expert.data(), N, seq_len);
    });
    routed = L.kept.data();
    dropped = L.dropped.data();
  }
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_dispatch", kFwd, 3.0 * A * sizeof(std::int32_t)), [&] {
    ops.moe_dispatch(L.order.data(), L.position.data(), L.offsets.data(), routed, N);
  });
  record_routing(ops, L, N, seq_len, dropped, aux);
  // The rows the experts compute: A when dropless; with a capacity fewer, a count only the
  // backend's memory holds (offsets[E]), so the kernels below take A as a bound and read it.
  const std::int64_t R = A;
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_gather", kFwd, 2.0 * R * D * kActBytes), [&] {
    ops.moe_gather(L.xs.data(), b, L.order.data(), L.offsets.data(), R, D);
  });
  L.route.active = false;
  if (exchange != nullptr) {
    moe_experts_forward_exchanged(ops, L, S, P, W, *exchange);
  } else {
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, D, kExpertDff), [&] {
      ops.grouped_linear_forward(L.eu.data(), L.xs.data(), W(P.gate), L.offsets.data(), kExperts, R, D, kExpertDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, D, kExpertDff), [&] {
      ops.grouped_linear_forward(L.ew.data(), L.xs.data(), W(P.up), L.offsets.data(), kExperts, R, D, kExpertDff);
    });
    profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_forward", kFwd, 3.0 * double(R * kExpertDff) * kActBytes), [&] {
      ops.swiglu_forward(L.es.data(), L.eu.data(), L.ew.data(), R * kExpertDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, R, kExpertDff, D), [&] {
      ops.grouped_linear_forward(L.ys.data(), L.es.data(), W(P.down), L.offsets.data(), kExperts, R, kExpertDff, D);
    });
  }
  bool accumulate = false;
  if constexpr (kSharedDff > 0) {
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, N, D, kSharedDff), [&] {
      ops.linear_forward(L.su.data(), b, W(P.shared_gate), N, D, kSharedDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, N, D, kSharedDff), [&] {
      ops.linear_forward(L.sw.data(), b, W(P.shared_up), N, D, kSharedDff);
    });
    profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_forward", kFwd, 3.0 * double(std::int64_t(N) * kSharedDff) * kActBytes), [&] {
      ops.swiglu_forward(L.ss.data(), L.su.data(), L.sw.data(), std::int64_t(N) * kSharedDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kFwd, N, kSharedDff, D), [&] {
      ops.linear_forward(m, L.ss.data(), W(P.shared_down), N, kSharedDff, D);
    });
    accumulate = true;
  }
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_combine", kFwd, (double(R) + 2.0 * N) * D * kActBytes), [&] {
    ops.moe_combine(m, L.ys.data(), L.weight.data(), L.position.data(), N, D, accumulate);
  });
}

// db = dL/db of the block (overwritten) from dm = dL/dm; parameter gradients
// accumulate. loss_scale multiplies the balancing loss's gradient (dm already
// carries it for the rest).
template <typename Backend, typename Weights, typename Grads>
void moe_backward(Backend& ops, MoeLayer<Backend>& L, MoeScratch<Backend>& S, typename Backend::Act* db,
                  const typename Backend::Act* dm, const typename Backend::Act* b, const MoeParams& P, Weights&& W,
                  Grads&& G, int N, int seq_len, double loss_scale,
                  ExpertExchange<typename Backend::Act>* exchange = nullptr) {
  using PC = profile::Category;  // the step profile's names (profile/step_profile.hpp)
  using profile::kFwd, profile::kBwd;
  constexpr double kActBytes = sizeof(typename Backend::Act);
  const int D = kDModel;
  const std::int64_t R = std::int64_t(N) * kTopK;  // a bound on the rows the experts computed (moe_forward)
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_combine_backward", kBwd, (2.0 * R + N) * D * kActBytes), [&] {
    ops.moe_combine_backward(S.dys.data(), S.dweight.data(), dm, L.ys.data(), L.weight.data(), L.order.data(),
                             L.offsets.data(), N, R, D);
  });
  if (L.route.active && exchange != nullptr) {
    moe_experts_backward_exchanged(ops, L, S, P, W, G, *exchange);
  } else {
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, kExpertDff, D), [&] {
      ops.grouped_linear_backward(S.des.data(), G(P.down, 0), S.dys.data(), L.es.data(), W(P.down), L.offsets.data(),
                                  kExperts, R, kExpertDff, D);
    });
    profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_backward", kBwd, 5.0 * double(R * kExpertDff) * kActBytes), [&] {
      ops.swiglu_backward(S.deu.data(), S.dew.data(), S.des.data(), L.eu.data(), L.ew.data(), R * kExpertDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, D, kExpertDff), [&] {
      ops.grouped_linear_backward(S.dxs.data(), G(P.gate, 0), S.deu.data(), L.xs.data(), W(P.gate), L.offsets.data(),
                                  kExperts, R, D, kExpertDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, R, D, kExpertDff), [&] {
      ops.grouped_linear_backward(S.dxs.data(), G(P.up, 0), S.dew.data(), L.xs.data(), W(P.up), L.offsets.data(),
                                  kExperts, R, D, kExpertDff, /*accumulate_dx=*/true);
    });
  }
  const core::MoeBalance balance = moe_balance(N, seq_len);
  const double* aux_grad = nullptr;  // dL/dp per gradient group (null: no balancing loss)
  if constexpr (kLoadBalance == LoadBalance::aux_loss || kMoeSeqAuxLoss > 0.0) {
    profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_balance_gradient", kBwd, 8.0 * 2 * kExperts), [&] {
      ops.moe_balance_gradient(balance, L.selected.data(), L.seq_counts.data(), loss_scale, L.aux_grad.data());
    });
    aux_grad = L.aux_grad.data();
  }
  const int aux_group_rows = int(balance.gradient_group_rows());
  const typename Backend::Stat* lse = nullptr;
  if constexpr (kMoeZLoss > 0.0) {
    lse = L.lse.data();
  }
  const double z_scale = loss_scale * kMoeZLoss * 2.0 / double(N);  // dL_z/dr = coef_z · 2 · lse · softmax(r) / N
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_route_backward", kBwd, 3.0 * N * kExperts * sizeof(float)), [&] {
    ops.moe_route_backward(S.logits.data(), S.dweight.data(), L.scores.data(), L.expert.data(), L.weight.data(),
                           aux_grad, aux_group_rows, lse, z_scale, N);
  });
  profile::timed(ops.profiler, profile::gemm(PC::gemm_router, kBwd, N, D, kExperts), [&] {
    ops.router_backward(db, G(P.router, 0), S.logits.data(), b, W(P.router), N);
  });
  profile::timed(ops.profiler, profile::memory(PC::moe_routing, "moe_scatter_add", kBwd, (double(R) + 2.0 * N) * D * kActBytes), [&] {
    ops.moe_scatter_add(db, S.dxs.data(), L.position.data(), N, D);
  });
  if constexpr (kSharedDff > 0) {
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, N, kSharedDff, D), [&] {
      ops.linear_backward(S.dss.data(), G(P.shared_down, 0), dm, L.ss.data(), W(P.shared_down), N, kSharedDff, D);
    });
    profile::timed(ops.profiler, profile::memory(PC::swiglu, "swiglu_backward", kBwd, 5.0 * double(std::int64_t(N) * kSharedDff) * kActBytes), [&] {
      ops.swiglu_backward(S.dsu.data(), S.dsw.data(), S.dss.data(), L.su.data(), L.sw.data(),
                          std::int64_t(N) * kSharedDff);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, N, D, kSharedDff), [&] {
      ops.linear_backward(db, G(P.shared_gate, 0), S.dsu.data(), b, W(P.shared_gate), N, D, kSharedDff, true);
    });
    profile::timed(ops.profiler, profile::gemm(PC::gemm_experts, kBwd, N, D, kSharedDff), [&] {
      ops.linear_backward(db, G(P.shared_up, 0), S.dsw.data(), b, W(P.shared_up), N, D, kSharedDff, true);
    });
  }
}

}  // namespace gc::tree
