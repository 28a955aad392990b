// SwiGLU activation (Shazeer 2020) for the MLP: with a = x·W_gate and b = x·W_up (both from
// linear_forward), the input to W_down is
//
//   h = silu(a) ⊙ b,            silu(a) = a · σ(a)
//   backward  da = dh ⊙ b ⊙ σ(a) · (1 + a · (1 − σ(a)))      (= dh ⊙ b ⊙ silu'(a))
//             db = dh ⊙ silu(a)
//
// Elementwise over n = N · d_ff values; da and db are overwritten (either may alias dh). The
// pair form reads a and b from one [rows, 2·F] array (row r = [a_r | b_r]: the output of one GEMM
// with the stacked [W_gate; W_up]) and writes [da | db] the same way.
#pragma once

#include <cmath>
#include <cstdint>

#include "exp.hpp"

namespace gc::tree::cpu {

namespace detail {

template <typename T>
inline T value(T a, T b) {
  const double ai = double(a);
  const double sig = 1.0 / (1.0 + exp_fixed(-ai));
  return T(ai * sig * double(b));
}

// da, db of one element (both computed before either is stored: they may alias dh).
template <typename T>
inline void grads(T& da, T& db, T dh, T a, T b) {
  const double ai = double(a);
  const double bi = double(b);
  const double grad = double(dh);
  const double sig = 1.0 / (1.0 + exp_fixed(-ai));
  const T da_value = T(grad * bi * sig * (1.0 + ai * (1.0 - sig)));
  db = T(grad * ai * sig);
  da = da_value;
}

}  // namespace detail

template <typename T>
void swiglu_forward(T* h, const T* a, const T* b, std::int64_t n) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) h[i] = detail::value(a[i], b[i]);
}

template <typename T>
void swiglu_backward(T* da, T* db, const T* dh, const T* a, const T* b, std::int64_t n) {
#pragma omp parallel for
  for (std::int64_t i = 0; i < n; ++i) detail::grads(da[i], db[i], dh[i], a[i], b[i]);
}

// h [rows, F] = silu(a) ⊙ b with ab [rows, 2F], row r = [a_r | b_r].
template <typename T>
void swiglu_pair_forward(T* h, const T* ab, std::int64_t rows, int F) {
#pragma omp parallel for
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* a = ab + r * 2 * F;
    for (int j = 0; j < F; ++j) h[r * F + j] = detail::value(a[j], a[F + j]);
  }
}

// dab [rows, 2F] = [da | db] (overwritten) from dh [rows, F].
template <typename T>
void swiglu_pair_backward(T* dab, const T* dh, const T* ab, std::int64_t rows, int F) {
#pragma omp parallel for
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* a = ab + r * 2 * F;
    T* d = dab + r * 2 * F;
    for (int j = 0; j < F; ++j) detail::grads(d[j], d[F + j], dh[r * F + j], a[j], a[F + j]);
  }
}

}  // namespace gc::tree::cpu
