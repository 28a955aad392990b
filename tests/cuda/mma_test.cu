// The tensor-core primitives of cuda/mma.cuh against scalar products: the bf16
// mma.sync.m16n8k16 with fragments placed by hand per the PTX ISA's layouts (on a GPU this checks
// the instruction and our reading of the layouts; under the emulator, the emulator), and the
// shared-memory fragment loaders and accumulator repacking that the flash attention kernels use.
#include "cuda/mma.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::bf16;
namespace mma = gc::tree::cuda::mma;

__device__ std::uint32_t pair_of(const bf16* m, int index_lo, int index_hi) {
  return std::uint32_t(__bfloat16_as_ushort(m[index_lo])) | (std::uint32_t(__bfloat16_as_ushort(m[index_hi])) << 16);
}

// One warp: D = C + A·B with A [16][16] row-major, B [16][8] as B[k][n], C and D [16][8] fp32,
// every fragment element placed from its documented (row, column).
__global__ void mma_by_layout_kernel(float* d_out, const bf16* a, const bf16* b, const float* c) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  std::uint32_t af[4], bf[2];
  af[0] = pair_of(a, g * 16 + 2 * t, g * 16 + 2 * t + 1);
  af[1] = pair_of(a, (g + 8) * 16 + 2 * t, (g + 8) * 16 + 2 * t + 1);
  af[2] = pair_of(a, g * 16 + 2 * t + 8, g * 16 + 2 * t + 9);
  af[3] = pair_of(a, (g + 8) * 16 + 2 * t + 8, (g + 8) * 16 + 2 * t + 9);
  bf[0] = pair_of(b, (2 * t) * 8 + g, (2 * t + 1) * 8 + g);
  bf[1] = pair_of(b, (2 * t + 8) * 8 + g, (2 * t + 9) * 8 + g);
  float acc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  mma::mma_bf16_16816(acc, af, bf);
  d_out[g * 8 + 2 * t] = acc[0];
  d_out[g * 8 + 2 * t + 1] = acc[1];
  d_out[(g + 8) * 8 + 2 * t] = acc[2];
  d_out[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

// Stores 16×16 accumulators (two n-tiles) of one warp into out [16][16].
__device__ void store_16x16(float* out, const float (&lo)[4], const float (&hi)[4], int lane) {
  const int g = lane / 4, t = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), col = 2 * t + e % 2;
    out[row * 16 + col] = lo[e];
    out[row * 16 + 8 + col] = hi[e];
  }
}

// The attention pattern on one warp: S = Q·Kᵀ (Q [16][32], K [16][32] through load_a and
// load_b_rows), then O = bf16(S)·V (V [16][16] through pack_accumulators and load_b_cols).
__global__ void tile_products_kernel(float* s_out, float* o_out, const bf16* q, const bf16* k, const bf16* v) {
  __shared__ mma::SmemTile<16, 32> q_s, k_s;
  __shared__ mma::SmemTile<16, 16> v_s;
  mma::load_tile<32, 32, 16, 32>(q_s, q, 0, 16);
  mma::load_tile<32, 32, 16, 32>(k_s, k, 0, 16);
  mma::load_tile<32, 16, 16, 16>(v_s, v, 0, 16);
  __syncthreads();
  const int lane = threadIdx.x;
  float s[2][4] = {};
  for (int ks = 0; ks < 2; ++ks) {
    std::uint32_t a[4];
    mma::load_a(a, q_s, 0, ks, lane);
    for (int nt = 0; nt < 2; ++nt) {
      std::uint32_t b[2];
      mma::load_b_rows(b, k_s, 8 * nt, ks, lane);
      mma::mma_bf16_16816(s[nt], a, b);
    }
  }
  store_16x16(s_out, s[0], s[1], lane);
  std::uint32_t p[4];
  mma::pack_accumulators(p, s[0], s[1]);
  float o[2][4] = {};
  for (int nt = 0; nt < 2; ++nt) {
    std::uint32_t b[2];
    mma::load_b_cols(b, v_s, 0, 8 * nt, lane);
    mma::mma_bf16_16816(o[nt], p, b);
  }
  store_16x16(o_out, o[0], o[1], lane);
}

std::vector<bf16> random_bf16(std::size_t n, unsigned seed) { return ct::convert<bf16>(kt::random_normal(n, seed)); }

double round_bf16(double x) { return double(gc::tree::cuda::to_float(gc::tree::cuda::from_float<bf16>(float(x)))); }

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << " element " << i;
  }
}

TEST(CudaMma, Bf16M16N8K16MatchesTheScalarProductInTheDocumentedLayout) {
  GC_REQUIRE_GPU();
  const auto a = random_bf16(16 * 16, 1), b = random_bf16(16 * 8, 2);
  const auto c = ct::convert<float>(kt::random_normal(16 * 8, 3));
  auto a_d = ct::upload(a), b_d = ct::upload(b);
  auto c_d = ct::upload(c);
  ct::DeviceBuffer<float> d_d(16 * 8);
  gc::tree::cuda::launch(mma_by_layout_kernel, 1, 32, 0, d_d.data(), a_d.data(), b_d.data(), c_d.data());
  const auto ad = ct::to_double(a), bd = ct::to_double(b);
  std::vector<double> want(16 * 8);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      double sum = c[m * 8 + n];
      for (int kk = 0; kk < 16; ++kk) sum += ad[m * 16 + kk] * bd[kk * 8 + n];
      want[m * 8 + n] = sum;
    }
  }
  expect_close(ct::download(d_d), want, 1e-5, "D = C + A·B");
}

TEST(CudaMma, TileLoadersAndAccumulatorRepackingComposeAttentionProducts) {
  GC_REQUIRE_GPU();
  const auto q = random_bf16(16 * 32, 4), k = random_bf16(16 * 32, 5), v = random_bf16(16 * 16, 6);
  auto q_d = ct::upload(q), k_d = ct::upload(k), v_d = ct::upload(v);
  ct::DeviceBuffer<float> s_d(16 * 16), o_d(16 * 16);
  gc::tree::cuda::launch(tile_products_kernel, 1, 32, 0, s_d.data(), o_d.data(), q_d.data(), k_d.data(), v_d.data());
  const auto qd = ct::to_double(q), kd = ct::to_double(k), vd = ct::to_double(v);
  std::vector<double> s(16 * 16), o(16 * 16, 0.0);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      double sum = 0.0;
      for (int c = 0; c < 32; ++c) sum += qd[i * 32 + c] * kd[j * 32 + c];
      s[i * 16 + j] = sum;
    }
  }
  expect_close(ct::download(s_d), s, 1e-5, "S = Q·Kᵀ");
  const auto s_gpu = ct::download(s_d);  // the P the product saw: the GPU's S rounded to bf16
  for (int i = 0; i < 16; ++i) {
    for (int c = 0; c < 16; ++c) {
      for (int j = 0; j < 16; ++j) o[i * 16 + c] += round_bf16(s_gpu[i * 16 + j]) * vd[j * 16 + c];
    }
  }
  expect_close(ct::download(o_d), o, 1e-5, "O = bf16(S)·V");
}

}  // namespace
