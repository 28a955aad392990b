// The CUDA embedding kernels (cuda/embedding.cuh: the embedding lookup (scaled) and its deterministic scatter-add backward) against the CPU kernels of
// templates/cpu/embedding.hpp run in double on the same inputs, rounded to T first (so for bf16 the
// reference sees exactly the values the GPU reads).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/embedding.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/embedding.cuh"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::bf16;
using ct::DeviceBuffer;

using ct::bitwise_equal;
using ct::download_double;
using ct::expect_close;
using ct::rounded;
using ct::type_name;
using ct::upload_as;

// ---- embedding ---------------------------------------------------------------------------------

// Embedding shapes as a spec fixes them: d = 200 (8-wide packs for bf16, 4-wide for fp32) and
// d = 36 (4-wide / 4-wide), with two scales.
struct Embed200 {
  static constexpr int kDim = 200;
  static constexpr float kScale = 1.7f;
};
struct Embed36 {
  static constexpr int kDim = 36;
  static constexpr float kScale = 0.75f;
};

template <typename T, class S>
void check_embedding_forward() {
  const int N = 37, d = S::kDim, V = 101;
  const float scale = S::kScale;
  const auto tokens = kt::random_tokens(N, V, 1);
  const auto E = rounded<T>(kt::random_vector(std::size_t(V) * d, 2));
  std::vector<double> ref(std::size_t(N) * d);
  gc::tree::cpu::embedding_forward<double>(ref.data(), tokens.data(), E.data(), N, d, double(scale));

  auto tokens_d = ct::upload(tokens);
  auto E_d = upload_as<T>(E);
  DeviceBuffer<T> out(ref.size());
  gc::tree::cuda::embedding_forward<S>(out.data(), tokens_d.data(), E_d.data(), N);
  expect_close(download_double(out), ref, ct::tolerance<T>(),
               "embedding forward " + type_name<T>() + " d " + std::to_string(d));
}

// dE is fp32 and starts from a random prior; the sums are compared without the prior.
template <typename T, class S>
void check_embedding_backward() {
  const int N = 1000, d = S::kDim, V = 53;  // ~19 occurrences per token
  const float scale = S::kScale;
  const auto tokens = kt::random_tokens(N, V, 3);
  const auto dout = rounded<T>(kt::random_vector(std::size_t(N) * d, 4));
  const auto prior = rounded<float>(kt::random_vector(std::size_t(V) * d, 5));
  std::vector<double> ref = prior;
  gc::tree::cpu::embedding_backward<double>(ref.data(), tokens.data(), dout.data(), N, d, double(scale));

  const auto index = gc::tree::cuda::build_embedding_index(tokens.data(), N);
  auto unique_d = ct::upload(index.unique_tokens);
  auto offsets_d = ct::upload(index.offsets);
  auto positions_d = ct::upload(index.positions);
  auto dout_d = upload_as<T>(dout);
  const int num_unique = int(index.unique_tokens.size());

  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    auto dE = upload_as<float>(prior);
    gc::tree::cuda::embedding_backward<S>(dE.data(), unique_d.data(), offsets_d.data(), positions_d.data(), num_unique,
                                          dout_d.data());
    runs.push_back(ct::download(dE));
  }
  expect_close(kt::minus(ct::to_double(runs[0]), prior), kt::minus(ref, prior), ct::tolerance<float>(),
               "embedding backward " + type_name<T>());
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "embedding backward is not deterministic";
}

// Host-only: needs no GPU.
TEST(CudaRows, EmbeddingIndexGroupsPositionsByToken) {
  const std::vector<std::int32_t> tokens = {5, 2, 5, 7, 2, 5};
  const auto index = gc::tree::cuda::build_embedding_index(tokens.data(), int(tokens.size()));
  EXPECT_EQ(index.unique_tokens, (std::vector<std::int32_t>{2, 5, 7}));
  EXPECT_EQ(index.offsets, (std::vector<std::int32_t>{0, 2, 5, 6}));
  EXPECT_EQ(index.positions, (std::vector<std::int32_t>{1, 4, 0, 2, 5, 3}));
  const auto empty = gc::tree::cuda::build_embedding_index(tokens.data(), 0);
  EXPECT_TRUE(empty.unique_tokens.empty());
  EXPECT_EQ(empty.offsets, (std::vector<std::int32_t>{0}));
}

TEST(CudaRows, EmbeddingForwardMatchesCpu) {
  GC_REQUIRE_GPU();
  check_embedding_forward<float, Embed200>();
  check_embedding_forward<bf16, Embed200>();
  check_embedding_forward<float, Embed36>();
  check_embedding_forward<bf16, Embed36>();
}

TEST(CudaRows, EmbeddingBackwardMatchesCpuAndIsDeterministic) {
  GC_REQUIRE_GPU();
  check_embedding_backward<float, Embed200>();
  check_embedding_backward<bf16, Embed200>();
  check_embedding_backward<float, Embed36>();
  check_embedding_backward<bf16, Embed36>();
}

}  // namespace
