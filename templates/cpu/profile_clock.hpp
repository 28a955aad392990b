// The CPU backend's clock for the step profile (profile/step_profile.hpp): every op runs to its
// end before the call returns, so the wall clock between two marks is the op's time.
#pragma once

#include <chrono>
#include <vector>

#include "profile/step_profile.hpp"

namespace gc::tree::cpu {

class WallClock final : public profile::Clock {
 public:
  void reserve(int marks) override { marks_.resize(std::size_t(marks)); }
  void mark(int i) override { marks_[std::size_t(i)] = std::chrono::steady_clock::now(); }
  void read_ms(int n, double* ms) override {
    for (int i = 0; i < n; ++i) {
      ms[i] = std::chrono::duration<double, std::milli>(marks_[std::size_t(i)] - marks_[0]).count();
    }
  }
  const char* describe() const override { return "wall clock (steady_clock)"; }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

}  // namespace gc::tree::cpu
