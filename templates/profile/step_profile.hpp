// The step profile (train --profile): every backend op of a training step timed by the backend's
// own clock (CUDA events on the GPU's work queue, the wall clock on the CPU), grouped by what the
// op does, without nsys. Neutral ground: the model, the trainer and both backends include it; a
// backend only supplies a Clock (cpu/profile_clock.hpp, cuda/profile_clock.cuh).
//
// How it works. The model and the trainer open a Scope around each call that queues work
// (model_impl.hpp, moe_block.hpp, trainer_impl.hpp). A Scope asks the Recorder for two marks,
// before and after the call; the Clock records a mark where the work is queued (an event on the
// GPU's stream), so the time between two marks is the time the device spent on the call. A step
// is bracketed by two more marks: step time minus the summed op time is idle time (launch gaps,
// host work the device waited for, host-to-device syncs inside the step). A scope opened inside
// another (the evaluation forward inside "measuring") is not timed: nothing is counted twice.
//
// No allocation while profiling: a counting step first sizes the marks and the per-step entries
// (Recorder::end_counting), Clock::reserve allocates the events, and the profiled steps only
// fill what exists. Categories are shared with bench/torch_baseline.py's profile of the PyTorch
// baseline (the same strings), so bench/profile_compare.py joins the two tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace gc::tree::profile {

// What an op does, as the tables group it. GEMMs by projection; lm_head_ce is the LM head's
// GEMMs and the cross-entropy together (the unit PyTorch's fused kernels make of them).
enum class Category : std::uint8_t {
  attention,
  gemm_qkv,
  gemm_attn_out,
  gemm_attn_gate,
  gemm_mlp_in,
  gemm_mlp_down,
  gemm_router,
  gemm_experts,
  gemm_other,
  lm_head_ce,
  norm,
  rope,
  swiglu,
  gate,
  embedding,
  moe_routing,
  optimizer,
  communication,
  measuring,
  other,
};
inline constexpr int kCategories = int(Category::other) + 1;
inline constexpr const char* kCategoryNames[kCategories] = {
    "attention",  "gemm.qkv", "gemm.attn_out", "gemm.attn_gate", "gemm.mlp_in", "gemm.mlp_down", "gemm.router",
    "gemm.experts", "gemm.other", "lm_head_ce", "norm", "rope", "swiglu", "gate", "embedding", "moe_routing",
    "optimizer", "communication", "measuring", "other"};
inline const char* name_of(Category c) { return kCategoryNames[int(c)]; }

enum class Pass : std::uint8_t { forward, backward, step };
inline constexpr Pass kFwd = Pass::forward, kBwd = Pass::backward;
inline const char* name_of(Pass p) {
  return p == Pass::forward ? "forward" : p == Pass::backward ? "backward" : "step";
}

// One timed region: its category, the backend call (a string literal), the pass, and the work
// it does: FLOPs for GEMMs and attention, else the fewest bytes it must move (each input read
// once, each output written once), from which the tables give TFLOP/s or GB/s.
struct OpTag {
  Category category;
  const char* op;
  Pass pass;
  double flops = 0.0;
  double bytes = 0.0;
};

// A GEMM y[rows, out] = x[rows, in]·Wᵀ: 2·rows·in·out FLOPs forward; its backward (dx and dW)
// twice that.
inline OpTag gemm(Category c, Pass p, std::int64_t rows, std::int64_t in, std::int64_t out) {
  const double flops = 2.0 * double(rows) * double(in) * double(out) * (p == Pass::backward ? 2.0 : 1.0);
  return {c, p == Pass::forward ? "linear_forward" : "linear_backward", p, flops, 0.0};
}
// A memory-bound op moving `bytes`.
inline OpTag memory(Category c, const char* op, Pass p, double bytes) { return {c, op, p, 0.0, bytes}; }

// The backend's clock. Marks are numbered from 0 in the order the work is queued.
class Clock {
 public:
  virtual ~Clock() = default;
  // Allocates everything `marks` marks need (before the profiled steps).
  virtual void reserve(int marks) = 0;
  // Mark i at this point of the work queue (i < the reserved count).
  virtual void mark(int i) = 0;
  // Waits for marks 0 .. n−1 and writes ms[i] = milliseconds from mark 0 to mark i.
  virtual void read_ms(int n, double* ms) = 0;
  // What the clock measures (the table's header and profile.json).
  virtual const char* describe() const = 0;
};

// The totals of one distinct (category, op, pass) over the profiled steps (tag: the first seen).
struct OpTotals {
  OpTag tag;
  std::int64_t calls = 0;
  double ms = 0.0;
  double flops = 0.0;
  double bytes = 0.0;
};

class Recorder {
 public:
  static constexpr int kOff = -1;     // open(): not profiling (close not called)
  static constexpr int kNested = -2;  // open(): inside another scope (not timed)
  static constexpr std::size_t kMaxKinds = 256;  // distinct (category, op, pass) kept without allocating

  explicit Recorder(Clock& clock) : clock_(clock) { totals_.reserve(kMaxKinds); }

  // A counting step: scopes are counted, not timed; end_counting sizes the clock and the tables
  // for steps of up to `slack` times as many scopes (a step may vary: the measuring of a step).
  void begin_counting() {
    state_ = State::counting;
    counted_ = 0;
  }
  void end_counting(int slack = 2) {
    capacity_ = std::max(counted_, 1) * slack;
    clock_.reserve(2 * capacity_ + 2);
    entries_.resize(std::size_t(capacity_));
    ms_.resize(std::size_t(2 * capacity_ + 2));
    state_ = State::idle;
  }

  // A profiled step: begin_step .. end_step bracket it; end_step waits for the clock and adds
  // the step's ops to the totals.
  void begin_step() {
    state_ = State::timing;
    used_ = 0;
    clock_.mark(0);
  }
  void end_step() {
    const int last = 2 * used_ + 1;
    clock_.mark(last);
    state_ = State::idle;
    clock_.read_ms(last + 1, ms_.data());
    step_ms_ += ms_[std::size_t(last)];
    for (int e = 0; e < used_; ++e) {
      const Entry& entry = entries_[std::size_t(e)];
      OpTotals& t = totals_[std::size_t(entry.key)];
      t.calls += 1;
      t.ms += ms_[std::size_t(2 * e + 2)] - ms_[std::size_t(2 * e + 1)];
      t.flops += entry.flops;
      t.bytes += entry.bytes;
    }
    steps_ += 1;
  }

  // A scope opens: returns its slot (for close), kNested, or kOff.
  int open(const OpTag& tag) {
    if (state_ == State::idle) return kOff;
    if (depth_++ > 0) return kNested;
    if (state_ == State::counting) {
      ++counted_;
      key_of(tag);
      return kNested;
    }
    if (used_ == capacity_) overflowed_ = true;
    if (overflowed_) return kNested;  // more scopes than the counting step: reported, not timed
    const int slot = used_++;
    entries_[std::size_t(slot)] = {key_of(tag), tag.flops, tag.bytes};
    clock_.mark(2 * slot + 1);
    return slot;
  }
  void close(int slot) {
    --depth_;
    if (slot >= 0) clock_.mark(2 * slot + 2);
  }

  int steps() const { return steps_; }
  double step_ms() const { return steps_ > 0 ? step_ms_ / steps_ : 0.0; }
  bool overflowed() const { return overflowed_; }
  const std::vector<OpTotals>& totals() const { return totals_; }
  const char* clock_name() const { return clock_.describe(); }

 private:
  enum class State { idle, counting, timing };

  struct Entry {
    int key;  // index in totals_
    double flops, bytes;
  };

  // The index of the (category, op, pass) totals, added on first sight: the counting step sees
  // every kind of op a step has, so the profiled steps find theirs without growing the table.
  int key_of(const OpTag& tag) {
    for (std::size_t i = 0; i < totals_.size(); ++i) {
      const OpTag& t = totals_[i].tag;
      if (t.category == tag.category && t.pass == tag.pass && std::strcmp(t.op, tag.op) == 0) return int(i);
    }
    totals_.push_back({tag});
    return int(totals_.size() - 1);
  }

  Clock& clock_;
  State state_ = State::idle;
  int depth_ = 0;
  int counted_ = 0, capacity_ = 0, used_ = 0, steps_ = 0;
  bool overflowed_ = false;
  double step_ms_ = 0.0;
  std::vector<Entry> entries_;  // per scope of the current step
  std::vector<double> ms_;
  std::vector<OpTotals> totals_;
};

// A timed region: nothing when the recorder is null or not profiling.
class Scope {
 public:
  Scope(Recorder* r, const OpTag& tag) : r_(r), slot_(r ? r->open(tag) : Recorder::kOff) {}
  ~Scope() {
    if (slot_ != Recorder::kOff) r_->close(slot_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Recorder* r_;
  int slot_;
};

// Runs call() as one timed region of the step profile (nothing extra unless profiling).
template <typename F>
void timed(Recorder* r, const OpTag& tag, F&& call) {
  Scope scope(r, tag);
  call();
}

}  // namespace gc::tree::profile
