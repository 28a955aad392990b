// The weight metrics' device kernels (cuda/weight_stats.cuh) on shapes the model specs of the
// parity tests do not reach: W x and Wᵀx of tall and wide matrices whose rows span several
// partial chunks (metrics::kColumnChunkRows), against a double-precision product on the host.
// (The Lanczos loop and the cosine blocks are compared with the CPU on every matrix of the model
// by engine/metrics_parity.cuh.) Random inputs, never zeros.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "cuda/cuda_test_util.hpp"
#include "cuda/weight_stats.cuh"
#include "kernels/kernel_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::DeviceBuffer;
namespace cd = gc::tree::cuda::detail;

std::vector<float> random_matrix(int rows, int cols, unsigned seed) {
  const std::vector<double> v = kt::random_normal(std::size_t(rows) * cols, seed);
  return std::vector<float>(v.begin(), v.end());
}

// y = Wᵀx by the two device passes, for W [rows, cols].
std::vector<double> transposed_times_on_device(const std::vector<float>& W, const std::vector<double>& x, int rows,
                                               int cols) {
  const DeviceBuffer<float> w = ct::upload(W);
  const DeviceBuffer<double> dx = ct::upload(x);
  const int chunks = (rows + gc::tree::metrics::kColumnChunkRows - 1) / gc::tree::metrics::kColumnChunkRows;
  DeviceBuffer<double> partial{static_cast<std::size_t>(chunks) * cols}, y{static_cast<std::size_t>(cols)};
  gc::tree::cuda::launch(cd::matvec_cols_partial_kernel<>, dim3(cd::blocks_of(cols, 64), unsigned(chunks)), 64, 0,
                         partial.data(), w.data(), dx.data(), rows, cols);
  gc::tree::cuda::launch(cd::sum_column_chunks_kernel<>, cd::blocks_of(cols, 64), 64, 0, y.data(), partial.data(),
                         chunks, cols);
  return ct::download(y);
}

TEST(CudaWeightStats, TransposedProductOverSeveralRowChunksMatchesTheHost) {
  GC_REQUIRE_GPU();
  for (const auto& [rows, cols] : {std::pair{700, 48}, std::pair{257, 3}, std::pair{1, 130}, std::pair{513, 1}}) {
    const std::vector<float> W = random_matrix(rows, cols, unsigned(rows * 31 + cols));
    const std::vector<double> x = kt::random_normal(std::size_t(rows), unsigned(rows + 7));
    const std::vector<double> got = transposed_times_on_device(W, x, rows, cols);
    std::vector<double> ref(std::size_t(cols), 0.0);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) ref[std::size_t(c)] += double(W[std::size_t(r) * cols + c]) * x[std::size_t(r)];
    }
    ct::expect_close(got, ref, 1e-12, "Wᵀx " + std::to_string(rows) + "×" + std::to_string(cols));
  }
}

TEST(CudaWeightStats, DirectProductMatchesTheHost) {
  GC_REQUIRE_GPU();
  const int rows = 300, cols = 77;
  const std::vector<float> W = random_matrix(rows, cols, 11);
  const std::vector<double> x = kt::random_normal(std::size_t(cols), 12);
  const DeviceBuffer<float> w = ct::upload(W);
  const DeviceBuffer<double> dx = ct::upload(x);
  DeviceBuffer<double> y{static_cast<std::size_t>(rows)};
  gc::tree::cuda::launch(cd::matvec_rows_kernel<>, cd::blocks_of(std::int64_t(rows) * 32, 256), 256, 0, y.data(),
                         w.data(), dx.data(), rows, cols);
  std::vector<double> ref(std::size_t(rows), 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) ref[std::size_t(r)] += double(W[std::size_t(r) * cols + c]) * x[std::size_t(c)];
  }
  ct::expect_close(ct::download(y), ref, 1e-12, "W x 300×77");
}

}  // namespace
