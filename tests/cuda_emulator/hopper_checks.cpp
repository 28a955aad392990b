// Checks of the emulator's Hopper instructions themselves (gc_emu/hopper.hpp, gc_emu/wgmma.hpp;
// built into gcompile_cuda_emulated_tests only): the strictness a GPU cannot show (a bulk copy's
// bytes and an MMA's accumulators appear only at the wait; misuse aborts naming the problem), and
// the descriptor decoding on the worked example of the 128-byte swizzle. tests/cuda/hopper_test.cu
// and tests/cuda/wgmma_test.cu check the same instructions' results on a GPU too.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/hopper.cuh"
#include "cuda/wgmma.cuh"
#include "runtime/cuda/check.hpp"

namespace {

using gc::rt::cuda::DeviceBuffer;
using gc::tree::cuda::bf16;
namespace hopper = gc::tree::cuda::hopper;
namespace wgmma = gc::tree::cuda::wgmma;

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  d.download(host.data(), host.size());
  return host;
}

// A bulk copy's bytes land at the wait: the tile read before it still holds the block's start
// value (0xff bytes: NaN), after it the copied values.
__global__ void early_read_kernel(float* out, const float* in) {
  unsigned char* smem = hopper::dynamic_shared();
  auto* bar = reinterpret_cast<std::uint64_t*>(smem);
  auto* tile = reinterpret_cast<float*>(smem + 16);
  if (threadIdx.x == 0) hopper::mbarrier_init(bar, 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    hopper::mbarrier_arrive_expect_tx(bar, 64);
    hopper::bulk_copy_g2s(tile, in, 64, bar);
  }
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];  // too early
  __syncthreads();                        // every thread has read before any waits
  hopper::mbarrier_wait(bar, 0);
  out[16 + threadIdx.x] = tile[threadIdx.x];
}

TEST(CudaEmulatorHopper, BulkCopiesLandOnlyWhenTheirMbarrierIsWaitedFor) {
  std::vector<float> in(16);
  for (int i = 0; i < 16; ++i) in[i] = float(i) + 0.25f;
  DeviceBuffer<float> in_d(16), out_d(32);
  in_d.upload(in.data(), 16);
  gc::tree::cuda::launch(early_read_kernel, 1, 16, 1024, out_d.data(), in_d.data());
  const auto out = download(out_d);
  for (int i = 0; i < 16; ++i) {
    EXPECT_TRUE(std::isnan(out[i])) << "read before the wait, element " << i;
    EXPECT_EQ(out[16 + i], in[i]) << "read after the wait, element " << i;
  }
}

__global__ void never_arrives_kernel() {
  __shared__ std::uint64_t bar;
  if (threadIdx.x == 0) hopper::mbarrier_init(&bar, 2);
  __syncthreads();
  if (threadIdx.x == 0) hopper::mbarrier_arrive(&bar);  // thread 1 never arrives
  hopper::mbarrier_wait(&bar, 0);
}

__global__ void copy_never_waited_kernel(const float* in) {
  unsigned char* smem = hopper::dynamic_shared();
  auto* bar = reinterpret_cast<std::uint64_t*>(smem);
  hopper::mbarrier_init(bar, 1);
  hopper::mbarrier_arrive_expect_tx(bar, 16);
  hopper::bulk_copy_g2s(smem + 16, in, 16, bar);
}

__global__ void misaligned_copy_kernel(const float* in) {
  unsigned char* smem = hopper::dynamic_shared();
  auto* bar = reinterpret_cast<std::uint64_t*>(smem);
  hopper::mbarrier_init(bar, 1);
  hopper::bulk_copy_g2s(smem + 16, in, 24, bar);
}

TEST(CudaEmulatorHopperDeathTest, MisuseAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceBuffer<float> in_d(64);
  EXPECT_DEATH(gc::tree::cuda::launch(never_arrives_kernel, 1, 2, 0),
               "deadlock.*2 waiting for the mbarrier at .* \\(phase parity 0\\)");
  EXPECT_DEATH(gc::tree::cuda::launch(copy_never_waited_kernel, 1, 1, 64, in_d.data()),
               "exited with 1 bulk copy in flight");
  EXPECT_DEATH(gc::tree::cuda::launch(misaligned_copy_kernel, 1, 1, 64, in_d.data()),
               "size 24 is not a positive multiple of 16");
  EXPECT_DEATH(gc::emu::setmaxnreg(20), "20 is not a multiple of 8 in \\[24, 256\\]");
}

// The accumulators of a wgmma change at the wait_group, not at the issue: one 64×16 × 16×16
// product of ones, read before the wait (still the initial 5) and after (16 + 5, accumulated).
__global__ void accumulate_at_wait_kernel(float* out) {
  unsigned char* smem = hopper::dynamic_shared();
  for (int e = int(threadIdx.x); e < 64 * 16 + 16 * 16; e += 128) {
    reinterpret_cast<bf16*>(smem)[e] = gc::tree::cuda::from_float<bf16>(1.0f);
  }
  __syncthreads();
  float d[8];
  for (float& x : d) x = 5.0f;
  wgmma::fence();
  wgmma::mma_bf16<16>(d, wgmma::descriptor(smem, wgmma::Swizzle::none, 128, 256),
                      wgmma::descriptor(smem + 2048, wgmma::Swizzle::none, 128, 256), true);
  wgmma::commit();
  out[threadIdx.x] = d[0];
  wgmma::wait<0>();
  out[128 + threadIdx.x] = d[0];
}

__global__ void unwaited_mma_kernel() {
  float d[8] = {};
  wgmma::fence();
  wgmma::mma_bf16<16>(d, wgmma::descriptor(hopper::dynamic_shared(), wgmma::Swizzle::none, 128, 256),
                      wgmma::descriptor(hopper::dynamic_shared() + 2048, wgmma::Swizzle::none, 128, 256), false);
  wgmma::commit();
}

__global__ void divergent_descriptor_kernel() {
  float d[8] = {};
  unsigned char* smem = hopper::dynamic_shared();
  wgmma::fence();
  wgmma::mma_bf16<16>(d, wgmma::descriptor(smem + (threadIdx.x == 5 ? 16 : 0), wgmma::Swizzle::none, 128, 256),
                      wgmma::descriptor(smem + 2048, wgmma::Swizzle::none, 128, 256), false);
  wgmma::commit();
  wgmma::wait<0>();
}

__global__ void partial_warpgroup_kernel() { wgmma::fence(); }

TEST(CudaEmulatorHopper, WgmmaAccumulatorsChangeAtTheWait) {
  DeviceBuffer<float> out_d(256);
  gc::tree::cuda::launch(accumulate_at_wait_kernel, 1, 128, 4096, out_d.data());
  const auto out = download(out_d);
  for (int t = 0; t < 128; ++t) {
    EXPECT_EQ(out[t], 5.0f) << "before the wait, thread " << t;
    EXPECT_EQ(out[128 + t], 21.0f) << "after the wait, thread " << t;
  }
}

TEST(CudaEmulatorHopperDeathTest, WgmmaMisuseAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(gc::tree::cuda::launch(unwaited_mma_kernel, 1, 128, 4096),
               "wgmma.mma_async not completed by a wgmma.wait_group");
  EXPECT_DEATH(gc::tree::cuda::launch(divergent_descriptor_kernel, 1, 128, 4096),
               "thread 5 of its warpgroup issued it with other operands");
  EXPECT_DEATH(gc::tree::cuda::launch(partial_warpgroup_kernel, 1, 96, 0),
               "warpgroup \\(threads 0..127\\) is incomplete in a block of 96");
}

// The worked example of the 128-byte swizzle (K-major B, 128-byte rows, SBO 1024): element
// (n 9, k 37) is at byte 1024 + 128 + 74 = 1226 before the swizzle, whose bits [9:7] = 1 turn
// 16-byte chunk 4 into 5: 1242; read from k-step 2 (start + 64), k 5 lands on the same byte.
TEST(CudaEmulatorHopper, DescriptorsDecodeTheCanonicalLayouts) {
  const auto desc = [](unsigned start, unsigned lbo, unsigned sbo, unsigned mode) {
    return std::uint64_t(start >> 4) | std::uint64_t(lbo >> 4) << 16 | std::uint64_t(sbo >> 4) << 32 |
           std::uint64_t(mode) << 62;
  };
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(0, 16, 1024, 1), 9, 37, false), 1242u);
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(64, 16, 1024, 1), 9, 5, false), 1242u);
  // No swizzle: core matrix (1, 1) at SBO + LBO, row 1 of it at +16, k 3 at +6.
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(2048, 128, 256, 0), 9, 11, false), 2048u + 256 + 128 + 16 + 6);
  // 64-byte swizzle: chunk bits [5:4] ^= bits [8:7]; row 3 starts at byte 192 (bits [8:7] = 1), so
  // its chunk 1 (k 8) moves to chunk 0.
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(0, 16, 512, 2), 3, 8, false), 3u * 64 + 16 * (1 ^ 1));
  // 32-byte swizzle: bit 4 ^= bit 7; row 5 (byte 160: bit 7 set), chunk 0 -> 1.
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(0, 16, 256, 3), 5, 2, false), 5u * 32 + 16 + 4);
  // MN-major without swizzle: 8 consecutive mn of one k are 16 contiguous bytes.
  EXPECT_EQ(gc::emu::wgmma_operand_offset(desc(0, 128, 256, 0), 10, 3, true), 256u + 4 + 48);
}

}  // namespace
