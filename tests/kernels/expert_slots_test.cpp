// Expert parallelism's slotted exchange on the CPU (cpu/expert_slots.hpp, core/expert_slots.hpp)
// against an oracle written from the route's definition: the received rows sorted by (expert,
// source rank, the source's order), found by sorting, not by the kernels' index formulas.
#include "cpu/expert_slots.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/expert_slots_test_util.hpp"

namespace kt = gc::test::kernels;

namespace {

using gc::tree::core::ExpertBlock;
using gc::tree::core::expert_block_of;

struct Expected {
  std::vector<std::int64_t> local_offsets;
  std::vector<std::int64_t> slot_row_of;  // expert-major row p -> slot row
};

// The oracle: each received row tagged (expert, source, index in the source's run), sorted.
Expected oracle(const std::vector<std::int64_t>& all, int G, int E, std::int64_t S, int me) {
  const ExpertBlock b = expert_block_of(me, G, E);
  std::vector<std::tuple<int, int, std::int64_t, std::int64_t>> rows;  // expert, source, i, slot row
  for (int s = 0; s < G; ++s) {
    const std::int64_t* o = all.data() + std::size_t(s) * std::size_t(E + 1);
    for (std::int64_t j = 0; j < o[b.hi] - o[b.lo]; ++j) {
      const std::int64_t source_row = o[b.lo] + j;
      const int e = int(std::upper_bound(o, o + E + 1, source_row) - o) - 1;
      rows.emplace_back(e, s, j, std::int64_t(s) * S + j);
    }
  }
  std::sort(rows.begin(), rows.end());
  Expected x;
  x.local_offsets.assign(std::size_t(b.hi - b.lo + 1), 0);
  for (const auto& [e, s, j, r] : rows) {
    x.slot_row_of.push_back(r);
    ++x.local_offsets[std::size_t(e - b.lo + 1)];
  }
  for (std::size_t k = 1; k < x.local_offsets.size(); ++k) x.local_offsets[k] += x.local_offsets[k - 1];
  return x;
}

TEST(KernelExpertSlots, RouteMatchesTheSortedReceivedRows) {
  std::mt19937 rng(20261207);
  for (const auto& [G, E, S] : {std::tuple{1, 4, 7}, std::tuple{2, 4, 5}, std::tuple{3, 8, 9}, std::tuple{4, 145, 40},
                                std::tuple{8, 145, 17}, std::tuple{3, 2, 6}}) {
    for (int trial = 0; trial < 4; ++trial) {
      const std::vector<std::int64_t> all = kt::random_slot_offsets(G, E, S, rng);
      const std::int64_t C = std::int64_t(G) * S + trial;  // a bound past the slots, too
      for (int me = 0; me < G; ++me) {
        SCOPED_TRACE(testing::Message() << "G " << G << " E " << E << " S " << S << " rank " << me);
        const ExpertBlock b = expert_block_of(me, G, E);
        std::vector<std::int32_t> perm(std::size_t(C), -7), unperm(std::size_t(C), -7);
        std::vector<std::int64_t> local(std::size_t(b.hi - b.lo + 1), -7);
        gc::tree::cpu::expert_slots_route(perm.data(), unperm.data(), local.data(), all.data(), G, S, b, C, E);
        const Expected x = oracle(all, G, E, S, me);
        EXPECT_EQ(local, x.local_offsets);
        const std::int64_t received = std::int64_t(x.slot_row_of.size());
        std::vector<bool> valid(std::size_t(C), false);
        for (std::int64_t p = 0; p < received; ++p) {
          EXPECT_EQ(perm[std::size_t(p)], x.slot_row_of[std::size_t(p)]) << "row " << p;
          valid[std::size_t(x.slot_row_of[std::size_t(p)])] = true;
          EXPECT_EQ(unperm[std::size_t(x.slot_row_of[std::size_t(p)])], p) << "row " << p;
        }
        for (std::int64_t p = received; p < C; ++p) EXPECT_EQ(perm[std::size_t(p)], p);
        for (std::int64_t r = 0; r < C; ++r) {
          if (!valid[std::size_t(r)]) {
            EXPECT_EQ(unperm[std::size_t(r)], r) << "padding slot row " << r;
          }
        }
      }
    }
  }
}

TEST(KernelExpertSlots, PackFillsEachSlotWithItsBlocksRunAndZerosAndUnpackInvertsIt) {
  std::mt19937 rng(7);
  const int G = 3, E = 7, dim = 5;
  const std::int64_t S = 6;
  const std::vector<std::int64_t> all = kt::random_slot_offsets(G, E, S, rng);
  const std::int64_t* offsets = all.data() + (E + 1);  // rank 1's rows
  const std::int64_t rows = offsets[E];
  ASSERT_GT(rows, 0);
  std::vector<float> x(std::size_t(rows * dim));
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (float& v : x) v = u(rng);
  std::vector<float> slots(std::size_t(G * S * dim), 99.0f);
  gc::tree::cpu::expert_slots_pack(slots.data(), x.data(), offsets, G, S, dim, E);
  for (int q = 0; q < G; ++q) {
    const ExpertBlock b = expert_block_of(q, G, E);
    for (std::int64_t i = 0; i < S; ++i) {
      for (int c = 0; c < dim; ++c) {
        const float got = slots[std::size_t((q * S + i) * dim + c)];
        const std::int64_t source = offsets[b.lo] + i;
        const float want = source < offsets[b.hi] ? x[std::size_t(source * dim + c)] : 0.0f;
        EXPECT_EQ(got, want) << "slot " << q << " row " << i;
      }
    }
  }
  std::vector<float> back(x.size(), -1.0f);
  gc::tree::cpu::expert_slots_unpack(back.data(), slots.data(), offsets, G, S, dim, E);
  EXPECT_EQ(back, x);
}

TEST(KernelExpertSlots, BlocksSplitTheExpertsAsTheHostRouteDoes) {
  // 145 experts on 8 ranks: 19, 18, ..., 18 (model/expert_parallel.hpp's expert_block).
  EXPECT_EQ(expert_block_of(0, 8, 145).lo, 0);
  EXPECT_EQ(expert_block_of(0, 8, 145).hi, 19);
  EXPECT_EQ(expert_block_of(1, 8, 145).lo, 19);
  EXPECT_EQ(expert_block_of(1, 8, 145).hi, 37);
  EXPECT_EQ(expert_block_of(7, 8, 145).hi, 145);
  EXPECT_EQ(expert_block_of(2, 3, 2).lo, expert_block_of(2, 3, 2).hi);  // a rank may own none
}

}  // namespace
