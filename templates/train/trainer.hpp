// The training loop on the CPU backend: gradient accumulation over
// micro-batches, global grad-norm clipping, AdamW with decoupled weight decay
// and per-tensor lr multipliers (plan.hpp), evaluation, JSON Lines metrics and
// atomic checkpoints. Deterministic: a resumed run continues bit-identically.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "config.hpp"
#include "cpu/adamw.hpp"
#include "metrics/collector.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics_log.hpp"
#include "runtime/token_shard.hpp"
#include "train/sample.hpp"
#include "train/schedule.hpp"

namespace gcm {

struct TrainOptions {
  std::string run_dir;
  std::string train_data = kTrainData, val_data = kValData;
  std::int64_t steps = kTotalSteps;  // stop after this many steps (≤ the schedule's total)
  bool resume = false;
  bool progress = false;  // live progress line (on a terminal)
};

class Trainer {
 public:
  explicit Trainer(const TrainOptions& options);
  // Runs to options.steps; returns the process exit status.
  int run();

 private:
  double train_step(std::int64_t step);
  // Mean validation loss; with `metrics`, also feeds it every batch's activations.
  double evaluate(ActivationMetrics* metrics = nullptr);
  // Evaluation and metrics after `s` completed steps (s = 0: at initialization).
  void measure(std::int64_t s, bool eval_due, gc::rt::MetricsWriter& log);
  void per_class_records(std::int64_t s);
  void save(std::int64_t step);
  std::vector<gc::rt::ParamBuffers> buffers();
  void print_sample();
  void report(std::int64_t step, double loss, double lr, double grad_norm, double tokens_per_s, double elapsed);

  TrainOptions opt_;
  Model<float> model_;
  std::vector<float> m_, v_;
  gc::rt::ShardSet train_;
  std::vector<gc::rt::Batch> val_batches_;
  std::int64_t start_step_ = 0;
  double last_grad_norm_ = 0.0;
  std::vector<int> top_tokens_;      // embedding_cosine: the most frequent training tokens
  std::vector<Json> step_records_;   // grad_norm and update_ratio of the last step
  std::vector<float> before_update_;  // update_ratio scratch: one tensor before AdamW
  double metrics_seconds_ = 0.0;      // time spent measuring (logged as metrics_s)
};

// Which metrics are due after s completed steps: every metric at s = 0, then
// each at multiples of its interval; cosine matrices also at the image steps.
inline MetricsDue metrics_due_at(std::int64_t s);

}  // namespace gcm

#include "train/trainer_impl.hpp"
