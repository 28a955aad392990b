// Comparing two training runs (the data-parallel tests): the worst relative difference of
// their losses, and of their parameters in two checkpoints.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "runtime/safetensors.hpp"

namespace gc::test {

// max_i |a_i − b_i| / |a_i| (infinite when the lengths differ).
inline double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::abs(a[i]));
  }
  return worst;
}

// ‖a − b‖ / ‖a‖ over every tensor of two checkpoints' model.safetensors, the worst.
inline double max_param_diff(const std::filesystem::path& a, const std::filesystem::path& b) {
  const auto fa = gc::rt::read_safetensors((a / "model.safetensors").string());
  const auto fb = gc::rt::read_safetensors((b / "model.safetensors").string());
  double worst = 0.0;
  for (const auto& t : fa.tensors()) {
    const auto x = fa.load_f32(t.name), y = fb.load_f32(t.name);
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      diff += double(x[i] - y[i]) * double(x[i] - y[i]);
      norm += double(x[i]) * double(x[i]);
    }
    worst = std::max(worst, norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff));
  }
  return worst;
}

}  // namespace gc::test
