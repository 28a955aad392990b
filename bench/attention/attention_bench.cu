// Times gcompile's causal attention kernels on the GPU: the tensor-core kernels
// (cuda/flash_attention.cuh), Hopper's warpgroup-MMA kernels (cuda/attention_sm90.cuh forward,
// cuda/attention_sm90_backward.cuh backward; two warpgroups a block and, as gcompile_sm90_wgmma_1wg,
// one) and the fp32-math reference kernels
// (cuda/attention.cuh), bf16, forward and forward + backward, for the attention shapes of the
// seed-000 0.1B and 1.5B specs (batch 8, seq_len 2048). The wgmma row also says how far its
// outputs (out, lse, dq, dk, dv) are from the tensor-core kernels' on the same inputs (largest
// relative error of the five; both round P and dS to bf16) and whether a second forward +
// backward repeats its outputs bit for bit. One JSON object per line; bench/attention_vs_sdpa
// runs it beside PyTorch's SDPA (bench/attention/sdpa_bench.py) and prints the table.
//
//   attention_bench [--iters N] [--warmup N] [--skip-reference]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench/cuda_timing.hpp"
#include "cuda/attention.cuh"
#include "cuda/attention_sm90.cuh"
#include "cuda/attention_sm90_backward.cuh"
#include "cuda/flash_attention.cuh"
#include "runtime/cuda/check.hpp"

namespace {

using gc::tree::cuda::bf16;

struct Shape01b {
  static constexpr int kHeads = 12, kKvHeads = 12, kHeadDim = 64;
  static constexpr float kScale = 0.125f;
};
struct Shape15b {
  static constexpr int kHeads = 24, kKvHeads = 24, kHeadDim = 128;
  static constexpr float kScale = 0.08838834764831845f;
};

struct Options {
  int iters = 20, warmup = 3;
  bool reference = true;
};

// Median milliseconds of `run` over opt.iters timed calls, after opt.warmup untimed ones.
template <class F>
double median_ms(const Options& opt, F&& run) {
  return gc::tree::bench::median_ms(opt.iters, opt.warmup, run);
}

// A device buffer's contents as doubles (bf16 or fp32).
template <typename T>
std::vector<double> download(const gc::rt::cuda::DeviceBuffer<T>& buf, std::size_t n) {
  std::vector<T> host(n);
  buf.download(host.data(), n);
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = double(gc::tree::cuda::to_float(host[i]));
  return out;
}

// ‖a − b‖ / ‖b‖ (the kernel tests' measure).
double rel_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    norm += b[i] * b[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

template <class S>
void bench(const char* name, int batch, int seq_len, const Options& opt) {
  using gc::rt::cuda::DeviceBuffer;
  const std::size_t q_n = std::size_t(batch) * seq_len * S::kHeads * S::kHeadDim;
  const std::size_t kv_n = std::size_t(batch) * seq_len * S::kKvHeads * S::kHeadDim;
  std::vector<bf16> host(q_n);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : host) x = gc::tree::cuda::from_float<bf16>(normal(gen));
  DeviceBuffer<bf16> q(q_n), k(kv_n), v(kv_n), out(q_n), dout(q_n), dq(q_n), dk(kv_n), dv(kv_n);
  for (auto* b : {&q, &dout}) b->upload(host.data(), q_n);
  for (auto* b : {&k, &v}) b->upload(host.data(), kv_n);
  DeviceBuffer<float> lse(std::size_t(batch) * S::kHeads * seq_len);
  DeviceBuffer<float> scratch(gc::tree::cuda::attention_backward_scratch_floats<S>(batch, seq_len));
  // Causal: half of the T×T scores; forward 2 products, backward 5 (FlashAttention-2's count).
  const double fwd_flops = 4.0 * batch * S::kHeads * double(seq_len) * seq_len * S::kHeadDim / 2.0;
  const double fwd_bwd_flops = fwd_flops * 3.5;
  const auto report = [&](const char* impl, double fwd, double fwd_bwd) {
    std::printf(
        "{\"shape\": \"%s\", \"impl\": \"%s\", \"batch\": %d, \"seq_len\": %d, \"heads\": %d, \"head_dim\": %d, "
        "\"fwd_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"fwd_bwd_tflops\": %.1f}\n",
        name, impl, batch, seq_len, S::kHeads, S::kHeadDim, fwd, fwd_bwd, fwd_flops / fwd / 1e9,
        fwd_bwd_flops / fwd_bwd / 1e9);
    std::fflush(stdout);
  };
  {
    const auto fwd = [&] {
      gc::tree::cuda::flash_attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    const auto fwd_bwd = [&] {
      fwd();
      gc::tree::cuda::flash_attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(),
                                                  out.data(), lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    report("gcompile_tensor_core", median_ms(opt, fwd), median_ms(opt, fwd_bwd));
  }
  // The tensor-core kernels' outputs of the last timed forward + backward, to check the wgmma
  // kernels against at this shape.
  const std::size_t lse_n = std::size_t(batch) * S::kHeads * seq_len;
  const auto outputs = [&] {
    return std::vector<std::vector<double>>{download(out, q_n), download(lse, lse_n), download(dq, q_n),
                                            download(dk, kv_n), download(dv, kv_n)};
  };
  const auto tensor_core = outputs();
  std::vector<std::vector<double>> wgmma_outputs;  // the two-warpgroup kernels', for the one-warpgroup check
  // A check line: the largest relative error of `got`'s five outputs against the tensor-core
  // kernels', and whether `got` equals `bits` (a rerun, or another variant) bit for bit.
  const auto check = [&](const char* impl, const std::vector<std::vector<double>>& got,
                         const std::vector<std::vector<double>>& bits, const char* against) {
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, rel_error(got[i], tensor_core[i]));
    const std::string named = against ? std::string(", \"bitwise_against\": \"") + against + "\"" : "";
    std::printf("{\"shape\": \"%s\", \"impl\": \"%s\", \"max_rel_error_vs_tensor_core\": %.3g, "
                "\"repeats_bitwise\": %s%s}\n",
                name, impl, worst, got == bits ? "true" : "false", named.c_str());
  };
  {
    const auto fwd = [&] {
      gc::tree::cuda::attention_sm90_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    const auto fwd_bwd = [&] {
      fwd();
      gc::tree::cuda::attention_sm90_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(),
                                                 out.data(), lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    const double fwd_ms = median_ms(opt, fwd), fwd_bwd_ms = median_ms(opt, fwd_bwd);
    wgmma_outputs = outputs();
    fwd_bwd();
    check("gcompile_sm90_wgmma_check", wgmma_outputs, outputs(), nullptr);  // a rerun
    report("gcompile_sm90_wgmma", fwd_ms, fwd_bwd_ms);
  }
  {  // One warpgroup a block (64 queries or keys; the default runs two), forward and backward.
    const auto fwd = [&] {
      gc::tree::cuda::attention_sm90_forward<S, 1>(out.data(), lse.data(), q.data(), k.data(), v.data(), batch,
                                                   seq_len);
    };
    const auto fwd_bwd = [&] {
      fwd();
      gc::tree::cuda::attention_sm90_backward<S, 1>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(),
                                                    out.data(), lse.data(), q.data(), k.data(), v.data(), batch,
                                                    seq_len);
    };
    const double fwd_ms = median_ms(opt, fwd), fwd_bwd_ms = median_ms(opt, fwd_bwd);
    // One warpgroup a block sums every row in the same order as two: the same bits.
    check("gcompile_sm90_wgmma_1wg_check", outputs(), wgmma_outputs, "two warpgroups a block");
    report("gcompile_sm90_wgmma_1wg", fwd_ms, fwd_bwd_ms);
  }
  if (opt.reference) {
    const auto fwd = [&] {
      gc::tree::cuda::attention_forward<S>(out.data(), lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    const auto fwd_bwd = [&] {
      fwd();
      gc::tree::cuda::attention_backward<S>(dq.data(), dk.data(), dv.data(), scratch.data(), dout.data(), out.data(),
                                            lse.data(), q.data(), k.data(), v.data(), batch, seq_len);
    };
    report("gcompile_reference", median_ms(opt, fwd), median_ms(opt, fwd_bwd));
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--iters" || a == "--warmup") && i + 1 < argc) {
      const int n = std::atoi(argv[++i]);
      if (n < (a == "--iters" ? 1 : 0)) {
        std::fprintf(stderr, "attention_bench: %s needs a %s integer\n", a.c_str(), a == "--iters" ? "positive" : "non-negative");
        return 2;
      }
      (a == "--iters" ? opt.iters : opt.warmup) = n;
    } else if (a == "--skip-reference") {
      opt.reference = false;
    } else {
      std::fprintf(stderr, "usage: attention_bench [--iters N] [--warmup N] [--skip-reference]\n");
      return 2;
    }
  }
  try {
    bench<Shape01b>("0.1b", 8, 2048, opt);
    bench<Shape15b>("1.5b", 8, 2048, opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
