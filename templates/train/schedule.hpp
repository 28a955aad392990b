// Learning-rate schedule: linear warm-up to the peak, then cosine, linear or
// constant decay to min_lr_ratio · peak at the last step (seed 000 Table 2:
// warm-up ratio 0.03, lr ratio 0.1).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "config.hpp"

namespace gc::tree {

inline double learning_rate(std::int64_t step) {
  if (step < kWarmupSteps) return kLr * double(step + 1) / double(kWarmupSteps);
  const double span = double(std::max<std::int64_t>(1, kTotalSteps - 1 - kWarmupSteps));
  const double progress = std::min(1.0, double(step - kWarmupSteps) / span);
  double factor = 1.0;
  if (kDecay == Decay::cosine) {
    factor = kMinLrRatio + (1.0 - kMinLrRatio) * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
  } else if (kDecay == Decay::linear) {
    factor = kMinLrRatio + (1.0 - kMinLrRatio) * (1.0 - progress);
  }
  return kLr * factor;
}

}  // namespace gc::tree
