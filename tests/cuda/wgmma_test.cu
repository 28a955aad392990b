// Hopper's warpgroup MMA (cuda/wgmma.cuh) against scalar products, with the operand tiles placed in
// shared memory by the PTX ISA's canonical layouts written out here element by element, and the
// accumulators read back by the documented fragment layout. On a GPU (the kit's kernels row) this
// checks the instruction and our reading of the layouts; under the emulator, the emulator.
// The operands are small integers, so every product and sum is exact in fp32 whatever order the
// tensor core adds in: a result must equal the reference exactly.
#include "cuda/wgmma.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;

namespace {

using gc::tree::cuda::bf16;
namespace wgmma = gc::tree::cuda::wgmma;
namespace hopper = gc::tree::cuda::hopper;

constexpr int kM = 64;  // wgmma's M

// Where element (row, k) of a K-major operand tile lies (bytes from the tile's base).
struct NoSwizzle {  // 8×16-byte core matrices, (row/8, k/8) at SBO·(row/8) + LBO·(k/8)
  unsigned lbo, sbo;
  __host__ __device__ unsigned at(int row, int k) const {
    return sbo * unsigned(row / 8) + lbo * unsigned(k / 8) + 16u * unsigned(row % 8) + 2u * unsigned(k % 8);
  }
};
struct Swizzle128 {  // 128-byte rows, 8-row atoms of 1024 bytes; chunk c of row r stored at c ^ (r % 8)
  __host__ __device__ unsigned at(int row, int k) const {
    return 1024u * unsigned(row / 8) + 128u * unsigned(row % 8) + 16u * unsigned((k / 8) ^ (row % 8)) + 2u * unsigned(k % 8);
  }
};

// Stores thread t's accumulators into D [64][N] by the fragment layout.
template <int N>
__device__ void store_accumulators(float* d_out, const float (&d)[N / 2]) {
  const int t = int(threadIdx.x), w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  for (int i = 0; i < N / 2; ++i) d_out[(16 * w + g + 8 * ((i / 2) % 2)) * N + 8 * (i / 4) + 2 * q + i % 2] = d[i];
}

// D = A·B1ᵀ, then D += A·B2ᵀ (K = 16, no swizzle): A [64][16], B1 and B2 [N][16], row-major in
// global memory; tiles at 0 (A), a_bytes (B1), a_bytes + b_bytes (B2) of the dynamic shared memory.
template <int N>
__global__ void no_swizzle_kernel(float* d_out, const bf16* a, const bf16* b1, const bf16* b2, NoSwizzle la,
                                  NoSwizzle lb, unsigned a_bytes, unsigned b_bytes) {
  unsigned char* smem = hopper::dynamic_shared();
  for (int e = int(threadIdx.x); e < kM * 16; e += 128) {
    *reinterpret_cast<bf16*>(smem + la.at(e / 16, e % 16)) = a[e];
  }
  for (int e = int(threadIdx.x); e < N * 16; e += 128) {
    *reinterpret_cast<bf16*>(smem + a_bytes + lb.at(e / 16, e % 16)) = b1[e];
    *reinterpret_cast<bf16*>(smem + a_bytes + b_bytes + lb.at(e / 16, e % 16)) = b2[e];
  }
  hopper::fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = 1e30f;  // overwritten: the first product does not accumulate
  const auto da = wgmma::descriptor(smem, wgmma::Swizzle::none, la.lbo, la.sbo);
  wgmma::fence();
  wgmma::mma_bf16<N>(d, da, wgmma::descriptor(smem + a_bytes, wgmma::Swizzle::none, lb.lbo, lb.sbo), false);
  wgmma::mma_bf16<N>(d, da, wgmma::descriptor(smem + a_bytes + b_bytes, wgmma::Swizzle::none, lb.lbo, lb.sbo), true);
  wgmma::commit();
  wgmma::wait<0>();
  store_accumulators<N>(d_out, d);
}

// D = A·Bᵀ over K = 64 (four k-steps) with 128-byte swizzled tiles: A [64][64] at 0, B [N][64] at
// 8192 (both 1024-byte aligned); k-step s starts 32·s bytes into the rows.
template <int N>
__global__ void swizzle128_kernel(float* d_out, const bf16* a, const bf16* b) {
  unsigned char* smem = hopper::dynamic_shared();
  const Swizzle128 layout;
  constexpr unsigned kB = 64u * 128u;
  for (int e = int(threadIdx.x); e < kM * 64; e += 128) *reinterpret_cast<bf16*>(smem + layout.at(e / 64, e % 64)) = a[e];
  for (int e = int(threadIdx.x); e < N * 64; e += 128) {
    *reinterpret_cast<bf16*>(smem + kB + layout.at(e / 64, e % 64)) = b[e];
  }
  hopper::fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  wgmma::fence();
  for (int s = 0; s < 4; ++s) {
    wgmma::mma_bf16<N>(d, wgmma::descriptor(smem + 32 * s, wgmma::Swizzle::b128, 16, 1024),
                       wgmma::descriptor(smem + kB + 32 * s, wgmma::Swizzle::b128, 16, 1024), s > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  store_accumulators<N>(d_out, d);
}

// The register-A form with an MN-major B (attention's P·V): D = A1·B1ᵀ, then D += A2·B2ᵀ, A from
// registers in the fragment layout, B stored [k][n] (n contiguous) as 8 k-rows × 16-byte core
// matrices: (n/8, k/8) at SBO·(n/8) + LBO·(k/8), row k%8 of it at +16·(k%8), n%8 at +2·(n%8).
template <int N>
__global__ void registers_mn_major_kernel(float* d_out, const bf16* a1, const bf16* a2, const bf16* b1,
                                          const bf16* b2) {
  unsigned char* smem = hopper::dynamic_shared();
  constexpr unsigned kSbo = 128, kLbo = (N / 8) * 128, kTile = 2 * kLbo;
  for (int e = int(threadIdx.x); e < N * 16; e += 128) {
    const int n = e / 16, k = e % 16;  // b[n][k] in global memory
    const unsigned at = kSbo * unsigned(n / 8) + kLbo * unsigned(k / 8) + 16u * unsigned(k % 8) + 2u * unsigned(n % 8);
    *reinterpret_cast<bf16*>(smem + at) = b1[e];
    *reinterpret_cast<bf16*>(smem + kTile + at) = b2[e];
  }
  hopper::fence_proxy_async();
  __syncthreads();
  const int t = int(threadIdx.x), w = t / 32, g = (t % 32) / 4, q = t % 4;
  const auto fragment = [&](const bf16* a, std::uint32_t (&regs)[4]) {
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * w + g + 8 * (r % 2), k = 2 * q + 8 * (r / 2);
      regs[r] = std::uint32_t(__bfloat16_as_ushort(a[row * 16 + k])) |
                (std::uint32_t(__bfloat16_as_ushort(a[row * 16 + k + 1])) << 16);
    }
  };
  std::uint32_t f1[4], f2[4];
  fragment(a1, f1);
  fragment(a2, f2);
  float d[N / 2];
  wgmma::fence();
  wgmma::mma_bf16_rs<N, true>(d, f1, wgmma::descriptor(smem, wgmma::Swizzle::none, kLbo, kSbo), false);
  wgmma::mma_bf16_rs<N, true>(d, f2, wgmma::descriptor(smem + kTile, wgmma::Swizzle::none, kLbo, kSbo), true);
  wgmma::commit();
  wgmma::wait<0>();
  store_accumulators<N>(d_out, d);
}

// Small integers in [-4, 4] as bf16 (exact), never all zero.
std::vector<bf16> small_integers(std::size_t n, unsigned seed) {
  std::vector<double> v(n);
  unsigned x = seed * 2654435761u + 1u;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = double(int(x >> 28) % 9 - 4);
  }
  return ct::convert<bf16>(v);
}

// want[m][n] = Σ_k a[m][k]·b[n][k] (+ the same with b2), exact in double.
std::vector<float> products(const std::vector<bf16>& a, const std::vector<bf16>& b, const std::vector<bf16>* b2, int n,
                            int k) {
  const auto ad = ct::to_double(a), bd = ct::to_double(b);
  const auto b2d = b2 ? ct::to_double(*b2) : std::vector<double>();
  std::vector<float> want(std::size_t(kM) * n);
  for (int i = 0; i < kM; ++i) {
    for (int j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int c = 0; c < k; ++c) sum += ad[i * k + c] * (bd[j * k + c] + (b2 ? b2d[j * k + c] : 0.0));
      want[std::size_t(i) * n + j] = float(sum);
    }
  }
  return want;
}

template <int N>
void check_no_swizzle(NoSwizzle la, NoSwizzle lb, const std::string& what) {
  const auto a = small_integers(kM * 16, 1), b1 = small_integers(N * 16, 2), b2 = small_integers(N * 16, 3);
  auto a_d = ct::upload(a), b1_d = ct::upload(b1), b2_d = ct::upload(b2);
  ct::DeviceBuffer<float> d_d(std::size_t(kM) * N);
  const unsigned a_bytes = 4096, b_bytes = 8192;
  gc::tree::cuda::launch(no_swizzle_kernel<N>, 1, 128, a_bytes + 2 * b_bytes, d_d.data(), a_d.data(), b1_d.data(),
                         b2_d.data(), la, lb, a_bytes, b_bytes);
  const auto got = ct::download(d_d), want = products(a, b1, &b2, N, 16);
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << what << ": D[" << i / N << "][" << i % N << "]";
  }
}

TEST(CudaWgmma, KMajorWithoutSwizzleMatchesTheScalarProduct) {
  GC_REQUIRE_GPU();
  // Core matrices along K adjacent (LBO 128, SBO 256), and along M/N adjacent (SBO 128, LBO = the
  // tile's 8-row groups · 128): both orders the descriptor can express.
  check_no_swizzle<16>({128, 256}, {128, 256}, "N 16, k-adjacent core matrices");
  check_no_swizzle<64>({128, 256}, {128, 256}, "N 64, k-adjacent core matrices");
  check_no_swizzle<64>({8 * 128, 128}, {8 * 128, 128}, "N 64, row-adjacent core matrices");
  check_no_swizzle<128>({128, 256}, {128, 256}, "N 128, k-adjacent core matrices");
}

TEST(CudaWgmma, RegisterAWithAnMnMajorBMatchesTheScalarProduct) {
  GC_REQUIRE_GPU();
  constexpr int N = 64;
  const auto a1 = small_integers(kM * 16, 6), a2 = small_integers(kM * 16, 7);
  const auto b1 = small_integers(N * 16, 8), b2 = small_integers(N * 16, 9);
  auto a1_d = ct::upload(a1), a2_d = ct::upload(a2), b1_d = ct::upload(b1), b2_d = ct::upload(b2);
  ct::DeviceBuffer<float> d_d(std::size_t(kM) * N);
  gc::tree::cuda::launch(registers_mn_major_kernel<N>, 1, 128, 4 * (N / 8) * 128, d_d.data(), a1_d.data(), a2_d.data(),
                         b1_d.data(), b2_d.data());
  auto want = products(a1, b1, nullptr, N, 16);
  const auto second = products(a2, b2, nullptr, N, 16);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] += second[i];
  const auto got = ct::download(d_d);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "D[" << i / N << "][" << i % N << "]";
}

TEST(CudaWgmma, KMajor128ByteSwizzleOverFourKSteps) {
  GC_REQUIRE_GPU();
  constexpr int N = 64;
  const auto a = small_integers(kM * 64, 4), b = small_integers(N * 64, 5);
  auto a_d = ct::upload(a), b_d = ct::upload(b);
  ct::DeviceBuffer<float> d_d(std::size_t(kM) * N);
  constexpr std::size_t kSmem = 64 * 128 + N * 128;
  gc::tree::cuda::launch(swizzle128_kernel<N>, 1, 128, kSmem, d_d.data(), a_d.data(), b_d.data());
  const auto got = ct::download(d_d), want = products(a, b, nullptr, N, 64);
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "D[" << i / N << "][" << i % N << "]";
}

}  // namespace
