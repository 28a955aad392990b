// Host→device copies that do not make the host wait. A plain cudaMemcpy from pageable memory
// returns only after the copy, which the default stream runs after every kernel queued before
// it: each micro-batch's token upload would stall the host until the previous micro-batch's
// backward finished, and the GPU would then idle while the host queued the next forward. Here the
// data is first copied into page-locked host memory and then cudaMemcpyAsync'd on the default
// stream (so it still runs after the kernels that read the previous contents of the device
// buffer), and the host goes on queueing. kSlots page-locked slots are used in turn; before one
// is refilled, the host waits on the event recorded after that slot's previous copy, kSlots
// uploads ago (at most a little backpressure when the GPU runs that far behind).
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>

#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"

namespace gc::rt::cuda {

template <typename T, int kSlots = 10>
class PinnedUploader {
 public:
  PinnedUploader() = default;
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;
  ~PinnedUploader() { release(); }

  // Slots of `capacity` elements each (reallocated, after the pending copies, when it changes).
  void reserve(std::size_t capacity) {
    if (capacity == capacity_) return;
    release();
    for (Slot& s : slots_) {
      GC_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&s.host), (capacity > 0 ? capacity : 1) * sizeof(T)));
      GC_CUDA_CHECK(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming));
    }
    capacity_ = capacity;
  }

  // device[0, n) = host[0, n), queued on the default stream; `host` may be reused at once.
  void upload(T* device, const T* host, std::size_t n) {
    if (n == 0) return;
    if (n > capacity_) {
      throw RuntimeError("PinnedUploader: " + std::to_string(n) + " elements do not fit the " +
                         std::to_string(capacity_) + "-element staging slots");
    }
    Slot& s = slots_[std::size_t(next_)];
    next_ = (next_ + 1) % kSlots;
    GC_CUDA_CHECK(cudaEventSynchronize(s.copied));  // the slot's previous copy has run
    std::memcpy(s.host, host, n * sizeof(T));
    GC_CUDA_CHECK(cudaMemcpyAsync(device, s.host, n * sizeof(T), cudaMemcpyHostToDevice));
    GC_CUDA_CHECK(cudaEventRecord(s.copied));
  }

 private:
  struct Slot {
    T* host = nullptr;
    cudaEvent_t copied = nullptr;
  };
  void release() {
    for (Slot& s : slots_) {  // no checks: may run during unwinding
      if (s.copied != nullptr) {
        cudaEventSynchronize(s.copied);
        cudaEventDestroy(s.copied);
      }
      if (s.host != nullptr) cudaFreeHost(s.host);
      s = Slot{};
    }
    capacity_ = 0;
  }
  std::array<Slot, kSlots> slots_{};
  std::size_t capacity_ = 0;
  int next_ = 0;
};

}  // namespace gc::rt::cuda
