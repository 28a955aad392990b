// CUDA emulator: <cublasLt.h>, a reference cuBLASLt (src/cublaslt.cpp) written from NVIDIA's
// documented semantics, not from how runtime/cuda/blaslt.hpp uses it, so that it checks that use:
//
//   cublasLtMatmul:  D = alpha · op(A) · op(B) + beta · C,  op(A) m×k, op(B) k×n, C and D m×n,
//   op(X) = X or Xᵀ by CUBLASLT_MATMUL_DESC_TRANSA / TRANSB (default CUBLAS_OP_N).
//   cublasLtMatrixLayoutCreate(type, rows, cols, ld): the matrix as stored (before op), column-
//   major by default: element (r, c) at r + c·ld, ld ≥ rows (CUBLASLT_MATRIX_LAYOUT_ORDER may
//   select CUBLASLT_ORDER_ROW: (r, c) at r·ld + c, ld ≥ cols).
//
// Supported: compute type CUBLAS_COMPUTE_32F with scale type CUDA_R_32F (alpha and beta are host
// floats), A and B both CUDA_R_32F or both CUDA_R_16BF, C and D CUDA_R_32F, or CUDA_R_16BF with
// bf16 A/B. Products are summed in fp32 in increasing k; D = alpha·sum + beta·C is rounded once
// to D's type. beta = 0 reads no C (C may hold NaN). C and D must agree in type, rows, columns
// and order; C == D (in place) also needs the same ld. Every operand must lie inside device
// memory. Anything else returns CUBLAS_STATUS_INVALID_VALUE or CUBLAS_STATUS_NOT_SUPPORTED.
#pragma once

#ifndef GC_CUDA_EMULATOR
#error "the CUDA emulator's headers need -DGC_CUDA_EMULATOR"
#endif

#include <cstddef>
#include <cstdint>

#include "gc_emu/types.hpp"

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum { CUBLASLT_ORDER_COL = 0, CUBLASLT_ORDER_ROW = 1 } cublasLtOrder_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4,
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
} cublasLtMatrixLayoutAttribute_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
} cublasLtMatmulPreferenceAttributes_t;

typedef struct gc_emu_cublaslt_context* cublasLtHandle_t;
typedef struct gc_emu_matmul_desc* cublasLtMatmulDesc_t;
typedef struct gc_emu_matrix_layout* cublasLtMatrixLayout_t;
typedef struct gc_emu_matmul_preference* cublasLtMatmulPreference_t;

typedef struct {
  std::uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  std::size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

// The library version (the emulator's: 0).
std::size_t cublasLtGetVersion();
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
// TRANSA, TRANSB (int32_t cublasOperation_t), POINTER_MODE (int32_t, host only), SCALE_TYPE.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t size);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows,
                                          std::uint64_t cols, std::int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
// ORDER (int32_t: COL or ROW), ROWS, COLS (uint64_t), LD (int64_t), BATCH_COUNT (int32_t, 1 only).
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, std::size_t size);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    std::size_t size);

// Three algorithms (needing no workspace; data[1] = 0, 1, 2, all computing the same reference
// product) for every problem cublasLtMatmul supports, or fewer if fewer are requested;
// CUBLAS_STATUS_NOT_SUPPORTED (0 results) for the others.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_desc, const void* B, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t stream);
