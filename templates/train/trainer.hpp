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
  double evaluate();
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
};

}  // namespace gcm

#include "train/trainer_impl.hpp"
