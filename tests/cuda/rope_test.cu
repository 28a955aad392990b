// The CUDA RoPE kernels (cuda/rope.cuh: RoPE, separate and inside the stacked Q/K/V projection) against the CPU kernels of
// templates/cpu/rope.hpp run in double on the same inputs, rounded to T first (so for bf16 the
// reference sees exactly the values the GPU reads).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/rope.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/rope.cuh"

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

// ---- RoPE --------------------------------------------------------------------------------------

// The GPU uses the fp32 tables of gc::tree::rope_table<float>; the reference uses the same table
// values in double. in_place: out is the input buffer.
template <typename T, int kHeadDim, int kHeads>
void check_rope(bool in_place) {
  const int B = 2, seq_len = 37, heads = kHeads, head_dim = kHeadDim, half = head_dim / 2;
  const std::size_t n = std::size_t(B) * seq_len * heads * head_dim;
  std::vector<float> cos_f(std::size_t(seq_len) * half), sin_f(cos_f.size());
  gc::tree::rope_table<float>(cos_f.data(), sin_f.data(), seq_len, head_dim, 10000.0);
  const auto cos_ref = ct::to_double(cos_f), sin_ref = ct::to_double(sin_f);
  const auto x = rounded<T>(kt::random_vector(n, 21));
  const auto dy = rounded<T>(kt::random_vector(n, 22));
  std::vector<double> y_ref(n), dx_ref(n);
  gc::tree::cpu::rope_forward<double>(y_ref.data(), x.data(), cos_ref.data(), sin_ref.data(), B, seq_len, heads,
                                      head_dim);
  gc::tree::cpu::rope_backward<double>(dx_ref.data(), dy.data(), cos_ref.data(), sin_ref.data(), B, seq_len, heads,
                                       head_dim);

  auto cos_d = ct::upload(cos_f);
  auto sin_d = ct::upload(sin_f);
  auto x_d = upload_as<T>(x);
  auto dy_d = upload_as<T>(dy);
  DeviceBuffer<T> y_own(n), dx_own(n);
  DeviceBuffer<T>& y = in_place ? x_d : y_own;
  DeviceBuffer<T>& dx = in_place ? dy_d : dx_own;
  gc::tree::cuda::rope_forward<kHeadDim, kHeads>(y.data(), x_d.data(), cos_d.data(), sin_d.data(), B, seq_len);
  gc::tree::cuda::rope_backward<kHeadDim, kHeads>(dx.data(), dy_d.data(), cos_d.data(), sin_d.data(), B, seq_len);
  const std::string what = "rope " + type_name<T>() + " head_dim " + std::to_string(kHeadDim) + " heads " +
                           std::to_string(kHeads) + (in_place ? " in place" : "");
  expect_close(download_double(y), y_ref, ct::tolerance<T>(), what + " forward");
  expect_close(download_double(dx), dx_ref, ct::tolerance<T>(), what + " backward");
}

TEST(CudaRows, RopeForwardBackwardMatchCpu) {
  GC_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    check_rope<float, 96, 3>(in_place);
    check_rope<bf16, 96, 3>(in_place);
    check_rope<float, 16, 4>(in_place);
    check_rope<bf16, 16, 4>(in_place);
    check_rope<bf16, 10, 2>(in_place);  // half 5: one pair a thread (the packs of 96 and 16 are 8 or 4)
  }
}

// The stacked Q/K/V split (and its backward) against the CPU's, for two specializations.
template <typename T, int kHeadDim, int kHeads, int kKvHeads>
void check_qkv_rope() {
  const int B = 2, seq_len = 19, half = kHeadDim / 2, width = (kHeads + 2 * kKvHeads) * kHeadDim;
  const std::size_t rows = std::size_t(B) * seq_len;
  const std::size_t nq = rows * kHeads * kHeadDim, nkv = rows * kKvHeads * kHeadDim;
  std::vector<float> cos_f(std::size_t(seq_len) * half), sin_f(cos_f.size());
  gc::tree::rope_table<float>(cos_f.data(), sin_f.data(), seq_len, kHeadDim, 10000.0);
  const auto cos_ref = ct::to_double(cos_f), sin_ref = ct::to_double(sin_f);
  const auto qkv = rounded<T>(kt::random_vector(rows * width, 26));
  const auto dqr = rounded<T>(kt::random_vector(nq, 27));
  const auto dkr = rounded<T>(kt::random_vector(nkv, 28));
  const auto dv = rounded<T>(kt::random_vector(nkv, 29));
  std::vector<double> qr_ref(nq), kr_ref(nkv), v_ref(nkv), dqkv_ref(qkv.size());
  gc::tree::cpu::qkv_rope_forward<double>(qr_ref.data(), kr_ref.data(), v_ref.data(), qkv.data(), cos_ref.data(),
                                          sin_ref.data(), B, seq_len, kHeads, kKvHeads, kHeadDim);
  gc::tree::cpu::qkv_rope_backward<double>(dqkv_ref.data(), dqr.data(), dkr.data(), dv.data(), cos_ref.data(),
                                           sin_ref.data(), B, seq_len, kHeads, kKvHeads, kHeadDim);

  auto cos_d = ct::upload(cos_f);
  auto sin_d = ct::upload(sin_f);
  auto qkv_d = upload_as<T>(qkv);
  auto dqr_d = upload_as<T>(dqr);
  auto dkr_d = upload_as<T>(dkr);
  auto dv_d = upload_as<T>(dv);
  DeviceBuffer<T> qr(nq), kr(nkv), v(nkv), dqkv(qkv.size());
  gc::tree::cuda::qkv_rope_forward<kHeadDim, kHeads, kKvHeads>(qr.data(), kr.data(), v.data(), qkv_d.data(),
                                                               cos_d.data(), sin_d.data(), B, seq_len);
  gc::tree::cuda::qkv_rope_backward<kHeadDim, kHeads, kKvHeads>(dqkv.data(), dqr_d.data(), dkr_d.data(), dv_d.data(),
                                                                cos_d.data(), sin_d.data(), B, seq_len);
  const std::string what = "qkv rope " + type_name<T>() + " head_dim " + std::to_string(kHeadDim) + " heads " +
                           std::to_string(kHeads) + "/" + std::to_string(kKvHeads);
  expect_close(download_double(qr), qr_ref, ct::tolerance<T>(), what + " q");
  expect_close(download_double(kr), kr_ref, ct::tolerance<T>(), what + " k");
  EXPECT_EQ(download_double(v), v_ref) << what << ": v is copied";
  expect_close(download_double(dqkv), dqkv_ref, ct::tolerance<T>(), what + " backward");

  // The QK-norm path's v alone: out of the rows, and dv into rows that keep everything else.
  std::vector<double> v_only_ref(nkv), dqkv_v_ref = qkv;
  gc::tree::cpu::qkv_v_forward<double>(v_only_ref.data(), qkv.data(), std::int64_t(rows), kHeads, kKvHeads, kHeadDim);
  gc::tree::cpu::qkv_v_backward<double>(dqkv_v_ref.data(), dv.data(), std::int64_t(rows), kHeads, kKvHeads, kHeadDim);
  EXPECT_EQ(v_only_ref, v_ref) << what << ": the v of the QK-norm path";
  DeviceBuffer<T> v_only(nkv);
  gc::tree::cuda::qkv_v_forward<kHeadDim, kHeads, kKvHeads>(v_only.data(), qkv_d.data(), B, seq_len);
  EXPECT_EQ(download_double(v_only), v_ref) << what << ": qkv_v_forward";
  gc::tree::cuda::qkv_v_backward<kHeadDim, kHeads, kKvHeads>(qkv_d.data(), dv_d.data(), B, seq_len);
  EXPECT_EQ(download_double(qkv_d), dqkv_v_ref) << what << ": qkv_v_backward";
}

TEST(CudaRows, StackedQkvRopeMatchesCpu) {
  GC_REQUIRE_GPU();
  check_qkv_rope<float, 16, 4, 2>();
  check_qkv_rope<bf16, 16, 4, 2>();
  check_qkv_rope<bf16, 64, 3, 3>();
  check_qkv_rope<float, 10, 2, 1>();  // half 5: one pair a thread
}

}  // namespace
