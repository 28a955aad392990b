// The GEMM-level candidates of issue 37, measured before any model change: the same cuBLASLt
// calls the CUDA backend makes (runtime/cuda/blaslt.hpp through linear_forward/linear_backward's
// operand order), bf16 operands, fp32 weight gradients, at the shapes of the seed-000 0.1B and
// 1.5B specs (batch 8 × 2048 tokens), each variant against today's:
//
//   dff_stride   the MLP down projection (forward, dX, dW) with the row stride d_ff = 5460 of the
//                1.5B (10,920 bytes: not a multiple of 16, which tensor-op kernels want) against
//                a stride padded to 5464; the up projection [W_gate; W_up] (aligned) beside it,
//                per FLOP. 0.1B's d_ff = 2304 is aligned (control).
//   head_chunk   the LM head's GEMMs (logits, dF, dW accumulated in fp32) over all 16,384 rows in
//                chunks of 512 (today's kHeadChunkRows at V = 60,416) against 1024 and 2048.
//   grad_memset  zeroing the fp32 gradients at each step (what beta = 0 on the first micro-batch
//                would save).
//
// Inputs are random (never zeros); each timing is the median of --iters after --warmup, CUDA
// events around the GEMMs only. One JSON object per line; bench/gemm_candidates prints a table.
//
//   gemm_candidates [--iters N] [--warmup N] [--small]     (--small: tiny shapes, a smoke test)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/cuda_timing.hpp"
#include "cuda/common.cuh"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"

namespace {

using gc::rt::cuda::BlasLt;
using gc::tree::cuda::bf16;

struct Options {
  int iters = 10, warmup = 2;
  bool small = false;
};

// Uniform values in [-1, 1) from a hash of the index (on the device: the buffers are large).
template <typename T>
__global__ void fill_random_kernel(T* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
    unsigned h = unsigned(i) * 2654435761u ^ (unsigned(i >> 32) + seed) * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = T(float(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

// A device buffer of n random values (bf16 or fp32), never zeros.
template <typename T>
struct Device {
  T* p = nullptr;
  std::size_t n = 0;
  explicit Device(std::size_t count, unsigned seed) : n(count) {
    GC_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T)));
    gc::tree::cuda::launch(fill_random_kernel<T>, dim3(1024), dim3(256), 0, p, n, seed);
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() { cudaFree(p); }
};

double median_ms(const Options& opt, const std::function<void()>& run) {
  return gc::tree::bench::median_ms(opt.iters, opt.warmup, run);
}

void emit(const char* candidate, const char* shape, const std::string& variant, const char* gemm, double ms,
          double flops, double bytes = 0.0) {
  std::printf("{\"candidate\": \"%s\", \"shape\": \"%s\", \"variant\": \"%s\", \"gemm\": \"%s\", \"ms\": %.4f, "
              "\"tflops\": %.1f, \"gbps\": %.0f}\n",
              candidate, shape, variant.c_str(), gemm, ms, ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0,
              ms > 0 && bytes > 0 ? bytes / (ms * 1e-3) / 1e9 : 0.0);
  std::fflush(stdout);
}

// y[N,out] = x[N,in]·Wᵀ, dx[N,in] = dy·W, dW[out,in] += dyᵀ·x, as cuda::Backend::linear_*, with
// explicit row strides for x/dx and W (ld_in ≥ in).
struct Linear {
  BlasLt& blas;
  int N, in, out, ld_in;
  void forward(bf16* y, const bf16* x, const bf16* W) {
    blas.gemm(false, true, N, out, in, 1.0f, x, ld_in, W, ld_in, 0.0f, y, out);
  }
  void backward_dx(bf16* dx, const bf16* dy, const bf16* W) {
    blas.gemm(false, false, N, in, out, 1.0f, dy, out, W, ld_in, 0.0f, dx, ld_in);
  }
  void backward_dw(float* dW, const bf16* dy, const bf16* x) {
    blas.gemm(true, false, out, in, N, 1.0f, dy, out, x, ld_in, 1.0f, dW, ld_in);
  }
};

// One projection's three GEMMs at a row stride.
void time_projection(const Options& opt, BlasLt& blas, const char* candidate, const char* shape, const char* name,
                     int N, int in, int out, int ld_in) {
  Device<bf16> x(std::size_t(N) * ld_in, 1), W(std::size_t(out) * ld_in, 2), y(std::size_t(N) * out, 3);
  Device<bf16> dx(std::size_t(N) * ld_in, 4);
  Device<float> dW(std::size_t(out) * ld_in, 5);
  Linear lin{blas, N, in, out, ld_in};
  const double flops = 2.0 * N * double(in) * out;
  const std::string variant = std::string(name) + " ld " + std::to_string(ld_in);
  emit(candidate, shape, variant, "forward", median_ms(opt, [&] { lin.forward(y.p, x.p, W.p); }), flops);
  emit(candidate, shape, variant, "dx", median_ms(opt, [&] { lin.backward_dx(dx.p, y.p, W.p); }), flops);
  emit(candidate, shape, variant, "dW", median_ms(opt, [&] { lin.backward_dw(dW.p, y.p, x.p); }), flops);
}

// The LM head's three GEMMs over all N rows, `chunk` rows at a time (model_impl.hpp's head).
void time_head(const Options& opt, BlasLt& blas, const char* shape, int N, int d, int V, int chunk) {
  Device<bf16> f(std::size_t(N) * d, 6), W(std::size_t(V) * d, 7), logits(std::size_t(chunk) * V, 8);
  Device<bf16> df(std::size_t(N) * d, 9);
  Device<float> dW(std::size_t(V) * d, 10);
  const std::string variant = "chunk " + std::to_string(chunk);
  const double flops = 2.0 * N * double(d) * V;
  const auto over_chunks = [&](auto&& gemm) {
    for (int r0 = 0; r0 < N; r0 += chunk) gemm(r0, std::min(chunk, N - r0));
  };
  emit("head_chunk", shape, variant, "logits", median_ms(opt, [&] {
         over_chunks([&](int r0, int rows) {
           blas.gemm(false, true, rows, V, d, 1.0f, f.p + std::size_t(r0) * d, d, W.p, d, 0.0f, logits.p, V);
         });
       }), flops);
  emit("head_chunk", shape, variant, "dF", median_ms(opt, [&] {
         over_chunks([&](int r0, int rows) {
           blas.gemm(false, false, rows, d, V, 1.0f, logits.p, V, W.p, d, 0.0f, df.p + std::size_t(r0) * d, d);
         });
       }), flops);
  emit("head_chunk", shape, variant, "dW", median_ms(opt, [&] {
         over_chunks([&](int r0, int rows) {
           blas.gemm(true, false, V, d, rows, 1.0f, logits.p, V, f.p + std::size_t(r0) * d, d, 1.0f, dW.p, d);
         });
       }), flops);
}

void time_memset(const Options& opt, const char* shape, std::size_t params) {
  float* g = nullptr;
  GC_CUDA_CHECK(cudaMalloc(&g, params * sizeof(float)));
  const double ms = median_ms(opt, [&] { GC_CUDA_CHECK(cudaMemsetAsync(g, 0, params * sizeof(float))); });
  emit("grad_memset", shape, std::to_string(params) + " fp32", "memset", ms, 0.0, double(params) * sizeof(float));
  GC_CUDA_CHECK(cudaFree(g));
}

Options parse(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--iters" || a == "--warmup") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      if (v < 1) {
        std::fprintf(stderr, "gemm_candidates: error: %s needs a positive integer\n", a.c_str());
        std::exit(2);
      }
      (a == "--iters" ? opt.iters : opt.warmup) = v;
    } else if (a == "--small") {
      opt.small = true;
    } else {
      std::fprintf(stderr, "usage: gemm_candidates [--iters N] [--warmup N] [--small]\n");
      std::exit(2);
    }
  }
  return opt;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  BlasLt blas;
  if (opt.small) {  // every path once, at shapes an emulator runs in seconds
    time_projection(opt, blas, "dff_stride", "small", "mlp_down", 64, 20, 32, 20);
    time_projection(opt, blas, "dff_stride", "small", "mlp_down", 64, 20, 32, 24);
    time_head(opt, blas, "small", 64, 32, 96, 16);
    time_memset(opt, "small", 4096);
    return 0;
  }
  const int N = 8 * 2048;
  // 1.5B: d 2048, d_ff 5460 (stride 10,920 bytes), V 60,416; 0.1B: d 768, d_ff 2304, V 60,416.
  time_projection(opt, blas, "dff_stride", "1.5b", "mlp_down", N, 5460, 2048, 5460);
  time_projection(opt, blas, "dff_stride", "1.5b", "mlp_down", N, 5460, 2048, 5464);
  time_projection(opt, blas, "reference", "1.5b", "mlp_in", N, 2048, 2 * 5460, 2048);  // aligned, per FLOP
  // d_ff itself padded with zeros (Inductor's pad_mm does so for torch): 5464 (a multiple of 8),
  // 5504 (of 64), 5632 (of 256). The same result; the extra FLOPs are counted in the TFLOP/s.
  for (int padded : {5464, 5504, 5632}) time_projection(opt, blas, "dff_pad", "1.5b", "mlp_down", N, padded, 2048, padded);
  time_projection(opt, blas, "dff_stride", "0.1b", "mlp_down", N, 2304, 768, 2304);
  for (int chunk : {512, 1024, 2048}) time_head(opt, blas, "1.5b", N, 2048, 60416, chunk);
  for (int chunk : {512, 2048}) time_head(opt, blas, "0.1b", N, 768, 60416, chunk);
  time_memset(opt, "1.5b", std::size_t(1'500'000'000));
  return 0;
}
