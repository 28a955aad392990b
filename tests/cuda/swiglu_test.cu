// The CUDA SwiGLU kernels (cuda/swiglu.cuh: SwiGLU, on separate inputs and on stacked [a | b] rows) against the CPU kernels of
// templates/cpu/swiglu.hpp run in double on the same inputs, rounded to T first (so for bf16 the
// reference sees exactly the values the GPU reads).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/swiglu.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/swiglu.cuh"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::bf16;
using ct::DeviceBuffer;

using ct::download_double;
using ct::expect_close;
using ct::rounded;
using ct::type_name;
using ct::upload_as;

// ---- SwiGLU ------------------------------------------------------------------------------------

// a spans ±[0.1, 8] so both tails of σ are exercised. in_place: da is the buffer of dh. Widths
// as a spec fixes them: 200 (packs of 8 bf16 / 4 fp32 values) and 37 (one value a thread).
template <typename T, int kWidth>
void check_swiglu(bool in_place) {
  const std::int64_t rows = 37, n = rows * kWidth;
  const std::size_t size = std::size_t(n);
  const auto a = rounded<T>(kt::random_vector(size, 23, 0.1, 8.0));
  const auto b = rounded<T>(kt::random_vector(size, 24));
  const auto dh = rounded<T>(kt::random_vector(size, 25));
  std::vector<double> h_ref(size), da_ref(size), db_ref(size);
  gc::tree::cpu::swiglu_forward<double>(h_ref.data(), a.data(), b.data(), n);
  gc::tree::cpu::swiglu_backward<double>(da_ref.data(), db_ref.data(), dh.data(), a.data(), b.data(), n);

  auto a_d = upload_as<T>(a);
  auto b_d = upload_as<T>(b);
  auto dh_d = upload_as<T>(dh);
  DeviceBuffer<T> h(size), da_own(size), db(size);
  DeviceBuffer<T>& da = in_place ? dh_d : da_own;
  gc::tree::cuda::swiglu_forward<kWidth>(h.data(), a_d.data(), b_d.data(), rows);
  gc::tree::cuda::swiglu_backward<kWidth>(da.data(), db.data(), dh_d.data(), a_d.data(), b_d.data(), rows);
  const std::string what = "swiglu " + type_name<T>() + " width " + std::to_string(kWidth) + (in_place ? " in place" : "");
  expect_close(download_double(h), h_ref, ct::tolerance<T>(), what + " forward");
  expect_close(download_double(da), da_ref, ct::tolerance<T>(), what + " backward da");
  expect_close(download_double(db), db_ref, ct::tolerance<T>(), what + " backward db");
}

// The pair layout of the stacked gate/up GEMM: ab [rows, 2·kWidth], row r = [a_r | b_r], and
// dab [rows, 2·kWidth] = [da | db]; against the CPU's elementwise kernels on a and b apart.
template <typename T, int kWidth>
void check_swiglu_pair() {
  const std::int64_t rows = 37, n = rows * kWidth;
  const auto a = rounded<T>(kt::random_vector(std::size_t(n), 26, 0.1, 8.0));
  const auto b = rounded<T>(kt::random_vector(std::size_t(n), 27));
  const auto dh = rounded<T>(kt::random_vector(std::size_t(n), 28));
  std::vector<double> ab(std::size_t(2 * n));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < kWidth; ++j) {
      ab[std::size_t(r * 2 * kWidth + j)] = a[std::size_t(r * kWidth + j)];
      ab[std::size_t(r * 2 * kWidth + kWidth + j)] = b[std::size_t(r * kWidth + j)];
    }
  }
  const std::size_t size = static_cast<std::size_t>(n);
  std::vector<double> h_ref(size), da(size), db(size);
  gc::tree::cpu::swiglu_forward<double>(h_ref.data(), a.data(), b.data(), n);
  gc::tree::cpu::swiglu_backward<double>(da.data(), db.data(), dh.data(), a.data(), b.data(), n);
  std::vector<double> dab_ref(ab.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (int j = 0; j < kWidth; ++j) {
      dab_ref[std::size_t(r * 2 * kWidth + j)] = da[std::size_t(r * kWidth + j)];
      dab_ref[std::size_t(r * 2 * kWidth + kWidth + j)] = db[std::size_t(r * kWidth + j)];
    }
  }
  // The CPU pair kernels are the same arithmetic in the other layout.
  std::vector<double> h_cpu(size), dab_cpu(ab.size());
  gc::tree::cpu::swiglu_pair_forward<double>(h_cpu.data(), ab.data(), rows, kWidth);
  gc::tree::cpu::swiglu_pair_backward<double>(dab_cpu.data(), dh.data(), ab.data(), rows, kWidth);
  EXPECT_EQ(h_cpu, h_ref);
  EXPECT_EQ(dab_cpu, dab_ref);

  auto ab_d = upload_as<T>(ab);
  auto dh_d = upload_as<T>(dh);
  DeviceBuffer<T> h(size), dab(ab.size());
  gc::tree::cuda::swiglu_pair_forward<kWidth>(h.data(), ab_d.data(), rows);
  gc::tree::cuda::swiglu_pair_backward<kWidth>(dab.data(), dh_d.data(), ab_d.data(), rows);
  const std::string what = "swiglu pair " + type_name<T>() + " width " + std::to_string(kWidth);
  expect_close(download_double(h), h_ref, ct::tolerance<T>(), what + " forward");
  expect_close(download_double(dab), dab_ref, ct::tolerance<T>(), what + " backward");
}

TEST(CudaRows, SwigluPairLayoutMatchesCpu) {
  GC_REQUIRE_GPU();
  check_swiglu_pair<float, 200>();
  check_swiglu_pair<bf16, 200>();
  check_swiglu_pair<float, 37>();
  check_swiglu_pair<bf16, 37>();
}

TEST(CudaRows, SwigluForwardBackwardMatchCpu) {
  GC_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    check_swiglu<float, 200>(in_place);
    check_swiglu<bf16, 200>(in_place);
    check_swiglu<float, 37>(in_place);
    check_swiglu<bf16, 37>(in_place);
  }
}

}  // namespace
