// SwiGLU activation (Shazeer 2020) for the MLP: with a = x·W_gate and b = x·W_up (both from
// linear_forward), the input to W_down is
//
//   h = silu(a) ⊙ b,            silu(a) = a · σ(a)
//   backward  da = dh ⊙ b ⊙ σ(a) · (1 + a · (1 − σ(a)))      (= dh ⊙ b ⊙ silu'(a))
//             db = dh ⊙ silu(a)
//
// Elementwise over n = N · d_ff values; da and db are overwritten (either may alias dh).
#pragma once

#include <cmath>
#include <cstdint>

namespace gcm::cpu {

template <typename T>
void swiglu_forward(T* h, const T* a, const T* b, std::int64_t n) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    const double ai = double(a[i]);
    const double sig = 1.0 / (1.0 + std::exp(-ai));
    h[i] = T(ai * sig * double(b[i]));
  }
}

template <typename T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) {
    const double ai = double(a[i]);
    const double bi = double(b[i]);
    const double grad = double(dh[i]);
    const double sig = 1.0 / (1.0 + std::exp(-ai));
    da[i] = T(grad * bi * sig * (1.0 + ai * (1.0 - sig)));
    db[i] = T(grad * ai * sig);
  }
}

}  // namespace gcm::cpu
