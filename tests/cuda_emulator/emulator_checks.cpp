// Checks of the CUDA emulator itself (built into gcompile_cuda_emulated_tests only): the warp
// collectives follow CUDA's documented lane rules, barriers are strict, the runtime reports
// misuse as CUDA does, cudaFree waits for the streams, bf16 rounds to nearest even, and the reference cuBLASLt computes the
// documented column-major D = alpha·op(A)·op(B) + beta·C (expected values written out by hand).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cuda/common.cuh"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace {

using gc::rt::cuda::DeviceBuffer;

template <typename T>
std::vector<T> download(const DeviceBuffer<T>& d) {
  std::vector<T> host(d.size());
  d.download(host.data(), host.size());
  return host;
}

// ---- warp collectives -------------------------------------------------------------------------

__global__ void shuffle_kernel(int* out) {
  const int v = int(threadIdx.x) * 10, stride = int(blockDim.x);
  out[0 * stride + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);
  out[1 * stride + threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  out[2 * stride + threadIdx.x] = __shfl_up_sync(0xffffffffu, v, 2);
  out[3 * stride + threadIdx.x] = __shfl_sync(0xffffffffu, v, 5, 16);
  out[4 * stride + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 8, 8);  // earlier segments only
}

TEST(CudaEmulator, ShufflesFollowCudaLaneRules) {
  const int threads = 64;
  DeviceBuffer<int> out(5 * threads);
  gc::tree::cuda::launch(shuffle_kernel, 1, threads, 0, out.data());
  const std::vector<int> got = download(out);
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32, base = t - lane;
    EXPECT_EQ(got[t], (base + (lane ^ 1)) * 10) << "xor, thread " << t;
    EXPECT_EQ(got[threads + t], (lane % 8 + 3 < 8 ? t + 3 : t) * 10) << "down width 8, thread " << t;
    EXPECT_EQ(got[2 * threads + t], (lane >= 2 ? t - 2 : t) * 10) << "up, thread " << t;
    EXPECT_EQ(got[3 * threads + t], (base + lane / 16 * 16 + 5) * 10) << "idx width 16, thread " << t;
    // Width 8: lane ^ 8 lies in the previous segment (read) or the next one (own value kept).
    EXPECT_EQ(got[4 * threads + t], (lane & 8 ? t - 8 : t) * 10) << "xor 8 width 8, thread " << t;
  }
}

// Threads of a 2-D block reverse an array through shared memory.
__global__ void reverse_kernel(float* out, const float* in) {
  __shared__ float tile[128];
  const int t = int(threadIdx.y * blockDim.x + threadIdx.x), n = int(blockDim.x * blockDim.y);
  tile[t] = in[blockIdx.x * n + t];
  __syncthreads();
  out[blockIdx.x * n + t] = tile[n - 1 - t];
}

TEST(CudaEmulator, SyncthreadsOrdersSharedMemory) {
  std::vector<float> host(3 * 128);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = float(i);
  DeviceBuffer<float> in(host.size()), out(host.size());
  in.upload(host.data(), host.size());
  gc::tree::cuda::launch(reverse_kernel, 3, dim3(32, 4), 0, out.data(), in.data());
  const std::vector<float> got = download(out);
  for (int b = 0; b < 3; ++b) {
    for (int t = 0; t < 128; ++t) EXPECT_EQ(got[b * 128 + t], float(b * 128 + 127 - t));
  }
}

__global__ void early_exit_kernel(float* out) {
  if (threadIdx.x == 5) return;  // never reaches the barrier the others wait at
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void divergent_shuffle_kernel(float* out) {
  float v = float(threadIdx.x);
  if (threadIdx.x % 2 == 0) v = __shfl_xor_sync(0xffffffffu, v, 1);  // half the warp
  out[threadIdx.x] = v;
}

TEST(CudaEmulatorDeathTest, BarrierMisuseIsADeadlock) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  DeviceBuffer<float> out(64);
  EXPECT_DEATH(gc::tree::cuda::launch(early_exit_kernel, 1, 64, 0, out.data()),
               "deadlock.*63 at __syncthreads, 1 exited");
  EXPECT_DEATH(gc::tree::cuda::launch(divergent_shuffle_kernel, 1, 32, 0, out.data()),
               "deadlock.*16 of 32 lanes at __shfl_xor_sync");
}

// ---- runtime --------------------------------------------------------------------------------

__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }

TEST(CudaEmulator, RuntimeReportsMisuseLikeCuda) {
  DeviceBuffer<float> buf(32);
  // Fresh allocations hold NaN; launches fill and check.
  EXPECT_TRUE(std::isnan(download(buf)[7]));
  gc::tree::cuda::launch(fill_kernel, 1, 32, 0, buf.data(), 2.5f);
  EXPECT_EQ(download(buf)[31], 2.5f);
  // Bad configurations and host pointers fail the launch check.
  EXPECT_THROW(gc::tree::cuda::launch(fill_kernel, 0, 32, 0, buf.data(), 1.0f), gc::rt::RuntimeError);
  EXPECT_THROW(gc::tree::cuda::launch(fill_kernel, 1, 1025, 0, buf.data(), 1.0f), gc::rt::RuntimeError);
  float host[32];
  EXPECT_THROW(gc::tree::cuda::launch(fill_kernel, 1, 32, 0, host, 1.0f), gc::rt::RuntimeError);
  EXPECT_EQ(download(buf)[0], 2.5f);  // none of them ran
  // Copies must stay inside an allocation and name the right direction.
  EXPECT_EQ(cudaMemcpy(buf.data() + 1, host, sizeof host, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host, buf.data(), sizeof host, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(buf.data(), 0, 33 * sizeof(float)), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);  // sticky until read
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(gc::rt::cuda::device_count(), 1);
}

// A created stream's work runs only when something waits for it, so a reader that forgets to
// wait sees the buffer as it was; a blocking stream also runs before the next default-stream
// operation (the legacy default stream's implicit synchronization).
TEST(CudaEmulator, CreatedStreamsRunTheirWorkWhenWaitedFor) {
  DeviceBuffer<float> buf(32);
  gc::tree::cuda::launch(fill_kernel, 1, 32, 0, buf.data(), 1.0f);
  cudaStream_t side = nullptr;
  cudaEvent_t done = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 0, 32 * sizeof(float), side), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, side), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 0xff, 16 * sizeof(float), side), cudaSuccess);  // after the event
  EXPECT_EQ(download(buf)[0], 1.0f);  // a default-stream copy does not wait for a non-blocking stream
  ASSERT_EQ(cudaStreamWaitEvent(nullptr, done, 0), cudaSuccess);
  EXPECT_EQ(download(buf)[0], 0.0f);  // the work before the record ran, the later memset did not
  ASSERT_EQ(cudaStreamSynchronize(side), cudaSuccess);
  EXPECT_TRUE(std::isnan(download(buf)[0]));
  EXPECT_EQ(download(buf)[16], 0.0f);

  cudaStream_t blocking = nullptr;
  ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 0, 32 * sizeof(float), blocking), cudaSuccess);
  EXPECT_EQ(download(buf)[0], 0.0f);  // ran before the default stream's copy
  // Misuse fails like CUDA: a range outside the allocation, a destroyed stream.
  EXPECT_EQ(cudaMemsetAsync(buf.data(), 0, 33 * sizeof(float), side), cudaErrorInvalidValue);
  ASSERT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(buf.data(), 0, 4, blocking), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

// cudaFree waits for the device, as CUDA's does: a created stream's queued work runs before the
// memory goes (so nothing queued touches freed memory, and a teardown meets what it left queued).
TEST(CudaEmulator, FreeRunsWhatTheStreamsQueuedFirst) {
  DeviceBuffer<float> buf(32);
  gc::tree::cuda::launch(fill_kernel, 1, 32, 0, buf.data(), 1.0f);
  cudaStream_t side = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  void* scratch = nullptr;
  ASSERT_EQ(cudaMalloc(&scratch, 64), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(buf.data(), 0, 32 * sizeof(float), side), cudaSuccess);
  EXPECT_EQ(download(buf)[0], 1.0f);  // queued, not run: nothing waited for the side stream
  ASSERT_EQ(cudaFree(scratch), cudaSuccess);
  EXPECT_EQ(download(buf)[0], 0.0f);  // the free ran it
  EXPECT_EQ(cudaStreamDestroy(side), cudaSuccess);
}

TEST(CudaEmulator, Bf16RoundsToNearestEven) {
  const auto bits = [](float f) { return __float2bfloat16_rn(f).__x; };
  EXPECT_EQ(bits(1.0f), 0x3f80);
  EXPECT_EQ(bits(1.0f + 0x1p-8f), 0x3f80);        // tie: to the even 1.0
  EXPECT_EQ(bits(1.0f + 3 * 0x1p-8f), 0x3f82);    // tie: to the even 1 + 2^-6
  EXPECT_EQ(bits(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the tie: up
  EXPECT_EQ(bits(-2.0f), 0xc000);
  EXPECT_EQ(bits(3.4e38f), 0x7f80);               // rounds past the largest bf16: inf
  EXPECT_EQ(bits(NAN), 0x7fff);
  EXPECT_EQ(__bfloat162float(__float2bfloat16_rn(0.15625f)), 0.15625f);
}

// ---- cuBLASLt ----------------------------------------------------------------------------------

struct Lt {
  cublasLtHandle_t handle = nullptr;
  Lt() { EXPECT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS); }
  ~Lt() { cublasLtDestroy(handle); }

  // D = alpha·op(A)·op(B) + beta·C with column-major stored shapes a_rows×a_cols (ld lda), ….
  template <typename AB, typename CD>
  cublasStatus_t matmul(cublasOperation_t ta, cublasOperation_t tb, const AB* A, int a_rows, int a_cols, int lda,
                        const AB* B, int b_rows, int b_cols, int ldb, CD* D, int d_rows, int d_cols, int ldd,
                        float alpha, float beta) {
    const cudaDataType_t ab = std::is_same_v<AB, float> ? CUDA_R_32F : CUDA_R_16BF;
    const cudaDataType_t cd = std::is_same_v<CD, float> ? CUDA_R_32F : CUDA_R_16BF;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatrixLayoutCreate(&a, ab, a_rows, a_cols, lda);
    cublasLtMatrixLayoutCreate(&b, ab, b_rows, b_cols, ldb);
    cublasLtMatrixLayoutCreate(&d, cd, d_rows, d_cols, ldd);
    const cublasStatus_t s = cublasLtMatmul(handle, desc, &alpha, A, a, B, b, &beta, D, d, D, d, nullptr, nullptr, 0,
                                            nullptr);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(d);
    cublasLtMatmulDescDestroy(desc);
    return s;
  }
};

template <typename T>
DeviceBuffer<T> device(const std::vector<float>& v) {
  std::vector<T> host(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) host[i] = gc::tree::cuda::from_float<T>(v[i]);
  DeviceBuffer<T> d(host.size());
  d.upload(host.data(), host.size());
  return d;
}

template <typename T>
std::vector<float> host_floats(const DeviceBuffer<T>& d) {
  std::vector<float> out;
  for (const T& x : download(d)) out.push_back(gc::tree::cuda::to_float(x));
  return out;
}

// A = [1 2 3; 4 5 6] (2×3), B = [1 0; 2 1; 0 3] (3×2): A·B = [5 11; 14 23]. Stored column-major:
// A as {1,4, 2,5, 3,6}; Aᵀ (3×2) as {1,2,3, 4,5,6}; B as {1,2,0, 0,1,3}; Bᵀ as {1,0, 2,1, 0,3}.
template <typename AB, typename CD>
void check_matmul_semantics() {
  Lt lt;
  const auto A = device<AB>({1, 4, 2, 5, 3, 6}), At = device<AB>({1, 2, 3, 4, 5, 6});
  const auto B = device<AB>({1, 2, 0, 0, 1, 3}), Bt = device<AB>({1, 0, 2, 1, 0, 3});
  const std::vector<float> product = {5, 14, 11, 23};  // column-major 2×2
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      DeviceBuffer<CD> D(4);
      const auto& a = ta ? At : A;
      const auto& b = tb ? Bt : B;
      ASSERT_EQ(lt.matmul(ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, a.data(), ta ? 3 : 2,
                          ta ? 2 : 3, ta ? 3 : 2, b.data(), tb ? 2 : 3, tb ? 3 : 2, tb ? 2 : 3, D.data(), 2, 2, 2, 1.0f,
                          0.0f),
                CUBLAS_STATUS_SUCCESS);
      EXPECT_EQ(host_floats(D), product) << "transa " << ta << " transb " << tb;  // beta 0: NaN in D ignored
    }
  }
  // alpha, beta and C == D in place; ld 3 > rows 2 leaves the padding row alone.
  auto D = device<CD>({1, 1, -7, 2, 2, -7});
  ASSERT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 2, B.data(), 3, 2, 3, D.data(), 2, 2, 3, 2.0f, 0.5f),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(host_floats(D), (std::vector<float>{10.5f, 28.5f, -7, 23, 47, -7}));
}

TEST(CudaEmulator, CublasLtComputesDocumentedColumnMajorProduct) {
  check_matmul_semantics<float, float>();
  check_matmul_semantics<__nv_bfloat16, float>();
  check_matmul_semantics<__nv_bfloat16, __nv_bfloat16>();
}

TEST(CudaEmulator, CublasLtRejectsInconsistentProblems) {
  Lt lt;
  DeviceBuffer<float> A(6), B(6), D(4);
  // k disagrees (A 2×3, B 2×2), ld below the row count, D of the wrong shape, D beyond its buffer.
  EXPECT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 2, B.data(), 2, 2, 2, D.data(), 2, 2, 2, 1.0f, 0.0f),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 1, B.data(), 3, 2, 3, D.data(), 2, 2, 2, 1.0f, 0.0f),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 2, B.data(), 3, 2, 3, D.data(), 2, 1, 2, 1.0f, 0.0f),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 2, B.data(), 3, 2, 3, D.data(), 2, 2, 3, 1.0f, 0.0f),
            CUBLAS_STATUS_INVALID_VALUE);
  // bf16 D needs bf16 operands.
  DeviceBuffer<__nv_bfloat16> Dh(4);
  EXPECT_EQ(lt.matmul(CUBLAS_OP_N, CUBLAS_OP_N, A.data(), 2, 3, 2, B.data(), 3, 2, 3, Dh.data(), 2, 2, 2, 1.0f, 0.0f),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

}  // namespace
