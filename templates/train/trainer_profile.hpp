// train --profile N: which steps the step profile counts and times, and its outputs
// (profile/step_profile.hpp: how ops are timed; profile/profile_report.hpp: the table and
// RUN/profile.json). The run trains kWarmup + N steps: the first warm-up step pays one-time
// costs (cuBLASLt's algorithm choice, first launches), the last one counts the step's ops to size
// the clock's marks, then N steps are timed, each read back at its end (every profiled step is a
// complete step: queued, run, and its values read), with the metrics due at it.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include "engine/engine.hpp"
#include "profile/profile_report.hpp"
#include "profile/step_profile.hpp"
#include "runtime/atomic_file.hpp"

namespace gc::tree {

class StepProfiler {
 public:
  static constexpr int kWarmup = 2;

  StepProfiler(Engine& engine, std::int64_t first_step)
      : engine_(engine), first_step_(first_step), clock_(engine.make_profile_clock()), recorder_(*clock_) {
    engine_.attach_profiler(&recorder_);
  }
  ~StepProfiler() { engine_.attach_profiler(nullptr); }
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  profile::Recorder* recorder() { return &recorder_; }

  // Around every step of the run (every rank).
  void before_step(std::int64_t step) {
    const std::int64_t k = step - first_step_;
    if (k == kWarmup - 1) recorder_.begin_counting();
    if (k >= kWarmup) recorder_.begin_step();
  }
  void after_step(std::int64_t step) {
    const std::int64_t k = step - first_step_;
    if (k == kWarmup - 1) recorder_.end_counting();
    if (k >= kWarmup) recorder_.end_step();
  }

  // RUN/profile.json and the table on standard output (rank 0).
  void report(const std::string& run_dir, const profile::ReportInfo& info) const {
    const std::string path = run_dir + "/profile.json";
    gc::rt::write_file_atomic(path, profile::profile_json(recorder_, info).dump(2) + "\n");
    std::printf("%s", profile::profile_table(recorder_, info).c_str());
    std::printf("written: %s\n", path.c_str());
    std::fflush(stdout);
  }

 private:
  Engine& engine_;
  std::int64_t first_step_;
  std::unique_ptr<profile::Clock> clock_;
  profile::Recorder recorder_;
};

}  // namespace gc::tree
