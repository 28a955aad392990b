// The CUDA engine's bucketed gradient reduction (engine/cuda_engine.cu, docs/distributed.md).
// During a rank's last micro-batch of a step the backward pass reports each layer's gradients
// final (BasicModel::on_layer_grads_done: the tensors after the layer stack first, then layer
// L−1 down to 0); once the final layers make a bucket of at least distributed.bucket_mb they are
// reduced on a second stream while the backward pass goes on, and what is left after it (the
// embedding, a partial bucket) follows. Buckets follow the layer stack in the gradients' layout
// (engine/layer_stack.hpp) where the layout allows; otherwise nothing is planned and the engine
// reduces everything after the backward pass. What a reduction does (all-reduce, ZeRO-1's
// per-owner reduce, expert parallelism's runs) is the engine's `reduce` callable.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "config.hpp"
#include "engine/layer_stack.hpp"
#include "model/state_layout.hpp"
#include "runtime/cuda/check.hpp"

namespace gc::tree {

class GradientBuckets {
 public:
  // reduce(a, b, stream): Σ over the ranks of gradient slots [a, b), queued on `stream`.
  using Reduce = std::function<void(std::int64_t, std::int64_t, cudaStream_t)>;
  explicit GradientBuckets(Reduce reduce) : reduce_(std::move(reduce)) {}
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;
  ~GradientBuckets() {
    if (stream_ == nullptr) return;
    cudaStreamDestroy(stream_);
    cudaEventDestroy(backward_queued_);
    cudaEventDestroy(reduced_);
  }

  // The buckets of `layout` (called again when expert parallelism changes it); none when the
  // layout does not allow buckets by layer. True when planned.
  bool plan(const StateLayout& layout) {
    const std::optional<LayerStack> stack = contiguous_layer_stack(layout);
    if (!stack) return false;
    total_ = layout.total();
    layer_begin_ = stack->begin;
    stack_end_ = reduced_from_ = stack->end;
    if (stream_ == nullptr) {
      GC_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
      GC_CUDA_CHECK(cudaEventCreateWithFlags(&backward_queued_, cudaEventDisableTiming));
      GC_CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
    }
    return true;
  }
  // Before a rank's last micro-batch of a step: its backward pass reduces as it goes.
  void arm() {
    armed_ = stream_ != nullptr;
    reductions_ = ordered_ = 0;
  }
  bool armed() const { return armed_; }
  // The model's hook. l = kLayers: the tensors after the layer stack (final norm, untied LM
  // head) are final: one bucket of their own, at once. Else layers l … L−1 are final: reduce
  // them once they make a full bucket (layer 0 always ends one).
  void layer_done(int l) {
    if (!armed_) return;
    if (l == kLayers) {
      reduce(stack_end_, total_);
      head_reduced_ = true;
      return;
    }
    const std::int64_t from = layer_begin_[std::size_t(l)];
    const double bytes = double(reduced_from_ - from) * sizeof(float);
    if (l > 0 && bytes < kBucketMb * double(1 << 20)) return;
    reduce(from, reduced_from_);
    reduced_from_ = from;
  }
  // After the armed backward pass: what the hooks left (the tensors before the layer stack, the
  // rest of the stack when the last bucket was not full, and, had the head's hook not come, the
  // tensors after the stack); then the default stream waits for every bucket.
  void finish() {
    reduce(0, reduced_from_);
    if (!head_reduced_) reduce(stack_end_, total_);
    GC_CUDA_CHECK(cudaEventRecord(reduced_, stream_));
    GC_CUDA_CHECK(cudaStreamWaitEvent(nullptr, reduced_, 0));
    armed_ = head_reduced_ = false;
    reduced_from_ = stack_end_;
  }
  // Issue 41: a collective on another communicator queued on the compute stream (an expert
  // exchange) starts after the bucket reductions queued before it, and each later reduction
  // waits for the compute stream (backward_queued_): every rank runs its collectives in program
  // order, so no rank holds one communicator while waiting on the other.
  void order_before_collective() {
    if (!armed_ || reductions_ == ordered_) return;
    GC_CUDA_CHECK(cudaEventRecord(reduced_, stream_));
    GC_CUDA_CHECK(cudaStreamWaitEvent(nullptr, reduced_, 0));
    ordered_ = reductions_;
  }
  // The engine reduced everything in one collective after the backward pass.
  void note_single_reduction() { reductions_ = 1; }
  // Gradient reductions issued in the current (or last) step.
  int reductions() const { return reductions_; }

 private:
  // Slots [a, b) on the reduction stream, after the work queued so far.
  void reduce(std::int64_t a, std::int64_t b) {
    if (b <= a) return;
    GC_CUDA_CHECK(cudaEventRecord(backward_queued_, nullptr));
    GC_CUDA_CHECK(cudaStreamWaitEvent(stream_, backward_queued_, 0));
    reduce_(a, b, stream_);
    ++reductions_;
  }

  Reduce reduce_;
  std::int64_t total_ = 0;           // the layout's slots
  std::vector<std::int64_t> layer_begin_;  // each layer's first slot
  std::int64_t stack_end_ = 0, reduced_from_ = 0;  // the stack's end; where this step's reduced part starts
  bool armed_ = false;         // the backward pass being queued is the step's last on this rank
  bool head_reduced_ = false;  // this step's tensors after the layer stack are being reduced
  int reductions_ = 0;
  int ordered_ = 0;  // of them, those a collective on the compute stream already waited for
  cudaStream_t stream_ = nullptr;
  cudaEvent_t backward_queued_ = nullptr, reduced_ = nullptr;
};

}  // namespace gc::tree
