// Host GEMMs shared by the CPU backend's kernels (cpu/linear.hpp, cpu/attention.hpp) and the
// host-side statistics of both backends (metrics/matrix_stats.hpp): row-major
// C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C.
//
// gemm() goes through CBLAS (OpenBLAS); its float/double overloads pick cblas_sgemm or
// cblas_dgemm, so tests can run the same template in double. A tree configured where no
// OpenBLAS is installed (a GPU node with only CMake, g++ and nvcc) defines GC_NO_CBLAS and uses
// portable_gemm() instead: correct, OpenMP over rows, much slower. gemm_serial() is one
// thread's product (the attention kernels call it inside their own parallel loops).
#pragma once

#ifndef GC_NO_CBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cstdint>

namespace gc::tree::core {

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

}  // namespace gc::tree::core
