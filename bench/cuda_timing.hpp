// Timing for the CUDA micro-benchmarks (bench/attention/attention_bench.cu,
// bench/gemm/gemm_candidates.cu): CUDA events around each call, the median of `iters` timed calls
// after `warmup` untimed ones (METHOD: warm up, repeat, take the median).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "runtime/cuda/check.hpp"

namespace gc::tree::bench {

template <class F>
double median_ms(int iters, int warmup, F&& run) {
  for (int i = 0; i < warmup; ++i) run();
  cudaEvent_t start, stop;
  GC_CUDA_CHECK(cudaEventCreate(&start));
  GC_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    GC_CUDA_CHECK(cudaEventRecord(start));
    run();
    GC_CUDA_CHECK(cudaEventRecord(stop));
    GC_CUDA_CHECK(cudaEventSynchronize(stop));
    float t = 0.0f;
    GC_CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  GC_CUDA_CHECK(cudaEventDestroy(start));
  GC_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace gc::tree::bench
