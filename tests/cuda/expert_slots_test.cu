// Expert parallelism's slotted exchange on the GPU (cuda/expert_slots.cuh) against the CPU
// kernels of templates/cpu/expert_slots.hpp (themselves checked against a sorting oracle in
// tests/kernels/expert_slots_test.cpp), on random offsets and random rows: the permutation and
// the owned offsets exactly, pack and unpack exactly (copies), in fp32 and bf16.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "cpu/expert_slots.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/expert_slots.cuh"
#include "kernels/expert_slots_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using gc::tree::core::ExpertBlock;
using gc::tree::core::expert_block_of;

TEST(CudaExpertSlots, RouteEqualsTheCpuKernel) {
  std::mt19937 rng(1207);
  // Empty runs included, and a rank that owns no expert (3 ranks, 2 experts).
  for (const auto& [G, E, S] : {std::tuple{2, 4, 5}, std::tuple{3, 8, 9}, std::tuple{8, 145, 17}, std::tuple{3, 2, 6}}) {
    const std::vector<std::int64_t> all = kt::random_slot_offsets(G, E, S, rng);
    const auto all_d = ct::upload(all);
    const std::int64_t C = std::int64_t(G) * S + 3;
    for (int me = 0; me < G; ++me) {
      SCOPED_TRACE(testing::Message() << "G " << G << " E " << E << " rank " << me);
      const ExpertBlock b = expert_block_of(me, G, E);
      std::vector<std::int32_t> perm(static_cast<std::size_t>(C)), unperm(static_cast<std::size_t>(C));
      std::vector<std::int64_t> local(static_cast<std::size_t>(b.hi - b.lo + 1));
      gc::tree::cpu::expert_slots_route(perm.data(), unperm.data(), local.data(), all.data(), G, S, b, C, E);
      ct::DeviceBuffer<std::int32_t> perm_d(perm.size()), unperm_d(unperm.size());
      ct::DeviceBuffer<std::int64_t> local_d(local.size());
      gc::tree::cuda::expert_slots_route(perm_d.data(), unperm_d.data(), local_d.data(), all_d.data(), G, S, b, C, E);
      EXPECT_EQ(ct::download(local_d), local);
      EXPECT_EQ(ct::download(perm_d), perm);
      EXPECT_EQ(ct::download(unperm_d), unperm);
    }
  }
}

template <typename T>
void expect_pack_and_unpack_equal_the_cpu() {
  std::mt19937 rng(99);
  const int G = 3, E = 7, dim = 24;
  const std::int64_t S = 6;
  const std::vector<std::int64_t> all = kt::random_slot_offsets(G, E, S, rng, 1);
  const std::vector<std::int64_t> offsets(all.begin() + (E + 1), all.begin() + 2 * (E + 1));  // rank 1's
  const std::int64_t rows = offsets[std::size_t(E)];
  ASSERT_GT(rows, 0);
  const std::vector<double> x = ct::rounded<T>(kt::random_normal(std::size_t(rows * dim), 31));
  const auto x_d = ct::upload_as<T>(x);
  const auto offsets_d = ct::upload(offsets);
  const auto stale = ct::rounded<T>(kt::random_normal(std::size_t(G * S * dim), 32));  // no zeros left over
  auto slots_d = ct::upload_as<T>(stale);
  gc::tree::cuda::expert_slots_pack(slots_d.data(), x_d.data(), offsets_d.data(), G, S, dim, E);
  std::vector<double> slots(std::size_t(G * S * dim));
  gc::tree::cpu::expert_slots_pack(slots.data(), x.data(), offsets.data(), G, S, dim, E);
  EXPECT_EQ(ct::download_double(slots_d), slots) << "pack " << ct::type_name<T>();
  auto back_d = ct::upload_as<T>(ct::rounded<T>(kt::random_normal(std::size_t(rows * dim), 33)));
  gc::tree::cuda::expert_slots_unpack(back_d.data(), slots_d.data(), offsets_d.data(), G, S, dim, E);
  EXPECT_EQ(ct::download_double(back_d), x) << "unpack " << ct::type_name<T>();
}

TEST(CudaExpertSlots, PackAndUnpackEqualTheCpuKernels) {
  expect_pack_and_unpack_equal_the_cpu<float>();
  expect_pack_and_unpack_equal_the_cpu<ct::bf16>();
}

}  // namespace
