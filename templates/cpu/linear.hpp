// Linear layer (no activation), PyTorch weight layout.
//
//   forward   y[N,out]  = x[N,in] · W[out,in]^T (+ b[out])
//   backward  dx[N,in]  = dy[N,out] · W[out,in]          (overwritten, or added with accumulate_dx)
//             dW[out,in] += dy^T · x                      (parameter grads always accumulate)
//             db[out]    += Σ_n dy[n,:]
//
// The GEMMs are core/blas.hpp's (CBLAS, or portable loops where no OpenBLAS is installed).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common.hpp"
#include "core/blas.hpp"

namespace gc::tree::cpu {

// y = x · W^T (+ bias). bias may be (a plain) nullptr.
template <typename T>
void linear_forward(T* y, const T* x, const T* W, const non_deduced_t<T>* bias, int N, int in, int out) {
  if (N <= 0 || out <= 0) {
    return;
  }
  if (in > 0) {
    core::blas::gemm(false, true, N, out, in, T(1), x, in, W, in, T(0), y, out);
  } else {
    for (std::int64_t i = 0; i < std::int64_t(N) * out; ++i) {
      y[i] = T(0);
    }
  }
  if (bias != nullptr) {
#pragma omp parallel for
    for (int n = 0; n < N; ++n) {
      for (int o = 0; o < out; ++o) {
        y[std::int64_t(n) * out + o] += bias[o];
      }
    }
  }
}

// dx = dy · W (or dx += dy · W when accumulate_dx). dx may be nullptr (input needs no grad).
template <typename T>
void linear_backward_input(non_deduced_t<T>* dx, const T* dy, const T* W, int N, int in, int out,
                           bool accumulate_dx = false) {
  if (dx == nullptr || N <= 0 || in <= 0) {
    return;
  }
  if (out > 0) {
    core::blas::gemm(false, false, N, in, out, T(1), dy, out, W, in, accumulate_dx ? T(1) : T(0), dx, in);
  } else if (!accumulate_dx) {
    for (std::int64_t i = 0; i < std::int64_t(N) * in; ++i) {
      dx[i] = T(0);
    }
  }
}

// dW += dy^T · x; db += column sums of dy (db may be nullptr). Each output column's bias
// gradient is summed by one thread in row order, so the result does not depend on threads.
template <typename T>
void linear_backward_params(T* dW, non_deduced_t<T>* db, const T* dy, const T* x, int N, int in, int out) {
  if (N <= 0 || out <= 0) {
    return;
  }
  if (in > 0) {
    core::blas::gemm(true, false, out, in, N, T(1), dy, out, x, in, T(1), dW, in);
  }
  if (db != nullptr) {
#pragma omp parallel for
    for (int o = 0; o < out; ++o) {
      double sum = 0.0;
      for (int n = 0; n < N; ++n) {
        sum += double(dy[std::int64_t(n) * out + o]);
      }
      db[o] += T(sum);
    }
  }
}

// Both halves of the backward pass.
template <typename T>
void linear_backward(non_deduced_t<T>* dx, T* dW, non_deduced_t<T>* db, const T* dy, const T* x, const T* W, int N,
                     int in, int out, bool accumulate_dx = false) {
  linear_backward_input(dx, dy, W, N, in, out, accumulate_dx);
  linear_backward_params(dW, db, dy, x, N, in, out);
}

}  // namespace gc::tree::cpu
