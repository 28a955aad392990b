// The tensor-core attention (cuda/flash_attention.cuh) against the reference kernels
// (cuda/attention.cuh, themselves checked against the CPU backend in attention_test.cu): both run
// forward and backward on the same random bf16 inputs; the outputs agree to bf16 accuracy (the
// tensor-core path also rounds P and dS to bf16). Shapes cover MHA, GQA, MQA, head_dim 16 to 128,
// sequence lengths that are not multiples of the tiles, several batches, and peaked softmax rows.
#include "cuda/flash_attention.cuh"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/attention.cuh"
#include "cuda_test_util.hpp"
#include "runtime/error.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;

template <int H, int KV, int HD, int kScaleThousandths>
using Shape = ct::AttentionShape<H, KV, HD, kScaleThousandths>;
using Mha32 = Shape<3, 3, 32, 177>;
using Gqa64 = Shape<4, 2, 64, 125>;
using Mqa96 = Shape<2, 1, 96, 102>;
using Gqa128 = Shape<4, 2, 128, 88>;
using Mha16 = Shape<2, 2, 16, 250>;

static_assert(gc::tree::cuda::flash_attention_supported<Gqa64, bf16>());
static_assert(!gc::tree::cuda::flash_attention_supported<Gqa64, float>());
static_assert(!gc::tree::cuda::flash_attention_supported<Shape<2, 2, 40, 158>, bf16>());

struct Outputs {
  std::vector<bf16> out, dq, dk, dv;
  std::vector<float> lse;
};

template <class S>
struct Problem {
  int batch, seq_len;
  std::size_t q_size, kv_size, lse_size;
  std::vector<bf16> q, k, v, dout;
  Problem(int batch_, int seq_len_, unsigned seed, double qk_std) : batch(batch_), seq_len(seq_len_) {
    q_size = std::size_t(batch) * seq_len * S::kHeads * S::kHeadDim;
    kv_size = std::size_t(batch) * seq_len * S::kKvHeads * S::kHeadDim;
    lse_size = std::size_t(batch) * S::kHeads * seq_len;
    q = ct::convert<bf16>(kt::random_normal(q_size, seed, qk_std));
    k = ct::convert<bf16>(kt::random_normal(kv_size, seed + 1, qk_std));
    v = ct::convert<bf16>(kt::random_normal(kv_size, seed + 2));
    dout = ct::convert<bf16>(kt::random_normal(q_size, seed + 3));
  }

  template <bool kFlash>
  Outputs run() const {
    auto q_d = ct::upload(q), k_d = ct::upload(k), v_d = ct::upload(v), do_d = ct::upload(dout);
    ct::DeviceBuffer<bf16> out(q_size), dq(q_size), dk(kv_size), dv(kv_size);
    ct::DeviceBuffer<float> lse(lse_size),
        scratch(gc::tree::cuda::attention_backward_scratch_floats<S>(batch, seq_len));
    if constexpr (kFlash) {
      gc::tree::cuda::flash_attention_forward<S>(out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch,
                                                 seq_len);
      gc::tree::cuda::flash_attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), do_d.data(),
                                                  out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch,
                                                  seq_len);
    } else {
      gc::tree::cuda::attention_forward<S>(out.data(), lse.data(), q_d.data(), k_d.data(), v_d.data(), batch, seq_len);
      gc::tree::cuda::attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), do_d.data(), out.data(),
                                            lse.data(), q_d.data(), k_d.data(), v_d.data(), batch, seq_len);
    }
    return {ct::download(out), ct::download(dq), ct::download(dk), ct::download(dv), ct::download(lse)};
  }
};

template <class S>
void check_against_reference(int batch, int seq_len, unsigned seed, double qk_std = 1.0) {
  const Problem<S> pr(batch, seq_len, seed, qk_std);
  const Outputs fast = pr.template run<true>(), ref = pr.template run<false>();
  const std::string tag = " B=" + std::to_string(batch) + " T=" + std::to_string(seq_len) +
                          " H=" + std::to_string(S::kHeads) + " KV=" + std::to_string(S::kKvHeads) +
                          " hd=" + std::to_string(S::kHeadDim);
  const auto check = [&](const char* name, const auto& got, const auto& want, double tol) {
    const double err = kt::rel_error(ct::to_double(got), ct::to_double(want));
    kt::report(std::string("flash attention ") + name + tag, err);
    EXPECT_LT(err, tol) << name << tag;
  };
  // bf16 outputs (relative rounding 2^-9) from bf16-rounded P and dS: measured errors are
  // 1.4e-3 to 3e-3 (emulator); a wrong fragment, mask or scale gives O(1).
  check("out", fast.out, ref.out, 1e-2);
  check("lse", fast.lse, ref.lse, 1e-4);
  check("dv", fast.dv, ref.dv, 1e-2);
  check("dq", fast.dq, ref.dq, 1e-2);
  check("dk", fast.dk, ref.dk, 1e-2);
}

TEST(CudaFlashAttention, MatchesTheReferenceKernels) {
  GC_REQUIRE_GPU();
  check_against_reference<Mha32>(2, 37, 10);
  check_against_reference<Gqa64>(1, 150, 20, 1.5);  // peaked rows: the online rescaling matters
  check_against_reference<Mha16>(1, 65, 56);
}

TEST(CudaFlashAttention, OtherHeadDimsMatchTheReferenceKernels) {
  GC_REQUIRE_GPU();
  check_against_reference<Mqa96>(2, 70, 88);
  check_against_reference<Gqa128>(1, 97, 168);
  // Several streamed tiles of 32 rows per block and kv head, two sequences, a partial last tile.
  check_against_reference<Gqa128>(2, 161, 170);
}

TEST(CudaFlashAttention, SingleTokenMatchesTheReferenceKernels) {
  GC_REQUIRE_GPU();
  const Problem<Gqa64> pr(2, 1, 30, 1.0);
  const Outputs fast = pr.run<true>(), ref = pr.run<false>();
  EXPECT_LT(kt::rel_error(ct::to_double(fast.out), ct::to_double(ref.out)), 1e-2);
  EXPECT_LT(kt::rel_error(ct::to_double(fast.dv), ct::to_double(ref.dv)), 1e-2);
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST(CudaFlashAttention, IsBitwiseDeterministic) {
  GC_REQUIRE_GPU();
  const Problem<Gqa64> pr(1, 130, 50, 1.0);
  const Outputs a = pr.run<true>(), b = pr.run<true>();
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
}

// The delta pass in 16-byte packs (attention_backward_delta, which both tensor-core backwards run)
// against the warp-per-row kernel, on random dO and O: head_dim 16, 64 and 128 (2, 8 and 16
// lanes a row), a row count no warp's rows divide, and head_dim 96 (12 lanes: the warp kernel).
template <class S>
void check_delta(int batch, int seq_len, unsigned seed) {
  const std::size_t n = std::size_t(batch) * seq_len * S::kHeads * S::kHeadDim;
  const std::size_t rows = gc::tree::cuda::attention_backward_scratch_floats<S>(batch, seq_len);
  auto dout = ct::upload(ct::convert<bf16>(kt::random_normal(n, seed)));
  auto out = ct::upload(ct::convert<bf16>(kt::random_normal(n, seed + 1)));
  ct::DeviceBuffer<float> packed(rows), warp(rows);
  gc::tree::cuda::detail::attention_backward_delta<bf16, S>(packed.data(), dout.data(), out.data(), batch, seq_len);
  gc::tree::cuda::launch(gc::tree::cuda::detail::attention_backward_delta_kernel<bf16, S>,
                         gc::tree::cuda::blocks_for(std::int64_t(rows), 8), 256, 0, warp.data(), dout.data(),
                         out.data(), seq_len, std::int64_t(rows));
  const auto got = ct::download(packed), want = ct::download(warp);
  const double err = kt::rel_error(ct::to_double(got), ct::to_double(want));
  kt::report("attention delta packed hd=" + std::to_string(S::kHeadDim), err);
  EXPECT_LT(err, 1e-6) << "head_dim " << S::kHeadDim;  // the same products, summed in another order
  // Rows that do not start on a pack's boundary (one element in) take the warp kernel: its bits.
  ct::DeviceBuffer<float> shifted(rows), shifted_warp(rows);
  const int shorter = seq_len - 1;  // the shifted rows must stay inside the buffers
  gc::tree::cuda::detail::attention_backward_delta<bf16, S>(shifted.data(), dout.data() + 1, out.data() + 1, batch,
                                                            shorter);
  gc::tree::cuda::launch(gc::tree::cuda::detail::attention_backward_delta_kernel<bf16, S>,
                         gc::tree::cuda::blocks_for(std::int64_t(rows), 8), 256, 0, shifted_warp.data(),
                         dout.data() + 1, out.data() + 1, shorter,
                         std::int64_t(gc::tree::cuda::attention_backward_scratch_floats<S>(batch, shorter)));
  EXPECT_TRUE(ct::bitwise_equal(ct::download(shifted), ct::download(shifted_warp))) << "unaligned, hd " << S::kHeadDim;
}

TEST(CudaFlashAttention, PackedDeltaPassMatchesTheWarpPerRowPass) {
  GC_REQUIRE_GPU();
  static_assert(gc::tree::cuda::detail::DeltaPacks<bf16, Mha16>::kLanes == 2);
  static_assert(gc::tree::cuda::detail::DeltaPacks<bf16, Gqa128>::kLanes == 16);
  static_assert(!gc::tree::cuda::detail::DeltaPacks<bf16, Mqa96>::kApplies);
  check_delta<Mha16>(3, 37, 60);
  check_delta<Gqa64>(2, 29, 61);
  check_delta<Gqa128>(1, 41, 62);
  check_delta<Mqa96>(2, 19, 63);
}

TEST(CudaFlashAttention, RejectsBatchesTheGridCannotHold) {
  GC_REQUIRE_GPU();
  ct::DeviceBuffer<bf16> buf(64);
  ct::DeviceBuffer<float> lse(16);
  EXPECT_THROW(gc::tree::cuda::flash_attention_forward<Gqa64>(buf.data(), lse.data(), buf.data(), buf.data(),
                                                              buf.data(), 70000, 1),
               gc::rt::RuntimeError);
}

}  // namespace
