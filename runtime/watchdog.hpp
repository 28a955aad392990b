// A hang detector for training runs (issue 41): the trainer's main thread reports progress
// (beat: a step or a phase such as a collective began), and a thread of its own wakes every
// second or so to check that progress came within the timeout and that no communicator reports
// an asynchronous error (the polls registered, e.g. ncclCommGetAsyncError). On a failure it
// prints which rank, host, step and phase, runs the abort hooks (ncclCommAbort: a rank blocked
// in a collective is released) and ends the process with kExitStatus, so the launcher (mpirun;
// srun with --kill-on-bad-exit) stops every rank instead of leaving them waiting until their
// wall time. Nothing here calls MPI from the watchdog's thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gc::rt {

class Watchdog {
 public:
  static constexpr int kExitStatus = 3;  // documented in docs/distributed.md

  struct Where {
    int rank = 0, world = 1;
    std::string host;
  };
  // timeout_s > 0. `period_s`: how often the thread checks (at most a tenth of the timeout).
  Watchdog(double timeout_s, Where where, double period_s = 1.0);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog();  // stops the thread; never fires after this

  // Progress: `step` is the step in flight, `phase` what the rank is doing (a string literal:
  // kept as a pointer).
  void beat(std::int64_t step, const char* phase) noexcept;
  void beat(const char* phase) noexcept;  // the same step, a new phase

  // A communicator's asynchronous error check: "" while healthy, else the error.
  void add_poll(std::function<std::string()> poll);
  // Run when the watchdog fires, before the process ends (e.g. ncclCommAbort).
  void add_abort_hook(std::function<void()> hook);

  // The message printed when it fires (for tests and the log): rank, host, step, phase, reason.
  static std::string describe(const Where& where, std::int64_t step, const char* phase, const std::string& reason);

 private:
  void watch();
  [[noreturn]] void fire(const std::string& reason);

  using Clock = std::chrono::steady_clock;
  const double timeout_s_;
  const Where where_;
  const std::chrono::milliseconds period_;
  std::atomic<std::int64_t> last_beat_ns_;
  std::atomic<std::int64_t> step_{0};
  std::atomic<const char*> phase_{"starting"};
  std::mutex hooks_mutex_;
  std::vector<std::function<std::string()>> polls_;
  std::vector<std::function<void()>> abort_hooks_;
  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gc::rt
