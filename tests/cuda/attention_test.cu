// CUDA causal GQA attention (cuda/attention.cuh) against the CPU backend (cpu/attention.hpp),
// which runs in double on the same (for bf16: rounded) inputs.
#include "cuda/attention.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/attention.hpp"
#include "cuda_test_util.hpp"
#include "runtime/error.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::AttentionDims;
using gc::tree::cuda::bf16;

std::string describe(const AttentionDims& d) {
  return "B=" + std::to_string(d.batch) + " T=" + std::to_string(d.seq_len) + " H=" + std::to_string(d.heads) +
         " KV=" + std::to_string(d.kv_heads) + " hd=" + std::to_string(d.head_dim);
}

template <typename T>
const char* type_name() {
  return std::is_same_v<T, float> ? "fp32" : "bf16";
}

std::size_t q_size(const AttentionDims& d) { return std::size_t(d.batch) * d.seq_len * d.heads * d.head_dim; }
std::size_t kv_size(const AttentionDims& d) { return std::size_t(d.batch) * d.seq_len * d.kv_heads * d.head_dim; }
std::size_t lse_size(const AttentionDims& d) { return std::size_t(d.batch) * d.heads * d.seq_len; }

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::fmax(m, std::fabs(x));
  return m;
}

// Attention shapes as a spec fixes them (heads, kv heads, head_dim and scale are compile-time
// constants of the kernels); the scale is in thousandths so that it can be a template argument.
template <int H, int KV, int HD, int kScaleThousandths>
using Shape = ct::AttentionShape<H, KV, HD, kScaleThousandths>;
using Mha32 = Shape<3, 3, 32, 177>;      // 1/sqrt(32) to three digits
using Gqa64 = Shape<4, 2, 64, 125>;      // 1/sqrt(64)
using Mqa48 = Shape<2, 1, 48, 300>;      // 64-wide tiles, 16 dims masked; a scale of our own
using Gqa128 = Shape<4, 2, 128, 88>;     // 512 threads, 32-row tiles
using Mha16 = Shape<2, 2, 16, 250>;      // 32-wide tiles, 16 dims masked

template <class S>
AttentionDims dims_of(int batch, int seq_len) {
  return AttentionDims{batch, seq_len, S::kHeads, S::kKvHeads, S::kHeadDim};
}

// Inputs in T (random normal, never all zero) and their double values (the bf16-rounded ones for bf16).
template <typename T>
struct Problem {
  AttentionDims d;
  float scale;
  std::vector<T> q, k, v, dout;
  Problem(const AttentionDims& dims, float scale_, unsigned seed, double qk_std = 1.0) : d(dims), scale(scale_) {
    q = ct::convert<T>(kt::random_normal(q_size(d), seed, qk_std));
    k = ct::convert<T>(kt::random_normal(kv_size(d), seed + 1, qk_std));
    v = ct::convert<T>(kt::random_normal(kv_size(d), seed + 2));
    dout = ct::convert<T>(kt::random_normal(q_size(d), seed + 3));
  }
};

// What one GPU forward + backward produced.
template <typename T>
struct GpuResult {
  std::vector<T> out, dq, dk, dv;
  std::vector<float> lse;
};

template <class S, typename T>
GpuResult<T> run_gpu(const Problem<T>& pr) {
  const AttentionDims& d = pr.d;
  auto q = ct::upload(pr.q), k = ct::upload(pr.k), v = ct::upload(pr.v), dout = ct::upload(pr.dout);
  ct::DeviceBuffer<T> out(q_size(d)), dq(q_size(d)), dk(kv_size(d)), dv(kv_size(d));
  ct::DeviceBuffer<float> lse(lse_size(d)),
      scratch(gc::tree::cuda::attention_backward_scratch_floats<S>(d.batch, d.seq_len));
  gc::tree::cuda::attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), d.batch, d.seq_len);
  gc::tree::cuda::attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), out.data(),
                                        lse.data(), q.data(), k.data(), v.data(), d.batch, d.seq_len);
  return {ct::download(out), ct::download(dq), ct::download(dk), ct::download(dv), ct::download(lse)};
}

// Forward against cpu::attention_forward<double>; backward against cpu::attention_backward<double>
// given the GPU forward's own out and lse (what the GPU backward saw), so the bf16 rounding of
// out enters both sides of D_i = dout_i·out_i alike.
template <typename T, class S>
void check_against_cpu(int batch, int seq_len, unsigned seed, double qk_std = 1.0) {
  const AttentionDims d = dims_of<S>(batch, seq_len);
  const Problem<T> pr(d, S::kScale, seed, qk_std);
  const GpuResult<T> got = run_gpu<S>(pr);
  const double scale = double(pr.scale);
  const auto q = ct::to_double(pr.q), k = ct::to_double(pr.k), v = ct::to_double(pr.v), dout = ct::to_double(pr.dout);

  std::vector<double> out(q_size(d)), lse(lse_size(d));
  gc::tree::cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), d, scale);

  const auto gpu_out = ct::to_double(got.out), gpu_lse = ct::to_double(got.lse);
  std::vector<double> dq(q_size(d)), dk(kv_size(d)), dv(kv_size(d));
  gc::tree::cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), gpu_out.data(), gpu_lse.data(),
                                    q.data(), k.data(), v.data(), d, scale);

  const double tol = ct::tolerance<T>();
  const std::string tag = std::string(" ") + type_name<T>() + " " + describe(d);
  const auto check = [&](const char* name, const std::vector<double>& gpu, const std::vector<double>& ref) {
    const double err = kt::rel_error(gpu, ref);
    kt::report(std::string("cuda attention ") + name + tag, err);
    EXPECT_LT(err, tol) << name << tag;
  };
  check("out", gpu_out, out);
  check("lse", gpu_lse, lse);
  check("dv", ct::to_double(got.dv), dv);
  if (d.seq_len > 1) {
    check("dq", ct::to_double(got.dq), dq);
    check("dk", ct::to_double(got.dk), dk);
  } else {
    // One key: P = 1, out = v, dP = D, so dS and with it dq, dk are exactly 0 in exact
    // arithmetic (rel_error would divide by 0). The GPU leaves the fp32 rounding difference of
    // dout·v summed in two orders (D in one kernel, dP in another): ~1e-6, far below a real
    // gradient's O(1).
    EXPECT_LT(max_abs(ct::to_double(got.dq)), 1e-4) << tag;
    EXPECT_LT(max_abs(ct::to_double(got.dk)), 1e-4) << tag;
  }
}

TEST(CudaAttention, MhaMatchesCpu) {
  GC_REQUIRE_GPU();
  check_against_cpu<float, Mha32>(2, 37, 10);
  check_against_cpu<bf16, Mha32>(2, 37, 10);
}

TEST(CudaAttention, GqaMatchesCpu) {
  GC_REQUIRE_GPU();
  // std 1.5 for q and k: peaked rows (|s| up to ~10), so the online max rescaling matters
  check_against_cpu<float, Gqa64>(1, 100, 20, 1.5);
  check_against_cpu<bf16, Gqa64>(1, 100, 20, 1.5);
}

TEST(CudaAttention, SingleTokenMatchesCpu) {
  GC_REQUIRE_GPU();
  check_against_cpu<float, Gqa64>(2, 1, 30);
  check_against_cpu<bf16, Gqa64>(2, 1, 30);
}

TEST(CudaAttention, OtherHeadDimsMatchCpu) {
  GC_REQUIRE_GPU();
  check_against_cpu<float, Mqa48>(2, 70, 88);
  check_against_cpu<bf16, Mqa48>(2, 70, 88);
  check_against_cpu<float, Gqa128>(1, 97, 168);
  check_against_cpu<bf16, Gqa128>(1, 97, 168);
  check_against_cpu<float, Mha16>(1, 65, 56);
  check_against_cpu<bf16, Mha16>(1, 65, 56);
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T, class S>
void check_deterministic(int batch, int seq_len) {
  const AttentionDims d = dims_of<S>(batch, seq_len);
  const Problem<T> pr(d, S::kScale, 50);
  const GpuResult<T> a = run_gpu<S>(pr), b = run_gpu<S>(pr);
  const std::string tag = std::string(type_name<T>()) + " " + describe(d);
  EXPECT_TRUE(same_bits(a.out, b.out)) << "out " << tag;
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << "lse " << tag;
  EXPECT_TRUE(same_bits(a.dq, b.dq)) << "dq " << tag;
  EXPECT_TRUE(same_bits(a.dk, b.dk)) << "dk " << tag;
  EXPECT_TRUE(same_bits(a.dv, b.dv)) << "dv " << tag;
}

TEST(CudaAttention, BackwardIsBitwiseDeterministic) {
  GC_REQUIRE_GPU();
  check_deterministic<float, Gqa64>(1, 100);
  check_deterministic<bf16, Gqa64>(1, 100);
  check_deterministic<float, Gqa128>(1, 97);
}

// Shapes are compile-time (static_asserts refuse odd or oversized head_dims); what remains at run
// time is the batch, which the grid bounds.
TEST(CudaAttention, RejectsBatchesTheGridCannotHold) {
  GC_REQUIRE_GPU();
  ct::DeviceBuffer<float> buf(16), scratch(16);
  EXPECT_THROW(
      gc::tree::cuda::attention_forward<Gqa64>(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), 70000, 1),
      gc::rt::RuntimeError);
  EXPECT_THROW(
      gc::tree::cuda::attention_backward<Gqa64>(buf.data(), buf.data(), buf.data(), scratch.data(), buf.data(),
                                                buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), -1, 4),
      gc::rt::RuntimeError);
}

}  // namespace
