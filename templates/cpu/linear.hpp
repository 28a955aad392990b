// Linear layer (no activation), PyTorch weight layout.
//
//   forward   y[N,out]  = x[N,in] · W[out,in]^T (+ b[out])
//   backward  dx[N,in]  = dy[N,out] · W[out,in]          (overwritten, or added with accumulate_dx)
//             dW[out,in] += dy^T · x                      (parameter grads always accumulate)
//             db[out]    += Σ_n dy[n,:]
//
// All GEMMs go through CBLAS (OpenBLAS); the float/double overloads of gemm() below pick
// cblas_sgemm or cblas_dgemm, so tests can run the same template in double. A tree configured
// where no OpenBLAS is installed (a GPU node with only CMake, g++ and nvcc) defines GC_NO_CBLAS
// and uses portable_gemm() instead: correct, OpenMP over rows, much slower.
#pragma once

#ifndef GC_NO_CBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cstdint>

#include "common.hpp"

namespace gcm::cpu {

namespace blas {

// Row-major C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C, without a BLAS library.
// Each output row is owned by one thread and summed in a fixed order (k ascending).
template <typename T>
void portable_gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                   T beta, T* C, int ldc) {
#pragma omp parallel for
  for (int i = 0; i < M; ++i) {
    T* c = C + std::int64_t(i) * ldc;
    for (int j = 0; j < N; ++j) {
      c[j] = beta == T(0) ? T(0) : beta * c[j];
    }
    for (int k = 0; k < K; ++k) {
      const T a = alpha * (trans_a ? A[std::int64_t(k) * lda + i] : A[std::int64_t(i) * lda + k]);
      if (trans_b) {
        for (int j = 0; j < N; ++j) {
          c[j] += a * B[std::int64_t(j) * ldb + k];
        }
      } else {
        const T* b = B + std::int64_t(k) * ldb;
        for (int j = 0; j < N; ++j) {
          c[j] += a * b[j];
        }
      }
    }
  }
}

#ifdef GC_NO_CBLAS
// One call on the calling thread (inside a parallel region: a kernel's own task).
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                 T beta, T* C, int ldc) {
  portable_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
          T* C, int ldc) {
  portable_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
#else
// OpenBLAS's own thread pool and OpenMP's would fight over the same cores
// (OpenMP workers spin between parallel regions while BLAS threads want the
// cores): BLAS runs single-threaded, and gemm() below splits C into one block
// per OpenMP thread instead. Weak: any other CBLAS simply lacks the call.
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

inline void single_threaded_blas_once() {
  static const bool done = [] {
    if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

inline void cblas_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                       int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

inline void cblas_gemm(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda, const double* B,
                       int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B,
              ldb, beta, C, ldc);
}

// One single-threaded BLAS call on the calling thread (inside a parallel region: a kernel's own
// task, whose result then depends on its shape only).
template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb,
                 T beta, T* C, int ldc) {
  single_threaded_blas_once();
  cblas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// C = alpha·op(A)·op(B) + beta·C with C split along its larger dimension into
// blocks (multiples of 16, at least 64, at most 8 of them) that the OpenMP
// threads share, each a single-threaded BLAS call over the full K: every
// element of C is computed by one call. The blocks depend on the shape only,
// never on the thread count, so results are the same bits with any number of
// threads (OpenBLAS may pick a different kernel for a different block size,
// which would otherwise make the split visible).
template <typename T>
void gemm(bool trans_a, bool trans_b, int M, int N, int K, T alpha, const T* A, int lda, const T* B, int ldb, T beta,
          T* C, int ldc) {
  single_threaded_blas_once();
  constexpr int kMaxBlocks = 8, kMinBlock = 64;
  const double flops = 2.0 * M * N * K;
  const bool split_rows = M >= N;
  const int extent = split_rows ? M : N;
  const int chunk = std::max(kMinBlock, ((extent + kMaxBlocks - 1) / kMaxBlocks + 15) / 16 * 16);
  const int blocks = (extent + chunk - 1) / chunk;
  if (flops < 4e5 || blocks <= 1) {
    cblas_gemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int b = 0; b < blocks; ++b) {
    const int begin = b * chunk, size = std::min(chunk, extent - begin);
    if (split_rows) {
      const T* a = trans_a ? A + begin : A + std::int64_t(begin) * lda;
      cblas_gemm(trans_a, trans_b, size, N, K, alpha, a, lda, B, ldb, beta, C + std::int64_t(begin) * ldc, ldc);
    } else {
      const T* bb = trans_b ? B + std::int64_t(begin) * ldb : B + begin;
      cblas_gemm(trans_a, trans_b, M, size, K, alpha, A, lda, bb, ldb, beta, C + begin, ldc);
    }
  }
}
#endif

}  // namespace blas

// y = x · W^T (+ bias). bias may be (a plain) nullptr.
template <typename T>
void linear_forward(T* y, const T* x, const T* W, const non_deduced_t<T>* bias, int N, int in, int out) {
  if (N <= 0 || out <= 0) {
    return;
  }
  if (in > 0) {
    blas::gemm(false, true, N, out, in, T(1), x, in, W, in, T(0), y, out);
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
    blas::gemm(false, false, N, in, out, T(1), dy, out, W, in, accumulate_dx ? T(1) : T(0), dx, in);
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
    blas::gemm(true, false, out, in, N, T(1), dy, out, x, in, T(1), dW, in);
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

}  // namespace gcm::cpu
