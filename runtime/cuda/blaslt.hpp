// Row-major GEMMs through cuBLASLt for the CUDA backend:
//
//   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] + beta · C      (the same contract as cpu::blas::gemm)
//
// cuBLASLt is column-major; a row-major X[r,c] is the column-major X^T, so we
// ask for C^T = op(B)^T · op(A)^T: operands swapped, M and N swapped.
//
// Operands are fp32 or bf16; accumulation is always fp32 (CUBLAS_COMPUTE_32F:
// no TF32, so fp32 runs are exact-fp32 GEMMs for parity with the CPU). C may be
// fp32 while A and B are bf16 (weight gradients accumulate in fp32). Each
// distinct shape gets its descriptors and its algorithm once, on first use (the
// first training step); later calls allocate nothing.
//
// The algorithm: the heuristic's first kCandidates algorithms are timed on the
// first call's own operands (one warm-up, then the median of three runs each;
// the output is the call's C when beta = 0, which the real call then
// overwrites, else a scratch buffer of at most kTuneScratchBytes — larger
// accumulating outputs take the heuristic's first algorithm), and the fastest
// is kept. The choice is remembered per device and cuBLASLt version in a file
// (runtime/cuda/blaslt_choices.hpp), so a later run with the same shapes uses
// the same algorithms and repeats bit for bit. GC_BLASLT_TUNE=0 skips the
// timing (the heuristic's first algorithm, as before), and so do GEMMs whose
// row count varies between calls (Shape::varying_rows: the MoE experts').
#pragma once

#include <cublasLt.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/cuda/blaslt_choices.hpp"
#include "runtime/cuda/check.hpp"

namespace gc::rt::cuda {

inline void check_cublas(cublasStatus_t status, const char* file, int line, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(file, line, call, "cuBLAS status " + std::to_string(int(status)));
}

}  // namespace gc::rt::cuda

#define GC_CUBLAS_CHECK(call) ::gc::rt::cuda::check_cublas((call), __FILE__, __LINE__, #call)

namespace gc::rt::cuda {

template <typename T>
constexpr cudaDataType_t data_type() {
  if constexpr (std::is_same_v<T, float>) {
    return CUDA_R_32F;
  } else {
    static_assert(std::is_same_v<T, __nv_bfloat16>, "cuBLASLt operands are float or bf16");
    return CUDA_R_16BF;
  }
}

class BlasLt {
 public:
  static constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;
  static constexpr int kCandidates = 8;
  static constexpr std::size_t kTuneScratchBytes = std::size_t(64) << 20;

  BlasLt() {
    workspace_.resize(kWorkspaceBytes);  // first: a throw here leaves no handle behind
    GC_CUBLAS_CHECK(cublasLtCreate(&handle_));
    const char* tune = std::getenv("GC_BLASLT_TUNE");
    tune_ = tune == nullptr || std::string(tune) != "0";
    if (tune_) choices_ = AlgoChoices(AlgoChoices::default_path(device_name(), cublasLtGetVersion()));
  }
  BlasLt(const BlasLt&) = delete;
  BlasLt& operator=(const BlasLt&) = delete;
  ~BlasLt() {
    for (auto& [key, plan] : plans_) plan.destroy();
    cublasLtDestroy(handle_);
  }

  // How often a shape recurs: Fixed shapes (the dense model's) are timed once and remembered;
  // a GEMM whose rows change from step to step (an expert's share of the tokens) would time each
  // new row count inside the training loop, with host waits and a scratch allocation, so it
  // takes the heuristic's first algorithm (deterministic) and is not remembered.
  enum class Shape { fixed, varying_rows };

  // Row-major, as documented above. lda, ldb, ldc are row strides.
  template <typename AB, typename CT>
  void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const AB* A, int lda, const AB* B, int ldb,
            float beta, CT* C, int ldc, Shape shape = Shape::fixed) {
    if (M <= 0 || N <= 0) return;
    // Column-major view: C^T[N,M] = op(B)^T[N,K] · op(A)^T[K,M].
    const Key key{trans_b, trans_a, N, M, K, ldb, lda, ldc, data_type<AB>(), data_type<CT>()};
    Plan& plan = plan_for(key);
    if (!plan.chosen && shape == Shape::varying_rows) plan.chosen = true;  // the heuristic's first
    if (!plan.chosen) choose(plan, key, alpha, B, A, beta, C, std::size_t(ldc) * std::size_t(M) * sizeof(CT));
    GC_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, B, plan.a, A, plan.b, &beta, C, plan.c, C, plan.c,
                                   &plan.algo, workspace_.data(), kWorkspaceBytes, /*stream=*/0));
  }

  // Where the chosen algorithms are kept ("" when they are not).
  const std::string& choices_path() const { return choices_.path(); }


 private:
  // Column-major problem: m×n output, k inner, operand a is m×k after op.
  struct Key {
    bool trans_a, trans_b;
    int m, n, k, lda, ldb, ldc;
    cudaDataType_t ab, c;
    bool operator<(const Key& o) const {
      return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, ab, c) <
             std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ab, o.c);
    }
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
    std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first
    bool chosen = false;
    void destroy() {
      if (a) cublasLtMatrixLayoutDestroy(a);
      if (b) cublasLtMatrixLayoutDestroy(b);
      if (c) cublasLtMatrixLayoutDestroy(c);
      if (desc) cublasLtMatmulDescDestroy(desc);
    }
  };

  Plan& plan_for(const Key& key) {
    auto it = plans_.find(key);
    if (it != plans_.end()) return it->second;
    Plan plan;
    cublasLtMatmulPreference_t pref = nullptr;
    try {
      describe(key, plan, pref);
    } catch (...) {  // nothing created here outlives a failure
      if (pref) cublasLtMatmulPreferenceDestroy(pref);
      plan.destroy();
      throw;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    return plans_.emplace(key, plan).first->second;
  }

  // Creates the plan's descriptors and asks the heuristic for its algorithm.
  void describe(const Key& key, Plan& plan, cublasLtMatmulPreference_t& pref) {
    const cublasOperation_t ta = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    GC_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    GC_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    // Stored (pre-op) shapes, column-major.
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, key.ab, key.trans_a ? key.k : key.m,
                                               key.trans_a ? key.m : key.k, key.lda));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, key.ab, key.trans_b ? key.n : key.k,
                                               key.trans_b ? key.k : key.n, key.ldb));
    GC_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.c, key.c, key.m, key.n, key.ldc));
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const std::size_t workspace = kWorkspaceBytes;
    GC_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                         sizeof(workspace)));
    cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.c,
                                                                 pref, tune_ ? kCandidates : 1, results, &found);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      fail(__FILE__, __LINE__, "cublasLtMatmulAlgoGetHeuristic",
           "no algorithm for m=" + std::to_string(key.m) + " n=" + std::to_string(key.n) +
               " k=" + std::to_string(key.k));
    }
    for (int i = 0; i < found; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
    }
    if (plan.candidates.empty()) plan.candidates.push_back(results[0].algo);
    plan.algo = plan.candidates.front();
  }

  static std::string key_name(const Key& k) {
    return std::to_string(k.trans_a) + " " + std::to_string(k.trans_b) + " " + std::to_string(k.m) + " " +
           std::to_string(k.n) + " " + std::to_string(k.k) + " " + std::to_string(k.lda) + " " + std::to_string(k.ldb) +
           " " + std::to_string(k.ldc) + " " + std::to_string(int(k.ab)) + " " + std::to_string(int(k.c));
  }

  // The remembered algorithm of this shape if it is one of the heuristic's candidates.
  bool take_remembered(Plan& plan, const std::string& name) {
    const auto words = choices_.find(name);
    if (!words) return false;
    for (const cublasLtMatmulAlgo_t& c : plan.candidates) {
      if (std::memcmp(&c, words->w, sizeof c) == 0) {
        plan.algo = c;
        return true;
      }
    }
    std::fprintf(stderr, "cuBLASLt algorithm cache %s: the algorithm kept for [%s] is not among this library's; "
                 "timing again\n", choices_.path().c_str(), name.c_str());
    return false;
  }

  // Times each candidate on this call's operands and keeps the fastest (see the header).
  void choose(Plan& plan, const Key& key, float alpha, const void* B, const void* A, float beta, void* C,
              std::size_t c_bytes) {
    plan.chosen = true;
    if (!tune_ || plan.candidates.size() == 1) return;  // the heuristic's first
    const std::string name = key_name(key);
    if (take_remembered(plan, name)) return;
    DeviceBuffer<unsigned char> scratch;
    void* out = C;
    if (beta != 0.0f) {  // the output accumulates: time into a scratch buffer, if a small one will do
      if (c_bytes > kTuneScratchBytes) return;
      scratch.resize(c_bytes);
      out = scratch.data();
    }
    cudaEvent_t start = nullptr, stop = nullptr;
    GC_CUDA_CHECK(cudaEventCreate(&start));
    GC_CUDA_CHECK(cudaEventCreate(&stop));
    float best = -1.0f;
    for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
      float ms[3] = {0.0f, 0.0f, 0.0f};
      bool ok = true;
      for (int run = -1; run < 3 && ok; ++run) {  // run -1: warm-up
        GC_CUDA_CHECK(cudaEventRecord(start));
        ok = cublasLtMatmul(handle_, plan.desc, &alpha, B, plan.a, A, plan.b, &beta, out, plan.c, out, plan.c, &algo,
                            workspace_.data(), kWorkspaceBytes, /*stream=*/0) == CUBLAS_STATUS_SUCCESS;
        GC_CUDA_CHECK(cudaEventRecord(stop));
        GC_CUDA_CHECK(cudaEventSynchronize(stop));
        if (ok && run >= 0) GC_CUDA_CHECK(cudaEventElapsedTime(&ms[run], start, stop));
      }
      if (!ok) continue;  // a candidate that fails is not chosen
      std::sort(ms, ms + 3);
      if (best < 0.0f || ms[1] < best) {
        best = ms[1];
        plan.algo = algo;
      }
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    AlgoWords words{};
    std::memcpy(words.w, &plan.algo, sizeof words.w);
    choices_.remember(name, words);
    take_remembered(plan, name);  // processes that tuned this shape at once agree on the file's first line
  }

  static std::string device_name() {
    int device = 0;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
      cudaGetLastError();
      return "unknown-device";
    }
    return prop.name;
  }

  cublasLtHandle_t handle_ = nullptr;
  bool tune_ = true;
  AlgoChoices choices_;
  DeviceBuffer<unsigned char> workspace_;
  std::map<Key, Plan> plans_;
};

}  // namespace gc::rt::cuda
