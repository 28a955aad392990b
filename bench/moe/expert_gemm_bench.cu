// Times the experts' projections of an MoE layer at moe_3b's shapes (issue 39 item 4): d_model 768,
// expert d_ff 512, 145 experts, top-9, one micro-batch of 2 × 4096 tokens = 73,728 routed rows,
// bf16 operands, fp32 accumulation. The three projections of the expert MLP (gate and up 768 → 512,
// down 512 → 768), forward, and forward + backward (dX and dW of each; dW accumulated in fp32, as
// the CUDA backend keeps gradients), two ways:
//
//   gcompile_grouped   cuda/grouped_gemm.cuh: one launch per projection and direction (9 in all)
//   cublaslt_per_expert  the backend's fallback and its path before the grouped kernels: one
//                      cuBLASLt GEMM per expert, projection and direction (145 × 9 launches)
//   gcompile_grouped_sm90  the same three GEMMs on warpgroup MMAs (cuda/grouped_gemm_sm90.cuh, not
//                      yet in the trees); its outputs are compared with gcompile_grouped's
//                      (max_rel_diff_vs_grouped)
//
// bench/moe/grouped_mm_bench.py times torch._grouped_mm on the same rows per expert
// (expert_rows below, repeated there). Before timing, the two ways' outputs are compared on these
// random inputs (max relative difference printed; the kernels' tests are tests/cuda/grouped_gemm_test.cu).
// One JSON object per line.
//
//   expert_gemm_bench [--iters N] [--warmup N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "bench/cuda_timing.hpp"
#include "cuda/grouped_gemm.cuh"
#include "cuda/grouped_gemm_sm90.cuh"
#include "runtime/cuda/blaslt.hpp"
#include "runtime/cuda/check.hpp"

namespace {

using gc::rt::cuda::BlasLt;
using gc::rt::cuda::DeviceBuffer;
using gc::tree::cuda::bf16;

constexpr int kDModel = 768, kExpertDff = 512, kExperts = 145, kTopK = 9, kTokens = 2 * 4096;
constexpr std::int64_t kRows = std::int64_t(kTokens) * kTopK;  // 73,728

// Rows per expert: an uneven but fixed split in whole 16-row units (torch._grouped_mm's CUTLASS
// path wants 16-byte aligned groups; ours takes any count): weight 14 + (37·e mod 29), so the
// busiest expert gets 3× the rows of the idlest, as a router early in training might. The same
// integers in bench/moe/grouped_mm_bench.py.
std::vector<std::int64_t> expert_rows() {
  const std::int64_t units = kRows / 16;
  std::vector<std::int64_t> weight(kExperts), rows(kExperts);
  std::int64_t total_weight = 0, given = 0;
  for (int e = 0; e < kExperts; ++e) total_weight += weight[e] = 14 + (37 * e) % 29;
  for (int e = 0; e < kExperts; ++e) given += rows[e] = units * weight[e] / total_weight;
  for (int e = 0; given < units; ++e, ++given) rows[e] += 1;
  for (auto& r : rows) r *= 16;
  return rows;
}

struct Options {
  int iters = 20, warmup = 3;
};

std::vector<bf16> random_bf16(std::size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<bf16> v(n);
  for (auto& x : v) x = gc::tree::cuda::from_float<bf16>(normal(gen));
  return v;
}

// One projection's operands: x [R][in], W [E][out][in], y and dy [R][out], dx [R][in], dW fp32.
struct Projection {
  int in, out;
  DeviceBuffer<bf16>& x;
  DeviceBuffer<bf16> w, y, dy, dx;
  DeviceBuffer<float> dw;
  Projection(int in_, int out_, DeviceBuffer<bf16>& x_, std::mt19937& gen)
      : in(in_), out(out_), x(x_), w(std::size_t(kExperts) * out_ * in_), y(std::size_t(kRows) * out_),
        dy(std::size_t(kRows) * out_), dx(std::size_t(kRows) * in_), dw(std::size_t(kExperts) * out_ * in_) {
    const auto wh = random_bf16(w.size(), 1.0f / std::sqrt(float(in_)), gen);
    const auto dyh = random_bf16(dy.size(), 1.0f, gen);
    w.upload(wh.data(), wh.size());
    dy.upload(dyh.data(), dyh.size());
  }
  void zero_grads() {
    GC_CUDA_CHECK(cudaMemset(dw.data(), 0, dw.size() * sizeof(float)));
    GC_CUDA_CHECK(cudaMemset(dx.data(), 0, dx.size() * sizeof(bf16)));
  }
};

// The grouped kernels: IN and OUT as compile-time constants, as the generated tree has them; SM90:
// the warpgroup-MMA kernels of cuda/grouped_gemm_sm90.cuh instead of the mma.sync ones.
template <int IN, int OUT, bool SM90>
struct Grouped {
  static void forward(Projection& p, const std::int64_t* offsets, std::int64_t tiles) {
    if constexpr (SM90) {
      gc::tree::cuda::grouped::sm90::forward<IN, OUT>(p.y.data(), p.x.data(), p.w.data(), offsets, kExperts, tiles);
    } else {
      gc::tree::cuda::grouped::forward<IN, OUT>(p.y.data(), p.x.data(), p.w.data(), offsets, kExperts, tiles);
    }
  }
  static void backward(Projection& p, const std::int64_t* offsets, std::int64_t tiles) {
    if constexpr (SM90) {
      gc::tree::cuda::grouped::sm90::backward_dx<IN, OUT>(p.dx.data(), p.dy.data(), p.w.data(), offsets, kExperts,
                                                          tiles, false);
      gc::tree::cuda::grouped::sm90::backward_dw<IN, OUT>(p.dw.data(), p.dy.data(), p.x.data(), offsets, kExperts);
    } else {
      gc::tree::cuda::grouped::backward<IN, OUT>(p.dx.data(), p.dw.data(), p.dy.data(), p.x.data(), p.w.data(), offsets,
                                                 kExperts, tiles, false);
    }
  }
};

// The per-expert cuBLASLt GEMMs (cuda/expert_linear.cuh's fallback, the same calls).
void per_expert_forward(BlasLt& blas, Projection& p, const std::vector<std::int64_t>& offsets) {
  for (int e = 0; e < kExperts; ++e) {
    const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows == 0) continue;
    blas.gemm(false, true, int(rows), p.out, p.in, 1.0f, p.x.data() + begin * p.in, p.in,
              p.w.data() + std::int64_t(e) * p.out * p.in, p.in, 0.0f, p.y.data() + begin * p.out, p.out,
              BlasLt::Shape::varying_rows);
  }
}
void per_expert_backward(BlasLt& blas, Projection& p, const std::vector<std::int64_t>& offsets) {
  for (int e = 0; e < kExperts; ++e) {
    const std::int64_t begin = offsets[e], rows = offsets[e + 1] - begin;
    if (rows == 0) continue;
    const std::int64_t w = std::int64_t(e) * p.out * p.in;
    blas.gemm(false, false, int(rows), p.in, p.out, 1.0f, p.dy.data() + begin * p.out, p.out, p.w.data() + w, p.in,
              0.0f, p.dx.data() + begin * p.in, p.in, BlasLt::Shape::varying_rows);
    blas.gemm(true, false, p.out, p.in, int(rows), 1.0f, p.dy.data() + begin * p.out, p.out,
              p.x.data() + begin * p.in, p.in, 1.0f, p.dw.data() + w, p.in, BlasLt::Shape::varying_rows);
  }
}

template <typename T>
std::vector<float> download(const DeviceBuffer<T>& b) {
  std::vector<T> h(b.size());
  GC_CUDA_CHECK(cudaMemcpy(h.data(), b.data(), h.size() * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<float> f(h.size());
  for (std::size_t i = 0; i < h.size(); ++i) f[i] = gc::tree::cuda::to_float(h[i]);
  return f;
}

// max |a - b| / max |b|
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, double(std::fabs(a[i] - b[i])));
    scale = std::max(scale, double(std::fabs(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> int {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "expert_gemm_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      const int v = std::atoi(argv[++i]);
      if (v <= 0) {
        std::fprintf(stderr, "expert_gemm_bench: %s needs a positive integer, not '%s'\n", a.c_str(), argv[i]);
        std::exit(2);
      }
      return v;
    };
    if (a == "--iters") {
      opt.iters = next();
    } else if (a == "--warmup") {
      opt.warmup = next();
    } else {
      std::fprintf(stderr, "usage: expert_gemm_bench [--iters N] [--warmup N] (unknown argument '%s')\n", a.c_str());
      return 2;
    }
  }

  const std::vector<std::int64_t> rows = expert_rows();
  std::vector<std::int64_t> offsets(kExperts + 1, 0);
  for (int e = 0; e < kExperts; ++e) offsets[e + 1] = offsets[e] + rows[e];
  DeviceBuffer<std::int64_t> device_offsets(offsets.size());
  device_offsets.upload(offsets.data(), offsets.size());
  const std::int64_t tiles = gc::tree::cuda::grouped::row_tiles(offsets.data(), kExperts);

  std::mt19937 gen(39);
  DeviceBuffer<bf16> x(std::size_t(kRows) * kDModel), h(std::size_t(kRows) * kExpertDff);
  const auto xh = random_bf16(x.size(), 1.0f, gen), hh = random_bf16(h.size(), 1.0f, gen);
  x.upload(xh.data(), xh.size());
  h.upload(hh.data(), hh.size());
  Projection gate(kDModel, kExpertDff, x, gen), up(kDModel, kExpertDff, x, gen), down(kExpertDff, kDModel, h, gen);
  BlasLt blas;

  const std::int64_t* off = device_offsets.data();
  // The expert MLP's three projections through Grouped<..., SM90> (sm90: std::bool_constant).
  auto mlp_forward = [&](auto sm90) {
    using Up = Grouped<kDModel, kExpertDff, decltype(sm90)::value>;
    using Down = Grouped<kExpertDff, kDModel, decltype(sm90)::value>;
    Up::forward(gate, off, tiles);
    Up::forward(up, off, tiles);
    Down::forward(down, off, tiles);
  };
  auto mlp_backward = [&](auto sm90) {
    using Up = Grouped<kDModel, kExpertDff, decltype(sm90)::value>;
    using Down = Grouped<kExpertDff, kDModel, decltype(sm90)::value>;
    Down::backward(down, off, tiles);
    Up::backward(gate, off, tiles);
    Up::backward(up, off, tiles);
  };
  auto grouped_fwd = [&] { mlp_forward(std::false_type{}); };
  auto grouped_bwd = [&] { mlp_backward(std::false_type{}); };
  auto sm90_fwd = [&] { mlp_forward(std::true_type{}); };
  auto sm90_bwd = [&] { mlp_backward(std::true_type{}); };
  auto blas_fwd = [&] {
    for (Projection* p : {&gate, &up, &down}) per_expert_forward(blas, *p, offsets);
  };
  auto blas_bwd = [&] {
    for (Projection* p : {&down, &gate, &up}) per_expert_backward(blas, *p, offsets);
  };

  // The ways agree on these inputs: each one's y, dX and dW of every projection after one forward
  // + backward from zeroed gradients, against the grouped kernels'.
  auto outputs_of = [&](auto&& fwd, auto&& bwd) {
    for (Projection* p : {&gate, &up, &down}) p->zero_grads();
    fwd();
    bwd();
    std::vector<std::vector<float>> out;
    for (Projection* p : {&gate, &up, &down}) {
      out.push_back(download(p->y));
      out.push_back(download(p->dx));
      out.push_back(download(p->dw));
    }
    return out;
  };
  const std::vector<std::vector<float>> ours = outputs_of(grouped_fwd, grouped_bwd);
  auto worst_against_ours = [&](const std::vector<std::vector<float>>& theirs) {
    double worst = 0.0;
    for (std::size_t i = 0; i < ours.size(); ++i) worst = std::max(worst, max_rel_diff(ours[i], theirs[i]));
    return worst;
  };
  const double worst = worst_against_ours(outputs_of(blas_fwd, blas_bwd));
  const double sm90_worst = worst_against_ours(outputs_of(sm90_fwd, sm90_bwd));
  GC_CUDA_CHECK(cudaDeviceSynchronize());

  // 3 projections, 2·R·in·out FLOP each forward; backward twice that (dX and dW).
  const double fwd_flop = 3.0 * 2.0 * double(kRows) * kDModel * kExpertDff;
  auto report = [&](const char* impl, double fwd_ms, double fwd_bwd_ms, const char* diff_name, double diff) {
    std::printf(
        "{\"impl\": \"%s\", \"shape\": \"moe_3b\", \"experts\": %d, \"top_k\": %d, \"tokens\": %d, \"rows\": %lld, "
        "\"d_model\": %d, \"expert_d_ff\": %d, \"max_rows\": %lld, \"min_rows\": %lld, \"fwd_ms\": %.4f, "
        "\"fwd_bwd_ms\": %.4f, \"fwd_tflops\": %.1f, \"fwd_bwd_tflops\": %.1f, \"%s\": %.3g}\n",
        impl, kExperts, kTopK, kTokens, static_cast<long long>(kRows), kDModel, kExpertDff,
        static_cast<long long>(*std::max_element(rows.begin(), rows.end())),
        static_cast<long long>(*std::min_element(rows.begin(), rows.end())), fwd_ms, fwd_bwd_ms,
        fwd_flop / fwd_ms * 1e-9, 3.0 * fwd_flop / fwd_bwd_ms * 1e-9, diff_name, diff);
    std::fflush(stdout);
  };
  const double g_fwd = gc::tree::bench::median_ms(opt.iters, opt.warmup, grouped_fwd);
  const double g_all = gc::tree::bench::median_ms(opt.iters, opt.warmup, [&] {
    grouped_fwd();
    grouped_bwd();
  });
  report("gcompile_grouped", g_fwd, g_all, "max_rel_diff_grouped_vs_cublaslt", worst);
  const double b_fwd = gc::tree::bench::median_ms(opt.iters, opt.warmup, blas_fwd);
  const double b_all = gc::tree::bench::median_ms(opt.iters, opt.warmup, [&] {
    blas_fwd();
    blas_bwd();
  });
  report("cublaslt_per_expert", b_fwd, b_all, "max_rel_diff_grouped_vs_cublaslt", worst);
  const double h_fwd = gc::tree::bench::median_ms(opt.iters, opt.warmup, sm90_fwd);
  const double h_all = gc::tree::bench::median_ms(opt.iters, opt.warmup, [&] {
    sm90_fwd();
    sm90_bwd();
  });
  report("gcompile_grouped_sm90", h_fwd, h_all, "max_rel_diff_vs_grouped", sm90_worst);
  return 0;
}
