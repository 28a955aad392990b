// ZeRO-1 under expert parallelism on GPUs, tested without one (issue 39 item 3): a tree with
// distributed.zero_stage = 1 trained on 4 emulated GPUs at --expert-parallel 2 (EP 2 × DP 2).
// A rank holds its expert block's gradients (padded to equal shards for NCCL) and, of the
// block's fp32 masters and AdamW moments, its shard over the 2 ranks that own the same block
// (engine/zero.hpp); after AdamW the owners all-gather the shards through the spent gradient
// array and the group shares the blocks. Checked against one process: the same losses,
// weights and step-0 metrics (whose expert and shared tensors are assembled over the owners and
// the group), the memory as planned, nothing allocated in the loop, and a stop and resume that
// repeats the run bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "e2e/gpu_emulated_fixture.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace emu = gc::test::gpu_emulated;

using gc::test::max_param_diff;
using gc::test::max_rel_diff;
using gc::test::Outcome;
using gc::test::run_losses;
using emu::GpuDataParallelEmulated;

TEST_F(GpuDataParallelEmulated, ZeroOneUnderExpertParallelismShardsTheBlockAndEqualsOneProcess) {
  std::string spec = emu::moe_spec_text("bf16", 1);
  spec.replace(spec.find("global_batch = 4"), 16, "global_batch = 8");  // 4 micro-batches: one per rank
  const fs::path tree = build("moe_zero1", spec);
  ASSERT_FALSE(HasFailure());
  const Outcome one = train(tree, "--out " + (dir_ / "one").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome ep = train(tree, "--expert-parallel 2 --out " + (dir_ / "ep_dp").string(), 4);
  ASSERT_EQ(ep.status, 0) << ep.output;
  EXPECT_LT(max_rel_diff(run_losses(dir_ / "one"), run_losses(dir_ / "ep_dp")), 1e-5);
  EXPECT_LT(max_param_diff(dir_ / "one" / emu::kLast, dir_ / "ep_dp" / emu::kLast), 1e-5);

  // Rank 0 holds half the expert tensors' gradients (3 MoE layers × 4 experts × 3 × 64 × 64 fp32
  // values), and of its block's slots half the masters and moments: 8 bytes of moments per
  // gradient slot's half, as planned; within the device plan, nothing allocated in the loop.
  const auto s_one = emu::summary(dir_ / "one"), s_ep = emu::summary(dir_ / "ep_dp");
  constexpr std::int64_t kExpertGradientBytes = 3 * 4 * 3 * 64 * 64 * 4;
  EXPECT_EQ(s_ep["gradient_bytes"], s_ep["planned_gradient_bytes"]) << s_ep.dump();
  EXPECT_EQ(s_ep["optimizer_bytes"], s_ep["planned_optimizer_bytes"]) << s_ep.dump();
  EXPECT_EQ(s_one["gradient_bytes"].get<std::int64_t>() - s_ep["gradient_bytes"].get<std::int64_t>(),
            kExpertGradientBytes / 2)
      << s_one.dump() << "\n" << s_ep.dump();
  EXPECT_EQ(s_ep["optimizer_bytes"], s_ep["gradient_bytes"]) << s_ep.dump();
  EXPECT_EQ(s_ep["allocations_in_loop"], 0) << s_ep.dump();
  EXPECT_LE(s_ep["allocated_device_bytes_peak"].get<double>(), s_ep["planned_device_bytes"].get<double>())
      << s_ep.dump();

  // The weight metrics assemble each tensor's masters over the owners (and an expert tensor's
  // over the group): at step 0 (the same initial weights) what one process measures.
  emu::expect_same_metrics(emu::metric_records(dir_ / "ep_dp" / "metrics.jsonl", 0),
                           emu::metric_records(dir_ / "one" / "metrics.jsonl", 0), "train step 0, ZeRO-1 EP 2 x DP 2");

  // A checkpoint gathers each block's shards over its owners, then the blocks to rank 0; a
  // resume gives each rank its shard of its block back: stopped after step 3 and resumed, the
  // run repeats the uninterrupted one bit for bit.
  const fs::path half = dir_ / "ep_dp_half";
  const Outcome first = train(tree, "--expert-parallel 2 --steps 3 --out " + half.string(), 4);
  ASSERT_EQ(first.status, 0) << first.output;
  const Outcome resumed = train(tree, "--expert-parallel 2 --resume " + half.string(), 4);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(run_losses(half), run_losses(dir_ / "ep_dp"));
}

}  // namespace
