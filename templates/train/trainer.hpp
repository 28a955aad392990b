// The training loop: gradient accumulation over micro-batches, global
// grad-norm clipping, AdamW with decoupled weight decay and per-tensor lr
// multipliers (plan.hpp), evaluation, JSON Lines metrics and atomic
// checkpoints. The step itself runs on an Engine (engine/engine.hpp: the CPU,
// or the GPU when the tree has the CUDA backend); the run's state lives on the
// host for checkpoints and metrics. Deterministic: a resumed run continues
// bit-identically.
//
// This header declares the class; its members are defined in three ordinary headers, each with
// its own includes, which a program that builds a Trainer includes (train_main.cpp): the loop
// (trainer_impl.hpp), checkpoints (trainer_checkpoint.hpp) and measuring (trainer_metrics.hpp, at
// the steps of metrics_schedule.hpp). The host copy of the state with its freshness:
// host_state.hpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine/engine.hpp"
#include "metrics/collector.hpp"
#include "runtime/anchor.hpp"
#include "runtime/comm.hpp"
#include "runtime/metrics_log.hpp"
#include "runtime/token_shard.hpp"
#include "runtime/watchdog.hpp"
#include "train/host_state.hpp"
#include "train/metrics_schedule.hpp"
#include "train/trainer_profile.hpp"

namespace gc::tree {

// The watchdog's default limit (runtime/watchdog.hpp): longer than any legitimate step, evaluation or
// checkpoint of the specs this project trains, short of a job's wall time.
inline constexpr double kDefaultWatchdogSeconds = 1800.0;

struct TrainOptions {
  std::string run_dir;
  std::string train_data = kTrainData, val_data = kValData;
  std::int64_t steps = kTotalSteps;  // stop after this many steps (≤ the schedule's total)
  bool resume = false;
  std::string checkpoint;  // with resume: which checkpoint (step_N or N); "" = the latest
  std::string init_from;   // a fresh run's initial weights from a `gcompile export` directory ("" = the init)
  bool progress = false;  // live progress line (on a terminal)
  std::string device = "auto";  // cpu, cuda, or auto (CUDA when present)
  bool metrics = true;          // false: no in-loop analyses (timing runs); losses are still logged
  bool checkpoints = true;      // false: save nothing (timing runs)
  std::int64_t log_every = kLogEvery;
  int expert_parallel = kExpertParallel;  // ranks per expert-parallel group (--expert-parallel)
  // A rank's experts receive at most this many times its own assignments (0: the dropless worst
  // case; --expert-exchange-factor).
  double expert_exchange_factor = kExpertExchangeFactor;
  RouteChoice expert_route = RouteChoice::automatic;  // --expert-route
  core::KernelChoices kernels;  // --attention, --experts
  int profile_steps = 0;  // --profile N: time N steps after StepProfiler::kWarmup (0: no profile)
  double profile_ceiling_tflops = 0.0, profile_ceiling_gbps = 0.0;  // --profile-ceilings (0: unknown)
  double watchdog_s = kDefaultWatchdogSeconds;  // --watchdog-s: stop when no progress for this long (0: off)
};

// train.precision = "bf16" applies to the CUDA backend: said once, by the root rank, when a bf16
// tree trains on the CPU. (Here rather than in train_main.cpp: the specializer prunes the branch in
// the headers' shared parse, and train_main.cpp, left with no `if constexpr`, is not parsed at all.)
inline void note_cpu_precision(bool root, bool on_device) {
  if constexpr (kPrecision == Precision::bf16) {
    if (root && !on_device) {
      std::fprintf(stderr, "train: note: train.precision = \"bf16\" applies to the CUDA backend; the CPU backend "
                           "computes in fp32\n");
    }
  }
}

// The greedy sample at the end runs on the CPU; on a GPU run it is skipped above this size.
inline constexpr std::int64_t kHostSampleMaxParams = 50'000'000;

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  // Runs to options.steps; returns the process exit status.
  int run();
  std::string describe() const { return engine_->describe(); }
  bool on_device() const { return host_.on_device(); }

 private:
  // Queues step `step` (counted from 0) on the engine and makes its per-step records. With
  // `read` its values are read back (readout_; on a GPU a wait): false when the run has stopped
  // (a step so far was not finite; the verdict names it).
  bool train_step(std::int64_t step, bool read);
  bool read_due(std::int64_t step) const;
  void check_replicas(std::int64_t step);
  void choose_engine();
  void report(std::int64_t step, double loss, double lr, double grad_norm, double tokens_per_s, double elapsed);

  // Checkpoints (train/trainer_checkpoint.hpp).
  void resume();
  void init_from_export();
  void save(std::int64_t step);

  // Measuring (train/trainer_metrics.hpp). evaluate: the mean validation loss; with `metrics`,
  // also feeds it every batch's activations. measure: evaluation and metrics after `s` completed
  // steps (s = 0: at initialization).
  // shift: start at the shift-th batch (join_measure; each batch once, in a rotated order).
  double evaluate(metrics::ActivationMetrics* metrics = nullptr, std::size_t shift = 0);
  // The same mean with the batches split over the world's ranks (every rank calls it); used
  // where no activation metric needs every batch on rank 0 (splits_validation).
  double evaluate_split();
  bool splits_validation(const metrics::MetricsDue& due) const { return comm_.distributed() && !due.any_activation(); }
  // What a measurement after s steps runs: the validation pass (for the loss, the initial loss or
  // the activation metrics), the anchor task, the weight metrics.
  struct MeasureParts {
    metrics::MetricsDue due;
    bool initial_loss = false, anchor = false, evaluation = false;
  };
  MeasureParts measure_parts(std::int64_t s, bool eval_due) const;
  // A rank that measures nothing itself joins rank 0's collectives (trainer_impl.hpp): its share
  // of the validation loss (evaluate_split), its group's forwards where rank 0 runs them alone
  // and the engine splits the experts' weights, the weight metrics' when they are assembled
  // from shards.
  void join_measure(std::int64_t s, bool eval_due);
  void join_weight_metrics(std::int64_t s);
  void measure(std::int64_t s, bool eval_due, gc::rt::MetricsWriter& log);
  gc::rt::anchor::Scores anchor_accuracies(std::size_t stand_in = 0);
  void write_anchor_record(std::int64_t s, gc::rt::MetricsWriter& log);
  void write_summary(gc::rt::MetricsWriter& log, double elapsed);
  std::int64_t planned_gradient_slots(int zero_ranks) const;
  std::int64_t planned_weight_bytes(int zero_ranks) const;
  void print_sample();

  TrainOptions opt_;
  const gc::rt::Comm& comm_;  // the data-parallel job (a world of one without a launcher)
  HostState host_;  // parameters and moments as checkpoints and metrics read them
  std::unique_ptr<Engine> engine_;
  StepRecordSchedule records_;
  gc::rt::ShardSet train_;
  std::vector<gc::rt::Batch> val_batches_;
  std::vector<double> val_losses_;  // evaluate_split: one loss per validation batch
  std::int64_t validation_forwards_ = 0;  // this rank's in the last evaluation (its measurement record)
  std::int64_t start_step_ = 0;
  const StepReadout* readout_ = nullptr;  // the engine's values of the last step read
  double last_aux_loss_ = 0.0;  // MoE balancing loss of the last step (mean over micro-batches)
  std::vector<int> top_tokens_;      // embedding_cosine: the most frequent training tokens
  std::vector<float> anchor_logits_;  // the anchor task's logits on their way from a GPU
  std::vector<Json> step_records_;   // grad_norm and update_ratio of the last step
  std::vector<double> step_seconds_;  // wall time of each step of this process (summary)
  std::int64_t peak_device_bytes_ = 0;
  Engine::ExchangeTotals measuring_exchanges_;  // the expert exchanges of measure()'s forwards
  std::int64_t allocations_after_first_step_ = 0;
  std::int64_t host_allocations_in_steps_ = 0;  // operator new calls inside train_step after the first step
  gc::rt::Batch batch_;                         // the micro-batch being trained on, reused
  std::vector<std::int32_t> inputs_, targets_;  // its inputs and targets, reused
  double metrics_seconds_ = 0.0;      // time spent measuring (logged as metrics_s)
  std::int64_t metrics_device_to_host_bytes_ = 0;  // copied from a GPU by measuring (summary record)
  std::int64_t device_to_host_copies_in_steps_ = 0;  // made by the steps after the first (summary record)
  std::int64_t device_to_host_copies_in_unread_steps_ = 0;  // by those of them that read nothing back
  std::int64_t unread_steps_ = 0;                           // how many of them read nothing back
  std::int64_t replica_checks_ = 0;                 // the replicas compared equal (check_replicas)
  std::vector<std::int64_t> replica_fingerprints_;  // every rank's, at the last check
  std::int64_t measurements_ = 0;                  // measure() calls that measured something
  std::unique_ptr<StepProfiler> profiler_;         // train --profile (null: not profiling)
  std::unique_ptr<gc::rt::Watchdog> watchdog_;     // after engine_: stops before the engine goes
  void start_watchdog();
  // Progress for the watchdog: the step in flight and what this rank does in it.
  void beat(std::int64_t step, const char* phase) {
    if (watchdog_) watchdog_->beat(step, phase);
  }
  void beat(const char* phase) {
    if (watchdog_) watchdog_->beat(phase);
  }
  profile::Recorder* recorder() { return profiler_ ? profiler_->recorder() : nullptr; }
  void write_profile() const;
};

}  // namespace gc::tree
