// CUDA emulator: the reference cuBLASLt of cublasLt.h. Descriptors are plain structs; the
// matmul is a triple loop over the documented semantics (see the header), after validating the
// problem the way the library does: shapes must agree, leading dimensions must be large enough,
// C and D must be compatible, and every operand must lie inside device memory.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gc_emu/runtime.hpp"

struct gc_emu_cublaslt_context {
  int magic = 0x6c74;
};

struct gc_emu_matmul_desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};

struct gc_emu_matrix_layout {
  cudaDataType_t type;
  std::uint64_t rows, cols;
  std::int64_t ld;
  cublasLtOrder_t order = CUBLASLT_ORDER_COL;
};

struct gc_emu_matmul_preference {
  std::uint64_t max_workspace = 0;
};

namespace {

constexpr std::uint64_t kAlgoMagic = 0x67635f656d755f6cULL;  // marks algorithms from the heuristic

cublasStatus_t invalid(const std::string& why) {
  std::fprintf(stderr, "gcompile CUDA emulator: cuBLASLt: %s (CUBLAS_STATUS_INVALID_VALUE)\n", why.c_str());
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t unsupported(const std::string& why) {
  std::fprintf(stderr, "gcompile CUDA emulator: cuBLASLt: %s (CUBLAS_STATUS_NOT_SUPPORTED)\n", why.c_str());
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

template <typename V>
bool read_attribute(V* out, const void* buf, std::size_t size) {
  if (buf == nullptr || size != sizeof(V)) return false;
  std::memcpy(out, buf, sizeof(V));
  return true;
}

std::size_t element_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

std::string shape(const gc_emu_matrix_layout& l) {
  return std::to_string(l.rows) + "x" + std::to_string(l.cols) + " ld " + std::to_string(l.ld) +
         (l.order == CUBLASLT_ORDER_ROW ? " (row order)" : "");
}

// Offset of element (r, c) of a stored matrix.
std::int64_t offset(const gc_emu_matrix_layout& l, std::int64_t r, std::int64_t c) {
  return l.order == CUBLASLT_ORDER_COL ? r + c * l.ld : r * l.ld + c;
}

// Elements from the first to one past the last, which must lie in device memory.
std::size_t extent_bytes(const gc_emu_matrix_layout& l) {
  if (l.rows == 0 || l.cols == 0) return 0;
  return std::size_t(offset(l, std::int64_t(l.rows) - 1, std::int64_t(l.cols) - 1) + 1) * element_bytes(l.type);
}

cublasStatus_t check_layout(const gc_emu_matrix_layout* l, const char* name) {
  if (l == nullptr) return invalid(std::string(name) + " layout is null");
  const std::uint64_t min_ld = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
  if (l->ld < 0 || std::uint64_t(l->ld) < (min_ld > 0 ? min_ld : 1)) {
    return invalid(std::string(name) + " " + shape(*l) + ": ld is below the " +
                   (l->order == CUBLASLT_ORDER_COL ? "row" : "column") + " count");
  }
  return CUBLAS_STATUS_SUCCESS;
}

// The checks shared by the heuristic and the matmul: shapes, types, C/D compatibility.
cublasStatus_t check_problem(const gc_emu_matmul_desc* desc, const gc_emu_matrix_layout* a,
                             const gc_emu_matrix_layout* b, const gc_emu_matrix_layout* c,
                             const gc_emu_matrix_layout* d) {
  if (desc == nullptr) return invalid("matmul descriptor is null");
  for (cublasStatus_t s : {check_layout(a, "A"), check_layout(b, "B"), check_layout(c, "C"), check_layout(d, "D")}) {
    if (s != CUBLAS_STATUS_SUCCESS) return s;
  }
  if (desc->compute != CUBLAS_COMPUTE_32F || desc->scale != CUDA_R_32F) {
    return unsupported("only CUBLAS_COMPUTE_32F with CUDA_R_32F scale is emulated");
  }
  const bool ab_ok = a->type == b->type && (a->type == CUDA_R_32F || a->type == CUDA_R_16BF);
  const bool cd_ok = c->type == CUDA_R_32F || (c->type == CUDA_R_16BF && a->type == CUDA_R_16BF);
  if (!ab_ok || !cd_ok) {
    return unsupported("type combination A " + std::to_string(a->type) + ", B " + std::to_string(b->type) + ", C " +
                       std::to_string(c->type));
  }
  // op(A) is m×k, op(B) is k×n, C and D are m×n.
  const std::uint64_t m = desc->trans_a == CUBLAS_OP_N ? a->rows : a->cols;
  const std::uint64_t k = desc->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
  const std::uint64_t kb = desc->trans_b == CUBLAS_OP_N ? b->rows : b->cols;
  const std::uint64_t n = desc->trans_b == CUBLAS_OP_N ? b->cols : b->rows;
  if (k != kb || d->rows != m || d->cols != n) {
    return invalid("shapes disagree: op(A) " + std::to_string(m) + "x" + std::to_string(k) + ", op(B) " +
                   std::to_string(kb) + "x" + std::to_string(n) + ", D " + shape(*d));
  }
  if (c->type != d->type || c->rows != d->rows || c->cols != d->cols || c->order != d->order) {
    return invalid("C " + shape(*c) + " and D " + shape(*d) + " differ in type, shape or order");
  }
  return CUBLAS_STATUS_SUCCESS;
}

float load(const void* base, cudaDataType_t type, std::int64_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}

void store(void* base, cudaDataType_t type, std::int64_t i, float v) {
  if (type == CUDA_R_32F) {
    static_cast<float*>(base)[i] = v;
  } else {
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(v);
  }
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return invalid("cublasLtCreate: null handle pointer");
  *handle = new gc_emu_cublaslt_context;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute_type,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr) return invalid("cublasLtMatmulDescCreate: null descriptor pointer");
  *desc = new gc_emu_matmul_desc{compute_type, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, std::size_t size) {
  if (desc == nullptr) return invalid("cublasLtMatmulDescSetAttribute: null descriptor");
  std::int32_t v = 0;
  if (!read_attribute(&v, buf, size)) return invalid("matmul descriptor attribute: value must be an int32_t");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (v != CUBLAS_OP_N && v != CUBLAS_OP_T && v != CUBLAS_OP_C) return invalid("bad cublasOperation_t");
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = cublasOperation_t(v);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      desc->scale = cudaDataType_t(v);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      if (v != 0) return unsupported("only host pointer mode is emulated");
      return CUBLAS_STATUS_SUCCESS;
    default:
      return unsupported("matmul descriptor attribute " + std::to_string(int(attr)));
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, std::uint64_t rows,
                                          std::uint64_t cols, std::int64_t ld) {
  if (layout == nullptr) return invalid("cublasLtMatrixLayoutCreate: null layout pointer");
  *layout = new gc_emu_matrix_layout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, std::size_t size) {
  if (layout == nullptr) return invalid("cublasLtMatrixLayoutSetAttribute: null layout");
  std::int32_t i32 = 0;
  std::uint32_t u32 = 0;
  std::uint64_t u64 = 0;
  std::int64_t i64 = 0;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      if (!read_attribute(&u32, buf, size)) return invalid("layout TYPE is a uint32_t");
      layout->type = cudaDataType_t(u32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ORDER:
      if (!read_attribute(&i32, buf, size)) return invalid("layout ORDER is an int32_t");
      if (i32 != CUBLASLT_ORDER_COL && i32 != CUBLASLT_ORDER_ROW) return unsupported("only COL and ROW order");
      layout->order = cublasLtOrder_t(i32);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      if (!read_attribute(&u64, buf, size)) return invalid("layout ROWS/COLS is a uint64_t");
      (attr == CUBLASLT_MATRIX_LAYOUT_ROWS ? layout->rows : layout->cols) = u64;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_LD:
      if (!read_attribute(&i64, buf, size)) return invalid("layout LD is an int64_t");
      layout->ld = i64;
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      if (!read_attribute(&i32, buf, size)) return invalid("layout BATCH_COUNT is an int32_t");
      return i32 == 1 ? CUBLAS_STATUS_SUCCESS : unsupported("batched matmul is not emulated");
  }
  return unsupported("layout attribute " + std::to_string(int(attr)));
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return invalid("cublasLtMatmulPreferenceCreate: null pointer");
  *pref = new gc_emu_matmul_preference;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    std::size_t size) {
  if (pref == nullptr) return invalid("cublasLtMatmulPreferenceSetAttribute: null preference");
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return read_attribute(&pref->max_workspace, buf, size) ? CUBLAS_STATUS_SUCCESS
                                                           : invalid("MAX_WORKSPACE_BYTES is a uint64_t");
  }
  std::uint32_t mode = 0;
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE && read_attribute(&mode, buf, size)) return CUBLAS_STATUS_SUCCESS;
  return unsupported("preference attribute " + std::to_string(int(attr)));
}

std::size_t cublasLtGetVersion() { return 0; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || results == nullptr || returned == nullptr || pref == nullptr) {
    return invalid("cublasLtMatmulAlgoGetHeuristic: bad request");
  }
  *returned = 0;
  const cublasStatus_t s = check_problem(desc, a, b, c, d);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  const int n = requested < 3 ? requested : 3;
  for (int i = 0; i < n; ++i) {
    results[i] = cublasLtMatmulHeuristicResult_t{};
    results[i].algo.data[0] = kAlgoMagic;
    results[i].algo.data[1] = std::uint64_t(i);
    results[i].workspaceSize = 0;
    results[i].state = CUBLAS_STATUS_SUCCESS;
    results[i].wavesCount = 1.0f;
  }
  *returned = n;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// Σ_p x[p]·y[p] in fp32, as 8 interleaved partial sums added pairwise at the end: a fixed order
// (the result repeats bit for bit, as cuBLASLt's does for one algorithm) that the compiler can
// keep in vector registers, unlike one running sum (8× the speed of the emulated GEMMs, which were
// half of an emulated training step).
float dot(const float* x, const float* y, std::int64_t k) {
  constexpr int kLanes = 8;
  float lanes[kLanes] = {};
  std::int64_t p = 0;
  for (; p + kLanes <= k; p += kLanes) {
    for (int l = 0; l < kLanes; ++l) lanes[l] += x[p + l] * y[p + l];
  }
  for (int l = 0; p < k; ++p, ++l) lanes[l] += x[p] * y[p];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  }
  return lanes[0];
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t a_desc, const void* B, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t c_desc, void* D,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              std::size_t workspace_bytes, cudaStream_t) {
  gc::emu::run_pending_copies();  // queued before this matmul on the stream
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const cublasStatus_t s = check_problem(desc, a_desc, b_desc, c_desc, d_desc);
  if (s != CUBLAS_STATUS_SUCCESS) return s;
  if (algo != nullptr && algo->data[0] != kAlgoMagic) return invalid("algo does not come from the heuristic");
  if (alpha == nullptr || beta == nullptr) return invalid("alpha or beta is null");
  if (gc::emu::is_device_range(alpha, 0) || gc::emu::is_device_range(beta, 0)) {
    return invalid("alpha or beta is a device pointer, but the pointer mode is host");
  }
  if (workspace_bytes > 0 && !gc::emu::is_device_range(workspace, workspace_bytes)) {
    return invalid("the workspace is not " + std::to_string(workspace_bytes) + " bytes of device memory");
  }
  const float a_scale = *static_cast<const float*>(alpha);
  const float b_scale = *static_cast<const float*>(beta);
  const bool read_c = b_scale != 0.0f;  // beta = 0: C is not an input (it may hold NaN)
  const struct {
    const void* p;
    const gc_emu_matrix_layout* l;
    const char* name;
  } operands[] = {{A, a_desc, "A"}, {B, b_desc, "B"}, {read_c ? C : nullptr, c_desc, "C"}, {D, d_desc, "D"}};
  for (const auto& op : operands) {
    if (op.p == nullptr && op.name[0] == 'C') continue;
    const std::size_t bytes = extent_bytes(*op.l);
    if (bytes > 0 && !gc::emu::is_device_range(op.p, bytes)) {
      return invalid(std::string(op.name) + " (" + shape(*op.l) + ", " + std::to_string(bytes) +
                     " bytes) is not inside one device allocation");
    }
  }
  if (read_c && C == D && c_desc->ld != d_desc->ld) return invalid("in place (C == D) needs the same ld for C and D");

  const gc_emu_matrix_layout& la = *a_desc;
  const gc_emu_matrix_layout& lb = *b_desc;
  // CUBLAS_OP_C is CUBLAS_OP_T on real types.
  const bool ta = desc->trans_a != CUBLAS_OP_N, tb = desc->trans_b != CUBLAS_OP_N;
  const std::int64_t m = std::int64_t(d_desc->rows), n = std::int64_t(d_desc->cols);
  const std::int64_t k = std::int64_t(ta ? la.rows : la.cols);
  // op(A)(i, p) is A(i, p), or A(p, i) when transposed; likewise op(B)(p, j). Both are read once
  // into float rows (op(A)'s rows, op(B)'s columns), so that each element of D is the dot product
  // of two contiguous rows, summed over p in order. D is computed in full before it is stored (C
  // may be D).
  std::vector<float> a_rows(std::size_t(m * k)), b_columns(std::size_t(n * k));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t p = 0; p < k; ++p) {
      a_rows[std::size_t(i * k + p)] = load(A, la.type, ta ? offset(la, p, i) : offset(la, i, p));
    }
  }
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t p = 0; p < k; ++p) {
      b_columns[std::size_t(j * k + p)] = load(B, lb.type, tb ? offset(lb, j, p) : offset(lb, p, j));
    }
  }
  std::vector<float> result(std::size_t(m * n));
  for (std::int64_t j = 0; j < n; ++j) {
    const float* y = b_columns.data() + j * k;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* x = a_rows.data() + i * k;
      const float sum = dot(x, y, k);
      float v = a_scale * sum;
      if (read_c) v += b_scale * load(C, c_desc->type, offset(*c_desc, i, j));
      result[std::size_t(i + j * m)] = v;
    }
  }
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t i = 0; i < m; ++i) store(D, d_desc->type, offset(*d_desc, i, j), result[std::size_t(i + j * m)]);
  }
  return CUBLAS_STATUS_SUCCESS;
}
