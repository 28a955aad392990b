// CUDA MoE routing kernels (cuda/moe.cuh) against the CPU kernels of
// templates/cpu/moe.hpp in double on the same (T-rounded) random inputs: the
// router and top-k, the counting-sort dispatch (exactly equal), gather,
// combine, their backward, the balancing loss's mean probabilities, the
// router backward; and two runs bitwise equal.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/moe.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/moe.cuh"
#include "cuda/moe_stats.cuh"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::bf16;
using ct::DeviceBuffer;
using ct::download_double;
using ct::expect_close;
using ct::rounded;
using ct::type_name;
using ct::upload_as;
using gc::tree::RouterScoring;
using gc::tree::cpu::MoeShape;

// Routing layouts as a spec fixes them (compile-time constants of the kernels): the row width,
// experts, top-k, scoring and renormalization.
template <int D, int E, int K, RouterScoring kScore, bool kNorm>
struct Layout {
  static constexpr int kDim = D, kExperts = E, kTopK = K;
  static constexpr RouterScoring kScoring = kScore;
  static constexpr bool kNormTopk = kNorm;
  static MoeShape cpu() { return MoeShape{E, K, kScore == RouterScoring::sigmoid, kNorm}; }
  static std::string name() {
    return "E=" + std::to_string(E) + " K=" + std::to_string(K) + " D=" + std::to_string(D) +
           (kScore == RouterScoring::sigmoid ? " sigmoid" : " softmax") + (kNorm ? " norm" : "");
  }
};

template <class M>
std::vector<float> test_bias() {
  std::vector<float> bias;
  for (int e = 0; e < M::kExperts; ++e) bias.push_back(0.01f * float((e * 3) % 7 - 3));
  return bias;
}

// The router runs in fp32 (scores, weights); T only rounds the logits it reads.
// N tokens: 45 gives each thread of the dispatch at most one assignment, 700 a segment of several.
template <typename T, class M>
void check_route_and_dispatch(int N = 45) {
  constexpr int kE = M::kExperts, kK = M::kTopK;
  const MoeShape m = M::cpu();
  const bool norm = M::kNormTopk;
  const std::string what = type_name<T>() + " " + M::name();
  const auto logits = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * kE), 41, 2.0));
  const std::vector<float> bias = test_bias<M>();
  auto logits_d = upload_as<float>(logits);
  DeviceBuffer<float> bias_d = ct::upload(bias);
  DeviceBuffer<float> scores_d(static_cast<std::size_t>(N * kE)), weight_d(static_cast<std::size_t>(N * kK));
  DeviceBuffer<std::int32_t> expert_d(static_cast<std::size_t>(N * kK));
  gc::tree::cuda::moe_route_forward<M>(scores_d.data(), expert_d.data(), weight_d.data(), logits_d.data(),
                                       bias_d.data(), N);
  // Scores against the CPU in double; selection and weights against the CPU
  // applied to the GPU's own scores (a near-tie may round either way).
  std::vector<double> scores_ref(static_cast<std::size_t>(N * kE)), w_ref(static_cast<std::size_t>(N * kK));
  std::vector<std::int32_t> expert_ref(static_cast<std::size_t>(N * kK));
  gc::tree::cpu::moe_route_forward(scores_ref.data(), expert_ref.data(), w_ref.data(), logits.data(), bias.data(), N,
                                   m);
  const auto scores = download_double(scores_d);
  expect_close(scores, scores_ref, ct::tolerance<float>(), "moe route scores " + what);
  const auto expert = ct::download(expert_d);
  const auto weight = download_double(weight_d);
  for (int t = 0; t < N; ++t) {
    std::vector<std::pair<double, int>> ranked;
    for (int e = 0; e < kE; ++e) ranked.push_back({scores[std::size_t(t * kE + e)] + double(bias[std::size_t(e)]), e});
    std::stable_sort(ranked.begin(), ranked.end(), [](auto a, auto b) { return a.first > b.first; });
    double selected = 0.0;
    for (int j = 0; j < kK; ++j) {
      EXPECT_EQ(expert[std::size_t(t * kK + j)], ranked[std::size_t(j)].second) << what << " token " << t;
      selected += scores[std::size_t(t * kE + ranked[std::size_t(j)].second)];
    }
    for (int j = 0; j < kK; ++j) {
      const double w = scores[std::size_t(t * kE + ranked[std::size_t(j)].second)] / (norm ? selected : 1.0);
      EXPECT_NEAR(weight[std::size_t(t * kK + j)], w, ct::tolerance<T>() * w) << what;
    }
  }

  // Dispatch: the same stable counting sort as the CPU's, exactly.
  DeviceBuffer<std::int32_t> order_d(static_cast<std::size_t>(N * kK)), position_d(static_cast<std::size_t>(N * kK));
  DeviceBuffer<std::int64_t> offsets_d(kE + 1), counts_d(kE);
  gc::tree::cuda::moe_dispatch<M>(order_d.data(), position_d.data(), offsets_d.data(), counts_d.data(), expert_d.data(),
                                  N);
  std::vector<std::int32_t> order_ref(static_cast<std::size_t>(N * kK)), position_ref(static_cast<std::size_t>(N * kK));
  std::vector<std::int64_t> offsets_ref(kE + 1);
  gc::tree::cpu::moe_dispatch(order_ref.data(), position_ref.data(), offsets_ref.data(), expert.data(), N, kE, kK);
  EXPECT_EQ(ct::download(order_d), order_ref) << what;
  EXPECT_EQ(ct::download(position_d), position_ref) << what;
  EXPECT_EQ(ct::download(offsets_d), offsets_ref) << what;
}

TEST(CudaMoe, RouteAndDispatchMatchTheCpu) {
  GC_REQUIRE_GPU();
  check_route_and_dispatch<float, Layout<24, 7, 3, RouterScoring::softmax, false>>();
  check_route_and_dispatch<bf16, Layout<24, 7, 3, RouterScoring::softmax, true>>();
  check_route_and_dispatch<float, Layout<24, 7, 3, RouterScoring::sigmoid, false>>();
  check_route_and_dispatch<bf16, Layout<24, 7, 3, RouterScoring::sigmoid, true>>();
  check_route_and_dispatch<float, Layout<24, 16, 4, RouterScoring::softmax, true>>();
  check_route_and_dispatch<bf16, Layout<24, 16, 4, RouterScoring::sigmoid, false>>();
  check_route_and_dispatch<float, Layout<24, 16, 4, RouterScoring::softmax, false>>(700);
}

// A fixed routing of N tokens (distinct experts per token) and its dispatch; with a capacity
// (moe.capacity_factor) per expert and sequence of seq_len rows, the assignments kept first.
struct Routing {
  std::vector<std::int32_t> selected, expert, order, position;
  std::vector<std::int64_t> offsets, dropped;
};

template <class M>
Routing make_routing(int N, int seq_len = 1, int capacity = 0) {
  constexpr int kE = M::kExperts, kK = M::kTopK;
  Routing r;
  for (int t = 0; t < N; ++t) {
    for (int j = 0; j < kK; ++j) r.selected.push_back((t * 5 + j * 2 + (t % 3)) % kE);
  }
  r.expert = r.selected;
  r.dropped.assign(static_cast<std::size_t>(N / seq_len * kE), 0);
  if (capacity > 0) {
    gc::tree::cpu::moe_apply_capacity(r.expert.data(), r.dropped.data(), r.selected.data(), N, seq_len, kE, kK,
                                      capacity);
  }
  r.order.resize(r.expert.size());
  r.position.resize(r.expert.size());
  r.offsets.resize(kE + 1);
  gc::tree::cpu::moe_dispatch(r.order.data(), r.position.data(), r.offsets.data(), r.expert.data(), N, kE, kK);
  return r;
}

// Capacity on the GPU: the assignments kept, positions -1 and dropped counts of the CPU's, and
// the dispatch of what is kept.
template <class M>
void check_capacity(int N, int seq_len, int capacity) {
  constexpr int kE = M::kExperts, kK = M::kTopK;
  const std::string what = M::name() + " capacity " + std::to_string(capacity);
  const Routing r = make_routing<M>(N, seq_len, capacity);
  std::int64_t lost = 0;
  for (std::int64_t d : r.dropped) lost += d;
  EXPECT_GT(lost, 0) << what << ": nothing dropped, the case tests nothing";
  auto selected_d = ct::upload(r.selected);
  DeviceBuffer<std::int32_t> kept_d(r.selected.size()), order_d(r.selected.size());
  auto position_d = ct::upload(std::vector<std::int32_t>(r.selected.size(), 7));
  DeviceBuffer<std::int64_t> dropped_d(r.dropped.size()), counts_d(kE), offsets_d(kE + 1);
  gc::tree::cuda::moe_apply_capacity<M>(kept_d.data(), position_d.data(), dropped_d.data(), selected_d.data(), N,
                                        seq_len, capacity);
  EXPECT_EQ(ct::download(kept_d), r.expert) << what;
  EXPECT_EQ(ct::download(dropped_d), r.dropped) << what;
  gc::tree::cuda::moe_dispatch<M>(order_d.data(), position_d.data(), offsets_d.data(), counts_d.data(), kept_d.data(),
                                  N);
  EXPECT_EQ(ct::download(offsets_d), r.offsets) << what;
  EXPECT_EQ(ct::download(position_d), r.position) << what;
  auto order = ct::download(order_d);
  order.resize(std::size_t(r.offsets[kE]));
  auto order_ref = r.order;
  order_ref.resize(std::size_t(r.offsets[kE]));
  EXPECT_EQ(order, order_ref) << what;
  (void)kK;
}

TEST(CudaMoe, CapacityDropsAsTheCpuDoes) {
  GC_REQUIRE_GPU();
  check_capacity<Layout<24, 7, 3, RouterScoring::softmax, false>>(33, 11, 3);
  check_capacity<Layout<24, 5, 2, RouterScoring::softmax, false>>(40, 8, 2);
}

template <typename T, class M>
void check_gather_combine(int capacity = 0) {
  constexpr int D = M::kDim, kK = M::kTopK;
  const int N = 33, seq_len = 11;
  const std::string what = type_name<T>() + " " + M::name() + (capacity > 0 ? " capacity" : "");
  const Routing r = make_routing<M>(N, seq_len, capacity);
  // A: the rows kept (every assignment when dropless).
  const int A = int(r.offsets[M::kExperts]), assignments = N * kK;
  auto order_d = ct::upload(r.order);
  auto position_d = ct::upload(r.position);
  const auto x = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * D), 51));
  const auto ys = rounded<T>(kt::random_normal(static_cast<std::size_t>(A * D), 52));
  const auto w = rounded<float>(kt::random_vector(static_cast<std::size_t>(assignments), 53));
  const auto dout = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * D), 54));
  const auto prior = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * D), 55));
  auto x_d = upload_as<T>(x), ys_d = upload_as<T>(ys), dout_d = upload_as<T>(dout);
  auto w_d = upload_as<float>(w);  // the router's weights are fp32

  DeviceBuffer<T> xs_d(static_cast<std::size_t>(A * D));
  gc::tree::cuda::moe_gather<M>(xs_d.data(), x_d.data(), order_d.data(), A);
  std::vector<double> xs_ref(static_cast<std::size_t>(A * D));
  gc::tree::cpu::moe_gather(xs_ref.data(), x.data(), r.order.data(), A, D, kK);
  EXPECT_EQ(download_double(xs_d), xs_ref) << what;  // a copy: exact

  // Expert parallelism's permutation of exchanged rows (cuda::gather_rows): a reversed,
  // strided selection of the rows, against the CPU's gather with top_k 1.
  std::vector<std::int32_t> rows;
  for (int p = A - 1; p >= 0; p -= 3) rows.push_back(p);
  const auto rows_d = ct::upload(rows);
  const std::int64_t n = std::int64_t(rows.size());
  DeviceBuffer<T> picked_d(static_cast<std::size_t>(n * D));
  gc::tree::cuda::gather_rows(picked_d.data(), ys_d.data(), rows_d.data(), n, D);
  std::vector<double> picked_ref(static_cast<std::size_t>(n * D));
  gc::tree::cpu::moe_gather(picked_ref.data(), ys.data(), rows.data(), n, D, 1);
  EXPECT_EQ(download_double(picked_d), picked_ref) << "gather_rows " << what;  // a copy: exact

  auto out_d = upload_as<T>(prior);
  gc::tree::cuda::moe_combine<M>(out_d.data(), ys_d.data(), w_d.data(), position_d.data(), N, true);
  std::vector<double> out_ref = prior;
  gc::tree::cpu::moe_combine(out_ref.data(), ys.data(), w.data(), r.position.data(), N, D, kK, true);
  expect_close(download_double(out_d), out_ref, ct::tolerance<T>(), "moe combine " + what);

  DeviceBuffer<T> dys_d(static_cast<std::size_t>(A * D));
  auto dweight_d = upload_as<float>(std::vector<double>(static_cast<std::size_t>(assignments), 3.0));
  gc::tree::cuda::moe_combine_backward<M>(dys_d.data(), dweight_d.data(), dout_d.data(), ys_d.data(), w_d.data(),
                                          order_d.data(), A, assignments);
  std::vector<double> dys_ref(static_cast<std::size_t>(A * D)), dweight_ref(static_cast<std::size_t>(assignments));
  gc::tree::cpu::moe_combine_backward(dys_ref.data(), dweight_ref.data(), dout.data(), ys.data(), w.data(),
                                      r.order.data(), A, assignments, D, kK);
  expect_close(download_double(dys_d), dys_ref, ct::tolerance<T>(), "moe combine backward dys " + what);
  expect_close(download_double(dweight_d), dweight_ref, ct::tolerance<T>(), "moe combine backward dweight " + what);

  auto dx_d = upload_as<T>(prior);
  gc::tree::cuda::moe_scatter_add<M>(dx_d.data(), ys_d.data(), position_d.data(), N);
  std::vector<double> dx_ref = prior;
  gc::tree::cpu::moe_scatter_add(dx_ref.data(), ys.data(), r.position.data(), N, D, kK);
  expect_close(download_double(dx_d), dx_ref, ct::tolerance<T>(), "moe scatter add " + what);

  // Determinism: the same launch twice gives the same bits.
  DeviceBuffer<T> again_d(static_cast<std::size_t>(A * D));
  DeviceBuffer<float> dweight2_d(static_cast<std::size_t>(assignments));
  gc::tree::cuda::moe_combine_backward<M>(again_d.data(), dweight2_d.data(), dout_d.data(), ys_d.data(), w_d.data(),
                                          order_d.data(), A, assignments);
  EXPECT_TRUE(ct::bitwise_equal(ct::download(dweight_d), ct::download(dweight2_d))) << what;
}

TEST(CudaMoe, GatherCombineAndTheirBackwardMatchTheCpu) {
  GC_REQUIRE_GPU();
  // Rows below and above one warp's width, two top-k.
  check_gather_combine<float, Layout<24, 7, 3, RouterScoring::softmax, false>>();
  check_gather_combine<bf16, Layout<24, 7, 3, RouterScoring::softmax, false>>();
  check_gather_combine<float, Layout<70, 5, 2, RouterScoring::softmax, false>>();
  check_gather_combine<bf16, Layout<70, 5, 2, RouterScoring::softmax, false>>();
  // Dropped assignments (capacity 3 per expert and sequence of 11 rows): no row, no output, no dx.
  check_gather_combine<float, Layout<24, 7, 3, RouterScoring::softmax, false>>(3);
  check_gather_combine<bf16, Layout<70, 5, 2, RouterScoring::softmax, false>>(3);
}

// In fp32 (the router's precision on every backend); T rounds the inputs. aux_rows: the
// balancing losses' groups of rows (0: none; N: one group; 7: four "sequences"); z: the z-loss
// (softmax routers).
template <typename T, class M>
void check_route_backward(int aux_rows, bool z) {
  const int N = 28;
  constexpr int kE = M::kExperts, kK = M::kTopK;
  const MoeShape m = M::cpu();
  const int groups = aux_rows > 0 ? N / aux_rows : 1;
  const std::string what = type_name<T>() + " " + M::name() + (aux_rows > 0 ? " aux/" + std::to_string(aux_rows) : "") +
                           (z ? " z" : "");
  const auto logits = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * kE), 61, 1.5));
  std::vector<double> scores(static_cast<std::size_t>(N * kE)), w(static_cast<std::size_t>(N * kK));
  std::vector<std::int32_t> expert(static_cast<std::size_t>(N * kK));
  gc::tree::cpu::moe_route_forward(scores.data(), expert.data(), w.data(), logits.data(),
                                   static_cast<const float*>(nullptr), N, m);
  scores = rounded<T>(scores);
  w = rounded<T>(w);
  const auto dweight = rounded<T>(kt::random_normal(static_cast<std::size_t>(N * kK), 62));
  const auto aux_grad = kt::random_normal(static_cast<std::size_t>(groups * kE), 63, 0.1);
  auto scores_d = upload_as<float>(scores), w_d = upload_as<float>(w), dweight_d = upload_as<float>(dweight);
  auto logits_d = upload_as<float>(logits);
  auto expert_d = ct::upload(expert);
  auto aux_d = ct::upload(aux_grad);
  // The z-loss's lse and coef · Σ lse² / N added to a layer's balancing-loss slot (which holds
  // 0.25 already), on the GPU against the CPU.
  DeviceBuffer<float> lse_d(static_cast<std::size_t>(N));
  DeviceBuffer<double> squares_d(static_cast<std::size_t>(N));
  auto aux_slot_d = ct::upload(std::vector<double>{0.25});
  std::vector<double> lse(static_cast<std::size_t>(N));
  const double total_ref = gc::tree::cpu::moe_router_lse(lse.data(), logits.data(), N, kE);
  if (z) {
    const double coef = 0.03;
    gc::tree::cuda::moe_router_lse<M>(lse_d.data(), squares_d.data(), aux_slot_d.data(), coef, logits_d.data(), N);
    expect_close(download_double(lse_d), lse, 1e-6, "moe router lse " + what);
    expect_close(ct::download(aux_slot_d), std::vector<double>{0.25 + coef * total_ref / double(N)}, 1e-6,
                 "moe router z-loss " + what);
    lse = download_double(lse_d);
  }
  const double z_scale = 0.02;
  DeviceBuffer<float> dlogits_d(static_cast<std::size_t>(N * kE));
  gc::tree::cuda::moe_route_backward<M>(dlogits_d.data(), dweight_d.data(), scores_d.data(), expert_d.data(),
                                        w_d.data(), aux_rows > 0 ? aux_d.data() : nullptr, aux_rows > 0 ? aux_rows : N,
                                        z ? lse_d.data() : nullptr, z_scale, N);
  std::vector<double> ref(static_cast<std::size_t>(N * kE));
  gc::tree::cpu::moe_route_backward(ref.data(), dweight.data(), scores.data(), expert.data(), w.data(),
                                    aux_rows > 0 ? aux_grad.data() : nullptr, aux_rows > 0 ? aux_rows : N,
                                    z ? lse.data() : nullptr, z_scale, N, m);
  expect_close(download_double(dlogits_d), ref, ct::tolerance<float>(), "moe route backward " + what);

  if (aux_rows > 0) {
    DeviceBuffer<double> mean_d(static_cast<std::size_t>(groups * kE)), row_total_d(static_cast<std::size_t>(N));
    gc::tree::cuda::moe_mean_probs<M>(mean_d.data(), row_total_d.data(), scores_d.data(), N, aux_rows);
    std::vector<double> mean_ref(static_cast<std::size_t>(groups * kE));
    gc::tree::cpu::moe_mean_probs(mean_ref.data(), scores.data(), N, aux_rows, m);
    expect_close(ct::download(mean_d), mean_ref, 1e-6, "moe mean probs " + what);
    DeviceBuffer<std::int64_t> counts_d(static_cast<std::size_t>(groups * kE));
    gc::tree::cuda::moe_group_counts<M>(counts_d.data(), expert_d.data(), N, aux_rows);
    std::vector<std::int64_t> counts_ref(static_cast<std::size_t>(groups * kE));
    gc::tree::cpu::moe_group_counts(counts_ref.data(), expert.data(), N, aux_rows, kE, kK);
    EXPECT_EQ(ct::download(counts_d), counts_ref) << "moe group counts " << what;
  }
}

TEST(CudaMoe, RouteBackwardAndMeanProbsMatchTheCpu) {
  GC_REQUIRE_GPU();
  for (int aux_rows : {0, 28, 7}) {
    check_route_backward<float, Layout<24, 7, 3, RouterScoring::softmax, false>>(aux_rows, false);
    check_route_backward<bf16, Layout<24, 7, 3, RouterScoring::softmax, true>>(aux_rows, false);
    check_route_backward<float, Layout<24, 7, 3, RouterScoring::sigmoid, true>>(aux_rows, false);
    check_route_backward<bf16, Layout<24, 7, 3, RouterScoring::sigmoid, false>>(aux_rows, false);
    check_route_backward<float, Layout<24, 12, 2, RouterScoring::sigmoid, true>>(aux_rows, false);
    check_route_backward<bf16, Layout<24, 12, 2, RouterScoring::softmax, false>>(aux_rows, false);
    // The z-loss (softmax routers), alone and with the balancing losses.
    check_route_backward<float, Layout<24, 7, 3, RouterScoring::softmax, true>>(aux_rows, true);
    check_route_backward<bf16, Layout<24, 12, 2, RouterScoring::softmax, false>>(aux_rows, true);
  }
}

// The routing bookkeeping (cuda/moe_stats.cuh) runs core/moe_balance.hpp on the device: the same
// values as the host's call (read back only by this test).
TEST(CudaMoe, RoutingBookkeepingOnTheDeviceEqualsTheHostsCall) {
  GC_REQUIRE_GPU();
  gc::tree::core::MoeBalance b;
  b.experts = 4;
  b.top_k = 2;
  b.rows = 12;
  b.seq_len = 4;  // 3 sequences
  b.aux_coef = 0.01;
  b.seq_coef = 0.03;
  const std::vector<std::int64_t> offsets = {0, 5, 5, 14, 20}, dropped = {1, 0, 2, 0, 0, 1, 0, 0, 1, 0, 0, 1};
  const std::vector<std::int64_t> seq_counts = {3, 1, 3, 1, 2, 2, 2, 2, 1, 0, 4, 3};
  const auto mean_prob = kt::random_normal(4, 71, 0.2), seq_mean_prob = kt::random_normal(12, 72, 0.2);
  std::vector<double> selected(4), tally(5, 2.0), aux = {0.125}, grad(12), window(5, 1.0);
  std::vector<float> bias = {0.0f, 0.25f, -0.25f, 0.5f};
  gc::tree::core::count_selected(b, offsets.data(), dropped.data(), selected.data(), tally.data());
  gc::tree::core::add_balance_loss(b, selected.data(), mean_prob.data(), seq_counts.data(), seq_mean_prob.data(),
                                   aux.data());
  gc::tree::core::balance_gradient(b, selected.data(), seq_counts.data(), 0.5, grad.data());
  gc::tree::core::close_step(4, tally.data(), window.data(), bias.data(), 0.0625);

  auto offsets_d = ct::upload(offsets), dropped_d = ct::upload(dropped), counts_d = ct::upload(seq_counts);
  auto mean_d = ct::upload(mean_prob), seq_mean_d = ct::upload(seq_mean_prob);
  auto selected_d = ct::upload(std::vector<double>(4, -1.0)), tally_d = ct::upload(std::vector<double>(5, 2.0));
  auto aux_d = ct::upload(std::vector<double>{0.125}), grad_d = ct::upload(std::vector<double>(12, -1.0));
  auto window_d = ct::upload(std::vector<double>(5, 1.0));
  auto bias_d = ct::upload(std::vector<float>{0.0f, 0.25f, -0.25f, 0.5f});
  gc::tree::cuda::moe_record_routing(b, offsets_d.data(), dropped_d.data(), selected_d.data(), tally_d.data(),
                                     mean_d.data(), counts_d.data(), seq_mean_d.data(), aux_d.data());
  gc::tree::cuda::moe_balance_gradient(b, selected_d.data(), counts_d.data(), 0.5, grad_d.data());
  gc::tree::cuda::moe_close_step(4, tally_d.data(), window_d.data(), bias_d.data(), 0.0625);
  EXPECT_EQ(ct::download(selected_d), selected);
  EXPECT_EQ(ct::download(tally_d), tally);
  // The losses and their gradient to rounding (a GPU may contract a·b + c into one FMA); the
  // counts, tallies and the bias exactly.
  expect_close(ct::download(aux_d), aux, 1e-12, "balancing loss on the device");
  expect_close(ct::download(grad_d), grad, 1e-12, "balancing gradient on the device");
  EXPECT_EQ(ct::download(window_d), window);
  EXPECT_EQ(ct::download(bias_d), bias);
  // A training forward's balancing losses join the step's accumulator weighted, in layer order.
  auto acc_d = ct::upload(std::vector<double>{1.0, 0.5});
  auto layers_d = ct::upload(std::vector<double>{0.25, 0.0, 0.125});
  gc::tree::cuda::add_weighted_sum(acc_d.data() + 1, layers_d.data(), 3, 0.5);
  EXPECT_EQ(ct::download(acc_d), (std::vector<double>{1.0, 0.5 + 0.5 * 0.375}));
}

}  // namespace
