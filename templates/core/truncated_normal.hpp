// The truncated normal's std factor, written once for the tree (core/philox.hpp's trunc_normal
// init) and gcompile's plan (a trunc_normal tensor's effective init std: compiler/plan/plan.cpp).
#pragma once

#include <cmath>

namespace gc::tree::core {

// Std of N(0,1) truncated to [−c, c]: sqrt(1 − 2cφ(c) / (2Φ(c) − 1)).
inline double truncated_normal_std_factor(double cutoff) {
  const double pdf = std::exp(-0.5 * cutoff * cutoff) / std::sqrt(2.0 * 3.14159265358979323846);
  const double mass = std::erf(cutoff / std::sqrt(2.0));  // 2Φ(c) − 1
  return std::sqrt(1.0 - 2.0 * cutoff * pdf / mass);
}

}  // namespace gc::tree::core
