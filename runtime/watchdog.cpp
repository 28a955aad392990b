#include "runtime/watchdog.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gc::rt {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Watchdog::Watchdog(double timeout_s, Where where, double period_s)
    : timeout_s_(timeout_s),
      where_(std::move(where)),
      period_(std::chrono::milliseconds(
          std::max<std::int64_t>(10, std::int64_t(1000.0 * std::min(period_s, timeout_s / 10.0))))),
      last_beat_ns_(now_ns()) {
  thread_ = std::thread([this] { watch(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::beat(std::int64_t step, const char* phase) noexcept {
  step_.store(step, std::memory_order_relaxed);
  beat(phase);
}

void Watchdog::beat(const char* phase) noexcept {
  phase_.store(phase, std::memory_order_relaxed);
  last_beat_ns_.store(now_ns(), std::memory_order_release);
}

void Watchdog::add_poll(std::function<std::string()> poll) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  polls_.push_back(std::move(poll));
}

void Watchdog::add_abort_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(hooks_mutex_);
  abort_hooks_.push_back(std::move(hook));
}

std::string Watchdog::describe(const Where& where, std::int64_t step, const char* phase, const std::string& reason) {
  return "train: watchdog: rank " + std::to_string(where.rank) + " of " + std::to_string(where.world) +
         (where.host.empty() ? std::string() : " (host " + where.host + ")") + ", step " + std::to_string(step) +
         ", in " + phase + ": " + reason + "; aborting the communicators and stopping this rank (exit status " +
         std::to_string(kExitStatus) + ")";
}

void Watchdog::watch() {
  std::unique_lock<std::mutex> lock(stop_mutex_);
  while (!stop_cv_.wait_for(lock, period_, [this] { return stop_; })) {
    std::string error;
    {
      std::lock_guard<std::mutex> hooks(hooks_mutex_);
      for (const auto& poll : polls_) {
        error = poll();
        if (!error.empty()) break;
      }
    }
    if (!error.empty()) fire("a communicator reported an asynchronous error: " + error);
    const double idle = double(now_ns() - last_beat_ns_.load(std::memory_order_acquire)) * 1e-9;
    if (idle > timeout_s_) {
      char seconds[96];
      std::snprintf(seconds, sizeof seconds, "no progress for %.1f s (the limit is --watchdog-s %g", idle, timeout_s_);
      fire(std::string(seconds) +
           "; in a collective, another rank is likely stuck or dead; a step, evaluation or checkpoint that "
           "legitimately takes longer needs a larger --watchdog-s)");
    }
  }
}

void Watchdog::fire(const std::string& reason) {
  const std::string message = describe(where_, step_.load(), phase_.load(), reason);
  std::fprintf(stderr, "\n%s\n", message.c_str());
  std::fflush(stderr);
  {
    std::lock_guard<std::mutex> hooks(hooks_mutex_);
    for (const auto& hook : abort_hooks_) hook();
  }
  std::fflush(nullptr);
  // No unwinding (the main thread is blocked inside a collective) and no MPI call from this
  // thread: the launcher sees a rank end without MPI_Finalize and stops the others.
  std::_Exit(kExitStatus);
}

}  // namespace gc::rt
