// CUDA AdamW, sums of squares and the master → working cast (cuda/adamw.cuh) against the CPU
// backend (cpu/adamw.hpp). Philox initialization: init_test.cu.
#include "cuda/adamw.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/adamw.hpp"
#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::AdamWTensor;
using gc::tree::cuda::bf16;

std::vector<float> to_float_vector(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

std::vector<double> absolute(std::vector<double> v) {
  for (double& x : v) x = std::fabs(x);
  return v;
}

// Tensors laid out in order from `start`, each followed by gaps[t] unused elements.
std::vector<AdamWTensor> layout(const std::vector<std::int64_t>& sizes, const std::vector<std::int64_t>& gaps,
                                std::int64_t start, const std::vector<float>& lr_mult,
                                const std::vector<float>& decay, std::int64_t* total) {
  std::vector<AdamWTensor> tensors;
  std::int64_t offset = start;
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back({offset, sizes[t], lr_mult[t % lr_mult.size()], decay[t % decay.size()]});
    offset += sizes[t] + (gaps.empty() ? 0 : gaps[t]);
  }
  *total = offset;
  return tensors;
}

// Tensor index of every flat element, −1 in gaps.
std::vector<int> owner(const std::vector<AdamWTensor>& tensors, std::int64_t total) {
  std::vector<int> own(std::size_t(total), -1);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    for (std::int64_t i = 0; i < tensors[t].numel; ++i) own[std::size_t(tensors[t].offset + i)] = int(t);
  }
  return own;
}

template <typename T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

std::vector<double> slice(const std::vector<double>& v, const AdamWTensor& t) {
  return std::vector<double>(v.begin() + t.offset, v.begin() + t.offset + t.numel);
}

template <typename T>
std::vector<double> slice_of(const std::vector<T>& v, const AdamWTensor& t) {
  std::vector<double> out(std::size_t(t.numel));
  for (std::int64_t i = 0; i < t.numel; ++i)
    out[std::size_t(i)] = double(gc::tree::cuda::to_float(v[std::size_t(t.offset + i)]));
  return out;
}

// Several AdamW steps on the GPU (fp32 state, working copy T or none) against
// cpu::adamw_step<double> per tensor, from identical fp32 starting values.
template <typename T>
void check_adamw(const std::vector<AdamWTensor>& tensors, std::int64_t total, const std::vector<double>& decay_spec,
                 const std::vector<double>& lr_mult_spec, bool separate_working, const std::string& what) {
  const double lr = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  const int steps = 5;
  const std::size_t n = std::size_t(total);

  const std::vector<float> master0 = to_float_vector(kt::random_vector(n, 11));
  const std::vector<float> m0 = to_float_vector(kt::random_vector(n, 12, 0.01, 0.1));
  const std::vector<float> v0 = to_float_vector(absolute(kt::random_vector(n, 13, 1e-4, 1e-2)));
  std::vector<double> ref_p(master0.begin(), master0.end()), ref_m(m0.begin(), m0.end()), ref_v(v0.begin(), v0.end());

  auto d_master = ct::upload(master0);
  auto d_m = ct::upload(m0);
  auto d_v = ct::upload(v0);
  ct::DeviceBuffer<float> d_grad(n);
  const std::vector<T> working0 = ct::convert<T>(std::vector<float>(n, 123.0f));  // sentinel: gaps stay so
  ct::DeviceBuffer<T> d_working;
  if (separate_working) d_working = ct::upload(working0);
  auto d_tensors = ct::upload(tensors);

  for (int step = 1; step <= steps; ++step) {
    const std::vector<float> grad = to_float_vector(kt::random_vector(n, 100u + unsigned(step)));
    const std::vector<double> grad_d(grad.begin(), grad.end());
    const double grad_scale = step % 2 == 1 ? 1.0 : 0.7;
    d_grad.upload(grad.data(), n);
    gc::tree::cuda::adamw_step_all<T>(d_master.data(), separate_working ? d_working.data() : nullptr, d_m.data(),
                                      d_v.data(), d_grad.data(), d_tensors.data(), int(tensors.size()), total, lr,
                                      beta1, beta2, eps, step, grad_scale);
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const std::int64_t off = tensors[t].offset;
      const gc::tree::cpu::AdamWHyper hp{lr * lr_mult_spec[t], beta1, beta2, eps, decay_spec[t], step};
      gc::tree::cpu::adamw_step<double>(ref_p.data() + off, ref_m.data() + off, ref_v.data() + off, grad_d.data() + off,
                                        tensors[t].numel, hp, grad_scale);
    }
  }

  const std::vector<float> master = ct::download(d_master), m = ct::download(d_m), v = ct::download(d_v);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (tensors[t].numel == 0) continue;
    const std::string name = what + " tensor " + std::to_string(t);
    const double e_p = kt::rel_error(slice_of(master, tensors[t]), slice(ref_p, tensors[t]));
    std::vector<double> got_delta = slice_of(master, tensors[t]), ref_delta = slice(ref_p, tensors[t]);
    const std::vector<double> start = slice_of(master0, tensors[t]);
    got_delta = kt::minus(got_delta, start);
    ref_delta = kt::minus(ref_delta, start);
    const double e_delta = kt::rel_error(got_delta, ref_delta);
    const double e_m = kt::rel_error(slice_of(m, tensors[t]), slice(ref_m, tensors[t]));
    const double e_v = kt::rel_error(slice_of(v, tensors[t]), slice(ref_v, tensors[t]));
    kt::report("cuda adamw " + name + " param", e_p);
    kt::report("cuda adamw " + name + " update", e_delta);
    kt::report("cuda adamw " + name + " m", e_m);
    kt::report("cuda adamw " + name + " v", e_v);
    EXPECT_LT(e_p, 1e-4) << name;
    EXPECT_LT(e_delta, 1e-4) << name;
    EXPECT_LT(e_m, 1e-4) << name;
    EXPECT_LT(e_v, 1e-4) << name;
  }

  const std::vector<int> own = owner(tensors, total);
  std::vector<T> working;
  if (separate_working) working = ct::download(d_working);
  std::size_t gap_changed = 0, working_mismatch = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (own[i] < 0) {
      gap_changed += !same_bits(master[i], master0[i]) || !same_bits(m[i], m0[i]) || !same_bits(v[i], v0[i]);
      if (separate_working) gap_changed += !same_bits(working[i], working0[i]);
    } else if (separate_working) {
      working_mismatch += !same_bits(working[i], gc::tree::cuda::from_float<T>(master[i]));
    }
  }
  EXPECT_EQ(gap_changed, 0u) << what << ": elements outside every tensor were written";
  EXPECT_EQ(working_mismatch, 0u) << what << ": the working copy is not the rounded master";
  if (separate_working) {
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      if (tensors[t].numel == 0) continue;
      const double e = kt::rel_error(slice_of(working, tensors[t]), slice(ref_p, tensors[t]));
      kt::report("cuda adamw " + what + " working " + std::to_string(t), e);
      EXPECT_LT(e, ct::tolerance<T>()) << what << " tensor " << t;
    }
  }
}

struct OptimCase {
  std::vector<AdamWTensor> tensors;
  std::int64_t total = 0;
  std::vector<double> decay, lr_mult;
};

// Three tensors of odd sizes, contiguous, different lr multipliers and decays.
OptimCase three_tensors() {
  OptimCase c;
  c.decay = {0.1, 0.0, 0.05};
  c.lr_mult = {1.0, 0.5, 2.0};
  c.tensors = layout({1000, 70001, 37}, {}, 0, {1.0f, 0.5f, 2.0f}, {0.1f, 0.0f, 0.05f}, &c.total);
  return c;
}

// Gaps (at the start, between tensors, at the end) and an empty tensor.
OptimCase gapped_tensors() {
  OptimCase c;
  c.decay = {0.1, 0.0, 0.05, 0.1};
  c.lr_mult = {1.0, 0.5, 2.0, 1.0};
  c.tensors = layout({1000, 0, 4099, 5}, {3, 0, 2048, 17}, 70, {1.0f, 0.5f, 2.0f, 1.0f}, {0.1f, 0.0f, 0.05f, 0.1f},
                     &c.total);
  return c;
}

TEST(CudaOptim, AdamWMatchesCpuMasterOnly) {
  GC_REQUIRE_GPU();
  const OptimCase c = three_tensors();
  check_adamw<float>(c.tensors, c.total, c.decay, c.lr_mult, false, "fp32 master only");
}

TEST(CudaOptim, AdamWMatchesCpuFp32Working) {
  GC_REQUIRE_GPU();
  const OptimCase c = three_tensors();
  check_adamw<float>(c.tensors, c.total, c.decay, c.lr_mult, true, "fp32 working");
}

TEST(CudaOptim, AdamWMatchesCpuBf16Working) {
  GC_REQUIRE_GPU();
  const OptimCase c = three_tensors();
  check_adamw<bf16>(c.tensors, c.total, c.decay, c.lr_mult, true, "bf16 working");
}

TEST(CudaOptim, AdamWSkipsGapsAndEmptyTensors) {
  GC_REQUIRE_GPU();
  const OptimCase c = gapped_tensors();
  check_adamw<bf16>(c.tensors, c.total, c.decay, c.lr_mult, true, "bf16 gapped");
}

// Per-tensor Σ x² against cpu::sum_of_squares; two runs bitwise equal. The
// scratch is filled with NaN first, so reading an unwritten slot would show.
void check_sum_squares_per_tensor(const std::vector<AdamWTensor>& tensors, std::int64_t total,
                                  const std::string& what) {
  const std::size_t n = std::size_t(total);
  const std::vector<float> x = to_float_vector(kt::random_vector(n, 21));
  auto d_x = ct::upload(x);
  auto d_tensors = ct::upload(tensors);
  const int count = int(tensors.size());
  ct::DeviceBuffer<double> d_scratch(gc::tree::cuda::sum_squares_scratch_doubles(total, count));
  ct::DeviceBuffer<double> d_out(tensors.size());

  std::vector<double> runs[2];
  for (auto& run : runs) {
    GC_CUDA_CHECK(cudaMemset(d_scratch.data(), 0xff, d_scratch.size() * sizeof(double)));
    GC_CUDA_CHECK(cudaMemset(d_out.data(), 0xff, d_out.size() * sizeof(double)));
    gc::tree::cuda::sum_squares_per_tensor(d_out.data(), d_scratch.data(), d_x.data(), d_tensors.data(), count, total);
    run = ct::download(d_out);
  }
  double worst = 0.0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const double ref = gc::tree::cpu::sum_of_squares(x.data() + tensors[t].offset, tensors[t].numel);
    EXPECT_TRUE(same_bits(runs[0][t], runs[1][t])) << what << " tensor " << t << ": runs differ";
    if (tensors[t].numel == 0) {
      EXPECT_EQ(runs[0][t], 0.0) << what << " tensor " << t;
      continue;
    }
    const double e = std::fabs(runs[0][t] - ref) / ref;
    worst = e > worst ? e : worst;
    EXPECT_LT(e, 1e-12) << what << " tensor " << t << ": got " << runs[0][t] << ", want " << ref;
  }
  kt::report("cuda sum_squares_per_tensor " + what, worst);
}

TEST(CudaOptim, SumSquaresPerTensorMatchesCpuAndRepeats) {
  GC_REQUIRE_GPU();
  std::int64_t total = 0;
  const auto contiguous =
      layout({1000, 70001, 37, 65536, 131073, 1, 200001}, {}, 0, {1.0f}, {0.0f}, &total);
  check_sum_squares_per_tensor(contiguous, total, "contiguous");
  // A gap longer than a chunk at the start (slot 0 unused), inner gaps, empty tensors.
  const auto gapped =
      layout({0, 1000, 0, 131072, 65535, 7}, {0, 5, 0, 70000, 1, 3}, 70000, {1.0f}, {0.0f}, &total);
  check_sum_squares_per_tensor(gapped, total, "gapped");
}

template <typename T>
void check_sum_squares_buffer(std::int64_t n) {
  const std::vector<T> x = ct::convert<T>(kt::random_vector(std::size_t(n), 31));
  const std::vector<double> xd = ct::to_double(x);
  const double ref = gc::tree::cpu::sum_of_squares(xd.data(), n);
  auto d_x = ct::upload(x);
  ct::DeviceBuffer<double> d_scratch(gc::tree::cuda::sum_squares_scratch_doubles(n, 1));
  GC_CUDA_CHECK(cudaMemset(d_scratch.data(), 0xff, d_scratch.size() * sizeof(double)));
  const double a = gc::tree::cuda::sum_squares(d_x.data(), n, d_scratch.data());
  const double b = gc::tree::cuda::sum_squares(d_x.data(), n, d_scratch.data());
  const double e = std::fabs(a - ref) / ref;
  kt::report(std::string("cuda sum_squares ") + (std::is_same_v<T, float> ? "fp32" : "bf16") + " n=" +
                 std::to_string(n),
             e);
  EXPECT_LT(e, 1e-12) << "n = " << n;
  EXPECT_TRUE(same_bits(a, b)) << "n = " << n << ": runs differ";
}

TEST(CudaOptim, SumSquaresBufferMatchesCpuAndRepeats) {
  GC_REQUIRE_GPU();
  for (std::int64_t n : {std::int64_t(1), std::int64_t(65536), std::int64_t(65537), std::int64_t(200003)}) {
    check_sum_squares_buffer<float>(n);
    check_sum_squares_buffer<bf16>(n);
  }
  ct::DeviceBuffer<double> scratch(gc::tree::cuda::sum_squares_scratch_doubles(0, 1));
  EXPECT_EQ(gc::tree::cuda::sum_squares(static_cast<const float*>(nullptr), 0, scratch.data()), 0.0);
}

TEST(CudaOptim, CastCopyRoundsToNearest) {
  GC_REQUIRE_GPU();
  const std::size_t n = 100003;
  const std::vector<float> x = to_float_vector(kt::random_normal(n, 41));
  auto d_x = ct::upload(x);
  ct::DeviceBuffer<bf16> d_b(n);
  ct::DeviceBuffer<float> d_f(n);
  gc::tree::cuda::cast_copy(d_b.data(), d_x.data(), std::int64_t(n));
  gc::tree::cuda::cast_copy(d_f.data(), d_x.data(), std::int64_t(n));
  const std::vector<bf16> b = ct::download(d_b);
  const std::vector<float> f = ct::download(d_f);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < n; ++i) {
    mismatches += !same_bits(b[i], gc::tree::cuda::from_float<bf16>(x[i]));
    mismatches += !same_bits(f[i], x[i]);
  }
  EXPECT_EQ(mismatches, 0u);
}

}  // namespace
