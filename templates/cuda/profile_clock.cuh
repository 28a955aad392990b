// The CUDA backend's clock for the step profile (profile/step_profile.hpp): a mark is a CUDA
// event recorded on the default stream, where the backend queues every kernel of the step, so
// the time between two marks is the GPU's time on the ops queued between them, and a gap between
// one op's end and the next op's start is time the GPU waited (launches, host work, syncs).
// The events are created by reserve(), before the profiled steps: nothing is allocated in them.
#pragma once

#include <vector>

#include "profile/step_profile.hpp"
#include "runtime/cuda/check.hpp"

namespace gc::tree::cuda {

class EventClock final : public profile::Clock {
 public:
  EventClock() = default;
  EventClock(const EventClock&) = delete;
  EventClock& operator=(const EventClock&) = delete;
  ~EventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  void reserve(int marks) override {
    while (int(events_.size()) < marks) {
      cudaEvent_t e = nullptr;
      GC_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
  }
  void mark(int i) override { GC_CUDA_CHECK(cudaEventRecord(events_[std::size_t(i)], nullptr)); }
  void read_ms(int n, double* ms) override {
    GC_CUDA_CHECK(cudaEventSynchronize(events_[std::size_t(n - 1)]));
    for (int i = 0; i < n; ++i) {
      float elapsed = 0.0f;
      GC_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events_[0], events_[std::size_t(i)]));
      ms[i] = double(elapsed);
    }
  }
  const char* describe() const override { return "CUDA events on the compute stream"; }

 private:
  std::vector<cudaEvent_t> events_;
};

}  // namespace gc::tree::cuda
