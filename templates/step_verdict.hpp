// The end of a training step, shared by both engines: the CPU engine calls judge_step on the
// host, the CUDA engine in a one-thread kernel on the device (cuda/adamw.cuh), so a GPU step
// needs no host round trip before its AdamW update.
//
// From the step's loss and each tensor's Σ g² (kParams order, over the global batch):
//   grad_norm = √(Σ_i squares_i), added in tensor order  (= cpu::global_norm)
//   clip      = min(1, max_norm / (grad_norm + 1e-6))    (= cpu::clip_scale: torch's
//               clip_grad_norm_; 1 when max_norm ≤ 0)
// and the verdict: the first step whose loss or norm is not finite is recorded, and from that
// step on AdamW changes nothing (the state stays that of the last finite step). The trainer
// reads the verdict only when it logs, measures or saves (train/trainer_impl.hpp) and stops
// there, naming the recorded step.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/host_device.hpp"

namespace gc::tree {

struct StepVerdict {
  double loss = 0.0;       // the step's mean cross-entropy over the global batch
  double grad_norm = 0.0;  // before clipping
  double clip = 1.0;       // the multiplier AdamW applies to the gradients
  std::int64_t stopped_at = 0;  // the first step (counted from 1) that was not finite; 0: none yet
  double stopped_loss = 0.0, stopped_norm = 0.0;  // that step's loss and gradient norm
};

// The planner counts its device copy (compiler/plan/plan.cpp: estimate_engine_scratch_bytes).
static_assert(sizeof(StepVerdict) == 48, "the planner counts 48 bytes for the CUDA engine's verdict");

// False for ±inf and NaN (x − x is NaN exactly then), the same on the host and the device.
GC_HD inline bool is_finite_value(double x) { return x - x == 0.0; }

// Step `step` (counted from 1) into `v`; `v` keeps an earlier step's stop.
GC_HD inline void judge_step(StepVerdict& v, double loss, const double* squares, int num_tensors,
                                      double max_norm, std::int64_t step) {
  double total = 0.0;
  for (int i = 0; i < num_tensors; ++i) total += squares[i];
  v.loss = loss;
  v.grad_norm = sqrt(total);
  v.clip = 1.0;
  if (max_norm > 0.0) {
    const double coef = max_norm / (v.grad_norm + 1e-6);
    v.clip = coef < 1.0 ? coef : 1.0;
  }
  if (v.stopped_at == 0 && !(is_finite_value(loss) && is_finite_value(v.grad_norm))) {
    v.stopped_at = step;
    v.stopped_loss = loss;
    v.stopped_norm = v.grad_norm;
  }
}

}  // namespace gc::tree
