// The Hopper attention (cuda/attention_sm90.cuh forward, cuda/attention_sm90_backward.cuh backward,
// warpgroup MMAs) against the reference kernels (cuda/attention.cuh, checked against the CPU backend
// in attention_test.cu) on the same random bf16 inputs: head_dim 64 and 128, GQA and MHA, sequence
// lengths that are not multiples of the 64-row tiles, several batches, peaked softmax rows;
// bit-identical reruns. Under the emulator this checks the kernels against our reading of wgmma; on
// a GPU (the kit's kernels row) the real instructions.
#include "cuda/attention_sm90.cuh"

#include "cuda/attention_sm90_backward.cuh"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cuda/attention.cuh"
#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;

template <int H, int KV, int HD, int kScaleThousandths>
using Shape = ct::AttentionShape<H, KV, HD, kScaleThousandths>;
using Gqa64 = Shape<4, 2, 64, 125>;
using Mha128 = Shape<2, 2, 128, 88>;
using Gqa64x4 = Shape<8, 2, 64, 125>;  // four query heads per kv head

static_assert(gc::tree::cuda::attention_sm90_supported<Gqa64, bf16>());
static_assert(!gc::tree::cuda::attention_sm90_supported<Gqa64, float>());
static_assert(!gc::tree::cuda::attention_sm90_supported<Shape<2, 2, 32, 177>, bf16>());

struct Forward {
  std::vector<bf16> out;
  std::vector<float> lse;
};

// kSm90: the wgmma forward with WG warpgroups a block; else the reference kernels.
template <class S, bool kSm90, int WG = 2>
Forward run(const std::vector<bf16>& q, const std::vector<bf16>& k, const std::vector<bf16>& v, int batch,
            int seq_len) {
  auto q_d = ct::upload(q), k_d = ct::upload(k), v_d = ct::upload(v);
  ct::DeviceBuffer<bf16> out(q.size());
  ct::DeviceBuffer<float> lse(std::size_t(batch) * S::kHeads * seq_len);
  if constexpr (kSm90) {
    gc::tree::cuda::attention_sm90_forward<S, WG>(out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch,
                                                  seq_len);
  } else {
    gc::tree::cuda::attention_forward<S>(out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch, seq_len);
  }
  return {ct::download(out), ct::download(lse)};
}

template <class S>
void check_against_reference(int batch, int seq_len, unsigned seed, double qk_std = 1.0) {
  const std::size_t q_size = std::size_t(batch) * seq_len * S::kHeads * S::kHeadDim;
  const std::size_t kv_size = std::size_t(batch) * seq_len * S::kKvHeads * S::kHeadDim;
  const auto q = ct::convert<bf16>(kt::random_normal(q_size, seed, qk_std));
  const auto k = ct::convert<bf16>(kt::random_normal(kv_size, seed + 1, qk_std));
  const auto v = ct::convert<bf16>(kt::random_normal(kv_size, seed + 2));
  const Forward fast = run<S, true>(q, k, v, batch, seq_len), ref = run<S, false>(q, k, v, batch, seq_len);
  const std::string tag = " B=" + std::to_string(batch) + " T=" + std::to_string(seq_len) +
                          " H=" + std::to_string(S::kHeads) + " KV=" + std::to_string(S::kKvHeads) +
                          " hd=" + std::to_string(S::kHeadDim);
  const double out_err = kt::rel_error(ct::to_double(fast.out), ct::to_double(ref.out));
  const double lse_err = kt::rel_error(ct::to_double(fast.lse), ct::to_double(ref.lse));
  kt::report("sm90 attention out" + tag, out_err);
  kt::report("sm90 attention lse" + tag, lse_err);
  // As the mma.sync kernels (flash_attention_test.cu): bf16 outputs from bf16-rounded P.
  EXPECT_LT(out_err, 1e-2) << tag;
  EXPECT_LT(lse_err, 1e-4) << tag;
  const Forward again = run<S, true>(q, k, v, batch, seq_len);
  EXPECT_TRUE(ct::bitwise_equal(again.out, fast.out)) << "rerun" << tag;
  // One warpgroup a block: the same products and softmax per row, so the same bits.
  const Forward one = run<S, true, 1>(q, k, v, batch, seq_len);
  EXPECT_TRUE(ct::bitwise_equal(one.out, fast.out)) << "one warpgroup" << tag;
  EXPECT_TRUE(ct::bitwise_equal(one.lse, fast.lse)) << "one warpgroup" << tag;
}

TEST(CudaAttentionSm90, ForwardMatchesTheReferenceKernels) {
  GC_REQUIRE_GPU();
  check_against_reference<Gqa64>(2, 37, 30);
  check_against_reference<Gqa64>(1, 150, 31, 1.5);  // peaked rows: the online rescaling matters
  check_against_reference<Mha128>(1, 130, 32);
  // The second warpgroup of a 128-row block with some rows past the end (100, and 200 = a whole
  // block and 72 rows of the next), four query heads per kv head.
  check_against_reference<Gqa64x4>(1, 100, 33);
  check_against_reference<Mha128>(1, 200, 34);
}

// The backward of both implementations from the same forward outputs (the reference forward's, so
// that only the backward differs) and the same upstream gradient.
struct Backward {
  std::vector<bf16> dq, dk, dv;
};

// kSm90: the wgmma backward with WG warpgroups a block; else the reference kernels.
template <class S, bool kSm90, int WG = 2>
Backward run_backward(const std::vector<bf16>& q, const std::vector<bf16>& k, const std::vector<bf16>& v,
                      const std::vector<bf16>& dout, int batch, int seq_len) {
  auto q_d = ct::upload(q), k_d = ct::upload(k), v_d = ct::upload(v), do_d = ct::upload(dout);
  ct::DeviceBuffer<bf16> out(q.size()), dq(q.size()), dk(k.size()), dv(v.size());
  ct::DeviceBuffer<float> lse(std::size_t(batch) * S::kHeads * seq_len),
      scratch(gc::tree::cuda::attention_backward_scratch_floats<S>(batch, seq_len));
  gc::tree::cuda::attention_forward<S>(out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch, seq_len);
  if constexpr (kSm90) {
    gc::tree::cuda::attention_sm90_backward<S, WG>(dq.data(), dk.data(), dv.data(), scratch.data(), do_d.data(),
                                                   out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch,
                                                   seq_len);
  } else {
    gc::tree::cuda::attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), do_d.data(), out.data(),
                                          lse.data(), q_d.data(), k_d.data(), v_d.data(), batch, seq_len);
  }
  return {ct::download(dq), ct::download(dk), ct::download(dv)};
}

template <class S>
void check_backward_against_reference(int batch, int seq_len, unsigned seed, double qk_std = 1.0) {
  const std::size_t q_size = std::size_t(batch) * seq_len * S::kHeads * S::kHeadDim;
  const std::size_t kv_size = std::size_t(batch) * seq_len * S::kKvHeads * S::kHeadDim;
  const auto q = ct::convert<bf16>(kt::random_normal(q_size, seed, qk_std));
  const auto k = ct::convert<bf16>(kt::random_normal(kv_size, seed + 1, qk_std));
  const auto v = ct::convert<bf16>(kt::random_normal(kv_size, seed + 2));
  const auto dout = ct::convert<bf16>(kt::random_normal(q_size, seed + 3));
  const Backward fast = run_backward<S, true>(q, k, v, dout, batch, seq_len);
  const Backward ref = run_backward<S, false>(q, k, v, dout, batch, seq_len);
  const std::string tag = " B=" + std::to_string(batch) + " T=" + std::to_string(seq_len) +
                          " H=" + std::to_string(S::kHeads) + " KV=" + std::to_string(S::kKvHeads) +
                          " hd=" + std::to_string(S::kHeadDim);
  const auto check = [&](const char* name, const std::vector<bf16>& got, const std::vector<bf16>& want) {
    const double err = kt::rel_error(ct::to_double(got), ct::to_double(want));
    kt::report(std::string("sm90 attention ") + name + tag, err);
    // As the mma.sync backward (flash_attention_test.cu): bf16 outputs from bf16-rounded P and dS;
    // a wrong layout, mask or scale gives O(1).
    EXPECT_LT(err, 1e-2) << name << tag;
  };
  check("dq", fast.dq, ref.dq);
  check("dk", fast.dk, ref.dk);
  check("dv", fast.dv, ref.dv);
  const Backward again = run_backward<S, true>(q, k, v, dout, batch, seq_len);
  EXPECT_TRUE(ct::bitwise_equal(again.dq, fast.dq)) << "rerun dq" << tag;
  EXPECT_TRUE(ct::bitwise_equal(again.dk, fast.dk)) << "rerun dk" << tag;
  EXPECT_TRUE(ct::bitwise_equal(again.dv, fast.dv)) << "rerun dv" << tag;
  // One warpgroup a block: every row's sums in the same order, so the same bits.
  const Backward one = run_backward<S, true, 1>(q, k, v, dout, batch, seq_len);
  EXPECT_TRUE(ct::bitwise_equal(one.dq, fast.dq)) << "one warpgroup dq" << tag;
  EXPECT_TRUE(ct::bitwise_equal(one.dk, fast.dk)) << "one warpgroup dk" << tag;
  EXPECT_TRUE(ct::bitwise_equal(one.dv, fast.dv)) << "one warpgroup dv" << tag;
}

TEST(CudaAttentionSm90, BackwardMatchesTheReferenceKernels) {
  GC_REQUIRE_GPU();
  // GQA (two query heads per kv head: the dK/dV block walks both), a partial last tile.
  check_backward_against_reference<Gqa64>(2, 37, 40);
  // Several 64-row tiles on both sides, peaked rows, a partial last tile.
  check_backward_against_reference<Gqa64>(1, 150, 41, 1.5);
  check_backward_against_reference<Mha128>(1, 130, 42);
  // Whole tiles only (128 = 2 × 64) and four query heads per kv head for the dK/dV block to walk.
  check_backward_against_reference<Gqa64x4>(1, 128, 43);
  // The second warpgroup's rows (keys in dK/dV, queries in dQ) straddling the end.
  check_backward_against_reference<Gqa64x4>(1, 100, 44);
  check_backward_against_reference<Mha128>(1, 200, 45);
}

}  // namespace
