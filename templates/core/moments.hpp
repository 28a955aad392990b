// Host sums of values and squares, shared by the CPU backend (cpu/backend.hpp's logit moments)
// and the host-side activation statistics (metrics/activation_stats.hpp).
#pragma once

#include <cstdint>

namespace gc::tree::core {

// acc[0] += Σ scale·x, acc[1] += Σ (scale·x)² over x[0, n), summed serially in double (the same
// sums whatever the thread count) before they are added.
template <typename T>
void add_scaled_moments(double* acc, const T* x, std::int64_t n, double scale) {
  double s = 0.0, sq = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = scale * double(x[i]);
    s += v;
    sq += v * v;
  }
  acc[0] += s;
  acc[1] += sq;
}

}  // namespace gc::tree::core
