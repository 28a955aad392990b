// Helpers for the CPU kernel tests: seeded random inputs, relative errors, central finite
// differences of a scalar loss, and running a callable under a fixed OpenMP thread count.
#pragma once

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gc::test::kernels {

// Uniform values in ±[lo, hi] with a random sign: never zero, never tiny.
inline std::vector<double> random_vector(std::size_t n, unsigned seed, double lo = 0.1, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> mag(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(n);
  for (double& x : v) {
    x = sign(gen) ? mag(gen) : -mag(gen);
  }
  return v;
}

inline std::vector<double> random_normal(std::size_t n, unsigned seed, double std_dev = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, std_dev);
  std::vector<double> v(n);
  for (double& x : v) {
    x = dist(gen);
  }
  return v;
}

inline std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, vocab - 1);
  std::vector<std::int32_t> v(n);
  for (auto& t : v) {
    t = dist(gen);
  }
  return v;
}

template <typename T, typename S>
std::vector<T> cast(const std::vector<S>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// ‖got − ref‖₂ / ‖ref‖₂.
template <typename A>
double rel_error(const std::vector<A>& got, const std::vector<double>& ref) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    diff += d * d;
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff) / std::sqrt(norm);
}

template <typename A>
double dot(const std::vector<double>& r, const std::vector<A>& y) {
  double s = 0.0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    s += r[i] * double(y[i]);
  }
  return s;
}

// ∂loss/∂x by central differences; loss() reads x (captured by reference). x is restored.
inline std::vector<double> numeric_grad(std::vector<double>& x, const std::function<double()>& loss, double h = 1e-6) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double plus = loss();
    x[i] = saved - h;
    const double minus = loss();
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * h);
  }
  return grad;
}

// Element-wise difference a − b (for accumulate-into-prior checks).
inline std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    d[i] = a[i] - b[i];
  }
  return d;
}

// Runs f with omp_set_num_threads(n), restoring the previous setting.
template <typename F>
void with_threads(int n, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// One line per measured error, grep-able as "[kernel-error]".
inline void report(const std::string& what, double error) {
  std::printf("[kernel-error] %-48s %.3e\n", what.c_str(), error);
}

inline constexpr double kForwardTol = 1e-5;  // fp32 kernel vs float64 reference
inline constexpr double kGradTol = 1e-6;     // float64 backward vs central differences

}  // namespace gc::test::kernels
