// Small helpers shared by the CPU kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gc::tree::cpu {

// Per-thread scratch that only grows: kernels allocate nothing once the first
// step has sized it (OpenMP's worker threads persist between calls). Slot
// tells apart buffers a thread needs at the same time. Call it from the
// thread that uses the buffer (inside the parallel region).
// thread_scratch_of<T, Slot> holds elements of T (e.g. a kernel's T×T tile); thread_scratch<Slot>
// doubles.
template <typename T, int Slot>
T* thread_scratch_of(std::size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

template <int Slot>
double* thread_scratch(std::size_t n) {
  return thread_scratch_of<double, Slot>(n);
}

// Blocks template argument deduction, so an optional pointer argument such as a bias may be
// passed as a plain nullptr: `linear_forward(y, x, W, nullptr, ...)` deduces T from the others.
template <typename T>
struct NonDeduced {
  using type = T;
};
template <typename T>
using non_deduced_t = typename NonDeduced<T>::type;

}  // namespace gc::tree::cpu
