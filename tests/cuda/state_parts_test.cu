// cuda/state_parts.cuh against a host loop: three parts with gaps between them (one empty), laid
// at other offsets of a larger whole array, over more elements than one grid pass; fp32 copies
// exactly, bf16 rounds as from_float does; the whole array's other elements stay as they were.
#include "cuda/state_parts.cuh"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::cuda::AdamWTensor;
using gc::tree::cuda::bf16;

template <typename T>
void expect_parts_copied() {
  // Local slots: [0, 70000) part 0, [70016, 70016) part 1 (empty), [70144, 70144 + 300) part 2.
  const std::vector<AdamWTensor> parts = {{0, 70000, 1.0f, 0.0f}, {70016, 0, 1.0f, 0.0f}, {70144, 300, 1.0f, 0.0f}};
  const std::vector<std::int64_t> whole_offsets = {1000, 90000, 75000};
  const std::int64_t total = 70144 + 300 + 20, whole_size = 100000;
  const std::vector<double> local_d = kt::random_normal(std::size_t(total), 17);
  const std::vector<float> local = ct::convert<float>(local_d);
  const std::vector<T> before = ct::convert<T>(kt::random_normal(std::size_t(whole_size), 18));
  std::vector<T> expected = before;
  for (std::size_t t = 0; t < parts.size(); ++t) {
    for (std::int64_t k = 0; k < parts[t].numel; ++k) {
      expected[std::size_t(whole_offsets[t] + k)] =
          gc::tree::cuda::from_float<T>(local[std::size_t(parts[t].offset + k)]);
    }
  }
  auto whole_d = ct::upload(before);
  auto local_d_dev = ct::upload(local);
  auto parts_d = ct::upload(parts);
  auto offsets_d = ct::upload(whole_offsets);
  gc::tree::cuda::copy_parts_to_whole(whole_d.data(), local_d_dev.data(), parts_d.data(), offsets_d.data(),
                                      int(parts.size()), total);
  const std::vector<T> got = ct::download(whole_d);
  ASSERT_EQ(got.size(), expected.size());
  std::size_t differing = 0, changed = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    differing += gc::tree::cuda::to_float(got[i]) != gc::tree::cuda::to_float(expected[i]) ? 1 : 0;
    changed += gc::tree::cuda::to_float(got[i]) != gc::tree::cuda::to_float(before[i]) ? 1 : 0;
  }
  EXPECT_EQ(differing, 0u);
  EXPECT_GT(changed, 69000u);  // random values: nearly every copied element changed
}

TEST(CudaStateParts, HeldPartsGoToTheirPlaceInTheWholeArray) {
  GC_REQUIRE_GPU();
  expect_parts_copied<float>();
  expect_parts_copied<bf16>();
}

}  // namespace
