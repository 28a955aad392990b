// Small helpers shared by the CPU kernels.
#pragma once

namespace gcm::cpu {

// Blocks template argument deduction, so an optional pointer argument such as a bias may be
// passed as a plain nullptr: `linear_forward(y, x, W, nullptr, ...)` deduces T from the others.
template <typename T>
struct NonDeduced {
  using type = T;
};
template <typename T>
using non_deduced_t = typename NonDeduced<T>::type;

}  // namespace gcm::cpu
