// Hopper's asynchronous building blocks of cuda/hopper.cuh, on a GPU (the kit's kernels row: the
// real instructions against our reading of the PTX ISA) and under the emulator: dynamic shared
// memory above 48 KiB and its attribute, mbarrier phases (arrivals, transaction bytes, the parity
// of try_wait), and bulk copies global → shared completing on an mbarrier, phase after phase.
#include "cuda/hopper.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

namespace hopper = gc::tree::cuda::hopper;

constexpr int kThreads = 128;
constexpr unsigned kTileBytes = 64 << 10;  // one phase's tile: 64 KiB in four bulk copies
constexpr unsigned kCopies = 4;
constexpr std::size_t kSmemBytes = 1024 + kTileBytes;  // the mbarrier, then the tile at 1024

// Two phases through one mbarrier and one tile buffer: thread 0 announces the bytes and issues the
// copies of tile p; every thread waits for phase p's parity, copies the tile out, and the block
// synchronizes before the buffer is reused.
__global__ void bulk_phases_kernel(float* out, const float* in, int phases) {
  unsigned char* smem = hopper::dynamic_shared();
  auto* bar = reinterpret_cast<std::uint64_t*>(smem);
  auto* tile = reinterpret_cast<float*>(smem + 1024);
  if (threadIdx.x == 0) hopper::mbarrier_init(bar, 1);
  __syncthreads();
  constexpr int kFloats = int(kTileBytes / 4);
  for (int p = 0; p < phases; ++p) {
    if (threadIdx.x == 0) {
      hopper::mbarrier_arrive_expect_tx(bar, kTileBytes);
      for (unsigned c = 0; c < kCopies; ++c) {
        const unsigned chunk = kTileBytes / kCopies;
        hopper::bulk_copy_g2s(reinterpret_cast<unsigned char*>(tile) + c * chunk,
                              reinterpret_cast<const unsigned char*>(in + std::size_t(p) * kFloats) + c * chunk, chunk,
                              bar);
      }
    }
    hopper::mbarrier_wait(bar, unsigned(p % 2));
    for (int i = int(threadIdx.x); i < kFloats; i += kThreads) out[std::size_t(p) * kFloats + i] = tile[i];
    __syncthreads();
  }
  if (threadIdx.x == 0) hopper::mbarrier_inval(bar);
}

// An mbarrier of 128 arrivals as a block barrier: before its own arrival thread 0 sees phase 0
// incomplete (no phase can complete without it) and phase "1" (the one before 0) complete; after
// the wait every thread reads the value its neighbour wrote before arriving.
__global__ void arrivals_kernel(int* out) {
  __shared__ std::uint64_t bar;
  __shared__ int values[kThreads];
  if (threadIdx.x == 0) hopper::mbarrier_init(&bar, kThreads);
  __syncthreads();
  if (threadIdx.x == 0) {
    out[kThreads] = hopper::mbarrier_try_wait(&bar, 0) ? 1 : 0;
    out[kThreads + 1] = hopper::mbarrier_try_wait(&bar, 1) ? 1 : 0;
  }
  values[threadIdx.x] = int(threadIdx.x) * 7 + 3;
  hopper::mbarrier_arrive(&bar);
  hopper::mbarrier_wait(&bar, 0);
  out[threadIdx.x] = values[(threadIdx.x + 1) % kThreads];
}

// Fills a dynamic shared buffer of `bytes` and copies it out.
__global__ void large_smem_kernel(float* out, int floats) {
  auto* smem = reinterpret_cast<float*>(hopper::dynamic_shared());
  for (int i = int(threadIdx.x); i < floats; i += int(blockDim.x)) smem[i] = float(i) * 0.5f + 1.0f;
  __syncthreads();
  for (int i = int(threadIdx.x); i < floats; i += int(blockDim.x)) out[i] = smem[floats - 1 - i];
}

// A launch whose error is the point: the launch's own status, not an exception.
template <typename... Params, typename... Args>
cudaError_t launch_status(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, Args&&... args) {
  (void)cudaGetLastError();
#ifdef GC_CUDA_EMULATOR
  gc::emu::launch(kernel, grid, block, smem, std::forward<Args>(args)...);
#else
  kernel<<<grid, block, smem>>>(std::forward<Args>(args)...);
#endif
  return cudaGetLastError();
}

TEST(CudaHopper, BulkCopiesCompleteOnTheMbarrierPhaseAfterPhase) {
  GC_REQUIRE_GPU();
  constexpr int kPhases = 3;
  const auto in = ct::convert<float>(kt::random_normal(std::size_t(kPhases) * kTileBytes / 4, 91));
  auto in_d = ct::upload(in);
  ct::DeviceBuffer<float> out_d(in.size());
  GC_CUDA_CHECK(cudaFuncSetAttribute(bulk_phases_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
  gc::tree::cuda::launch(bulk_phases_kernel, 1, kThreads, kSmemBytes, out_d.data(), in_d.data(), kPhases);
  GC_CUDA_CHECK(cudaGetLastError());
  EXPECT_TRUE(ct::bitwise_equal(ct::download(out_d), in)) << "every phase's tile arrives whole before its wait returns";
}

TEST(CudaHopper, APhaseCompletesWhenEveryArrivalIsIn) {
  GC_REQUIRE_GPU();
  ct::DeviceBuffer<int> out_d(kThreads + 2);
  gc::tree::cuda::launch(arrivals_kernel, 1, kThreads, 0, out_d.data());
  GC_CUDA_CHECK(cudaGetLastError());
  const auto out = ct::download(out_d);
  for (int t = 0; t < kThreads; ++t) ASSERT_EQ(out[t], ((t + 1) % kThreads) * 7 + 3) << "thread " << t;
  EXPECT_EQ(out[kThreads], 0) << "try_wait.parity(0) before the last arrival";
  EXPECT_EQ(out[kThreads + 1], 1) << "try_wait.parity(1) in phase 0 names the completed phase before it";
}

TEST(CudaHopper, DynamicSharedMemoryAbove48KiBNeedsTheAttribute) {
  GC_REQUIRE_GPU();
  constexpr int kFloats = (96 << 10) / 4;
  ct::DeviceBuffer<float> out_d(kFloats);
  EXPECT_EQ(launch_status(large_smem_kernel, 1, kThreads, std::size_t(kFloats) * 4, out_d.data(), kFloats),
            cudaErrorInvalidValue)
      << "96 KiB without cudaFuncAttributeMaxDynamicSharedMemorySize";
  EXPECT_EQ(cudaFuncSetAttribute(large_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 232448 + 16),
            cudaErrorInvalidValue)
      << "more than 227 KiB";
  (void)cudaGetLastError();
  GC_CUDA_CHECK(cudaFuncSetAttribute(large_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kFloats * 4));
  gc::tree::cuda::launch(large_smem_kernel, 1, kThreads, std::size_t(kFloats) * 4, out_d.data(), kFloats);
  GC_CUDA_CHECK(cudaGetLastError());
  const auto out = ct::download(out_d);
  for (int i = 0; i < kFloats; ++i) ASSERT_EQ(out[i], float(kFloats - 1 - i) * 0.5f + 1.0f) << i;
}

}  // namespace
