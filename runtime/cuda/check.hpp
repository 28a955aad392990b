// Error checking and device memory for the CUDA backend. Every CUDA runtime
// and cuBLASLt call goes through GC_CUDA_CHECK / GC_CUBLAS_CHECK, and every
// kernel launch is followed by GC_CUDA_CHECK_LAUNCH(), so a failure names the
// call, the file and the line:
//
//   templates/cuda/rmsnorm.cuh:88: cudaGetLastError(): invalid configuration argument
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "runtime/error.hpp"

namespace gc::rt::cuda {

[[noreturn]] inline void fail(const char* file, int line, const char* call, const std::string& what) {
  throw RuntimeError(std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + what);
}

inline void check(cudaError_t status, const char* file, int line, const char* call) {
  if (status != cudaSuccess) fail(file, line, call, cudaGetErrorString(status));
}

}  // namespace gc::rt::cuda

#define GC_CUDA_CHECK(call) ::gc::rt::cuda::check((call), __FILE__, __LINE__, #call)
#define GC_CUDA_CHECK_LAUNCH() ::gc::rt::cuda::check(cudaGetLastError(), __FILE__, __LINE__, "kernel launch")

namespace gc::rt::cuda {

// Live bytes and the number of cudaMalloc calls made through DeviceBuffer:
// the trainer logs both, so "no allocation inside the training loop" is
// checked on every run rather than assumed.
struct AllocationStats {
  std::int64_t live_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t allocations = 0;
};
inline AllocationStats& allocation_stats() {
  static AllocationStats stats;
  return stats;
}

// Bytes copied device → host through DeviceBuffer::download and copy_to_host: the trainer
// reports what its metrics copied (metrics_device_to_host_bytes), so the cost of measuring on a
// GPU is counted on every run, under the emulator too.
struct TransferStats {
  std::int64_t device_to_host_bytes = 0;
  std::int64_t device_to_host_copies = 0;  // each one waits for the GPU (train's summary counts them)
};
inline TransferStats& transfer_stats() {
  static TransferStats stats;
  return stats;
}

// cudaMemcpy device → host, counted.
inline void copy_to_host(void* host, const void* device, std::size_t bytes) {
  GC_CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
  transfer_stats().device_to_host_bytes += std::int64_t(bytes);
  transfer_stats().device_to_host_copies += 1;
}

// An owning device allocation of n elements of T (no copy, moves only). The
// backend allocates every buffer before the training loop starts.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) { resize(n); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = std::exchange(o.ptr_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  // Reallocates (contents are not kept) when the size changes.
  void resize(std::size_t n) {
    if (n == n_) return;
    release();
    if (n > 0) {
      GC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)));
      AllocationStats& stats = allocation_stats();
      stats.live_bytes += std::int64_t(n * sizeof(T));
      stats.peak_bytes = stats.live_bytes > stats.peak_bytes ? stats.live_bytes : stats.peak_bytes;
      ++stats.allocations;
    }
    n_ = n;
  }
  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

  void upload(const T* host, std::size_t n, std::size_t offset = 0) {
    GC_CUDA_CHECK(cudaMemcpy(ptr_ + offset, host, n * sizeof(T), cudaMemcpyHostToDevice));
  }
  void download(T* host, std::size_t n, std::size_t offset = 0) const { copy_to_host(host, ptr_ + offset, n * sizeof(T)); }
  void zero() {
    if (n_ > 0) GC_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, n_ * sizeof(T)));
  }

 private:
  void release() {
    if (ptr_ != nullptr) {
      cudaFree(ptr_);  // no check: may run during unwinding
      allocation_stats().live_bytes -= std::int64_t(n_ * sizeof(T));
    }
    ptr_ = nullptr;
    n_ = 0;
  }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// Number of usable CUDA devices; 0 when there is no GPU or no driver.
inline int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

// The properties of the device this thread's CUDA calls go to.
inline cudaDeviceProp current_device_properties() {
  int device = 0;
  cudaDeviceProp prop{};
  GC_CUDA_CHECK(cudaGetDevice(&device));
  GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop;
}

}  // namespace gc::rt::cuda
