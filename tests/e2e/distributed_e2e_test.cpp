// Data parallelism on the CPU backend under mpirun (Open MPI from Debian):
// 2 ranks × 1 micro-batch per step equal 1 process × 2 accumulated
// micro-batches (losses and the parameters after 20 steps within 1e-6
// relative), two 2-rank runs are bit-identical, a run resumes with another
// world size, rank 0 alone writes, and a world size that does not divide the
// step's micro-batches is a clear error.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/comm.hpp"
#include "e2e/mpi_tree_test.hpp"
#include "e2e/run_compare.hpp"
#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

using gc::test::run_losses;
using gc::test::Outcome;
using gc::test::read_jsonl;
using gc::test::max_param_diff;
using gc::test::max_rel_diff;
using gc::test::sh;

// 8 sequences per step in micro-batches of 4: two per step.
const std::string kDataParallel = gc::test::fixture_spec("data_parallel.toml");

class DataParallel : public gc::test::MpiTreeTest {};



using gc::test::read_text;

TEST_F(DataParallel, TwoRanksEqualOneProcessRepeatBitForBitAndResumeWithAnyWorldSize) {
  const Outcome gen = generate(kDataParallel);
  ASSERT_EQ(gen.status, 0) << gen.output;

  const Outcome one = train("--out " + (dir_ / "one").string());
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome two = train("--out " + (dir_ / "two").string(), 2);
  ASSERT_EQ(two.status, 0) << two.output;
  const Outcome again = train("--out " + (dir_ / "again").string(), 2);
  ASSERT_EQ(again.status, 0) << again.output;

  const auto loss_one = run_losses(dir_ / "one"), loss_two = run_losses(dir_ / "two");
  ASSERT_EQ(loss_one.size(), 20u);
  EXPECT_LT(max_rel_diff(loss_one, loss_two), 1e-6);
  const fs::path step20 = fs::path("checkpoints") / "step_000020";
  EXPECT_LT(max_param_diff(dir_ / "one" / step20, dir_ / "two" / step20), 1e-6);
  // Two 2-rank runs: the same losses and the same checkpoint bytes (state.json's SHA-256 per file).
  EXPECT_EQ(run_losses(dir_ / "again"), loss_two);
  const auto files = [&](const fs::path& run) {
    return nlohmann::json::parse(read_text(run / step20 / "state.json"))["files"];
  };
  EXPECT_EQ(files(dir_ / "again"), files(dir_ / "two"));

  // Rank 0 alone writes: one training record per step, one line per "step N/20" on stderr.
  EXPECT_EQ(run_losses(dir_ / "two").size(), 20u);
  std::size_t printed = 0;
  for (std::size_t at = two.output.find("step 20/20"); at != std::string::npos; at = two.output.find("step 20/20", at + 1)) {
    ++printed;
  }
  EXPECT_EQ(printed, 1u) << two.output;

  // Resume with another world size: 2 ranks → 1 process, and 1 process → 2 ranks.
  const Outcome down = train("--resume " + (dir_ / "two").string() + " --checkpoint 10");
  ASSERT_EQ(down.status, 0) << down.output;
  EXPECT_LT(max_rel_diff(run_losses(dir_ / "two"), loss_two), 1e-6);
  const Outcome up = train("--resume " + (dir_ / "one").string() + " --checkpoint 10", 2);
  ASSERT_EQ(up.status, 0) << up.output;
  EXPECT_LT(max_rel_diff(run_losses(dir_ / "one"), loss_one), 1e-6);

  // 2 micro-batches per step do not divide among 3 ranks.
  const Outcome three = train("--out " + (dir_ / "three").string(), 3);
  EXPECT_NE(three.status, 0);
  EXPECT_NE(three.output.find("micro-batches per step do not divide among 3 ranks"), std::string::npos)
      << three.output;
}

// ZeRO-1: each rank keeps half of the AdamW moments; the run equals ZeRO-0's
// (the gradient norm sums over shards in another order) and resumes in one process.
TEST_F(DataParallel, ZeroOneShardsTheMomentsAndEqualsZeroZero) {
  const Outcome gen0 = generate(kDataParallel);
  ASSERT_EQ(gen0.status, 0) << gen0.output;
  ASSERT_EQ(train("--out " + (dir_ / "zero0").string(), 2).status, 0);
  fs::rename(tree(), dir_ / "tree0");
  const Outcome gen1 = generate(std::string(kDataParallel) + "\n[distributed]\nzero_stage = 1\n");
  ASSERT_EQ(gen1.status, 0) << gen1.output;
  const Outcome z1 = train("--out " + (dir_ / "zero1").string(), 2);
  ASSERT_EQ(z1.status, 0) << z1.output;
  const auto loss0 = run_losses(dir_ / "zero0"), loss1 = run_losses(dir_ / "zero1");
  ASSERT_EQ(loss1.size(), 20u);
  EXPECT_LT(max_rel_diff(loss0, loss1), 1e-6);
  const fs::path step20 = fs::path("checkpoints") / "step_000020";
  EXPECT_LT(max_param_diff(dir_ / "zero0" / step20, dir_ / "zero1" / step20), 1e-6);
  const auto optimizer_bytes = [&](const fs::path& run) {
    return read_jsonl(run / "metrics.jsonl").back()["optimizer_bytes"].get<double>();
  };
  EXPECT_NEAR(optimizer_bytes(dir_ / "zero1") / optimizer_bytes(dir_ / "zero0"), 0.5, 0.01);
  // Planned vs allocated, per rank: the planner counts the flat array with its 128-element
  // alignment gaps, so rank 0's moments are exactly the plan (not 1-2% above it).
  for (const char* run : {"zero0", "zero1"}) {
    const auto summary = read_jsonl(dir_ / run / "metrics.jsonl").back();
    EXPECT_EQ(summary["optimizer_bytes"], summary["planned_optimizer_bytes"]) << run;
  }
  // The consolidated checkpoint resumes in one process with the same losses.
  const Outcome resumed = train("--resume " + (dir_ / "zero1").string() + " --checkpoint 10");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_LT(max_rel_diff(run_losses(dir_ / "zero1"), loss1), 1e-6);
}

// MoE with the aux_free bias: the loads are summed over ranks before the bias
// moves, so 2 ranks route, balance and train like one process.
TEST_F(DataParallel, MoeWithTheSelectionBiasTrainsLikeOneProcess) {
  std::string spec = kDataParallel;
  spec.replace(spec.find("[model]\n"), 8, "[model]\narch = \"moe\"\n");
  spec.replace(spec.find("[optim]"), 7,
               "[moe]\nn_experts = 8\ntop_k = 2\nexpert_d_ff = 16\nload_balance = \"aux_free\"\n\n"
               "[metrics.moe_routing]\ninterval = 5\n\n[optim]");
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  ASSERT_EQ(train("--out " + (dir_ / "one").string()).status, 0);
  const Outcome two = train("--out " + (dir_ / "two").string(), 2);
  ASSERT_EQ(two.status, 0) << two.output;
  EXPECT_LT(max_rel_diff(run_losses(dir_ / "one"), run_losses(dir_ / "two")), 1e-6);
  const auto last_routing = [&](const fs::path& run) {
    nlohmann::json last;
    for (const auto& r : read_jsonl(run / "metrics.jsonl")) {
      if (r.value("metric", "") == "moe_routing") last = r;
    }
    return last;
  };
  EXPECT_EQ(last_routing(dir_ / "one")["load"], last_routing(dir_ / "two")["load"]);
  const auto bias = [&](const fs::path& run) {
    return nlohmann::json::parse(read_text(run / "checkpoints" / "step_000020" / "state.json"))["extra"]["moe_bias"];
  };
  EXPECT_EQ(bias(dir_ / "one"), bias(dir_ / "two"));
}

// A rank that dies stops the job: mpirun ends every rank with a message naming
// the dead one, and the run keeps only complete checkpoints (written
// atomically by rank 0), the newest of which resumes.
TEST_F(DataParallel, ARankThatDiesStopsEveryRankAndKeepsTheLastGoodCheckpoint) {
  std::string spec = kDataParallel;
  spec.replace(spec.find("steps = 20"), 10, "steps = 100000");
  spec.replace(spec.find("checkpoint_every = 10"), 21, "checkpoint_every = 25");
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const fs::path run = dir_ / "run";
  expect_a_killed_rank_stops_the_job(run, 3);
  const long long newest = newest_complete_checkpoint(run);
  ASSERT_GT(newest, 0) << "no checkpoint was written in 3 seconds";
  const Outcome resumed = train("--resume " + run.string() + " --steps " + std::to_string(newest + 1));
  EXPECT_EQ(resumed.status, 0) << resumed.output;
}

// A rank that stops making progress while alive (SIGSTOP) leaves the other blocked in a
// collective: its watchdog (--watchdog-s) names its rank, step and phase and ends it with
// status 3, and mpirun stops the job, instead of both waiting until the job's wall time.
TEST_F(DataParallel, AStuckRankIsStoppedByTheWatchdogNamingItsStepAndPhase) {
  std::string spec = kDataParallel;
  spec.replace(spec.find("steps = 20"), 10, "steps = 100000");
  spec.replace(spec.find("checkpoint_every = 10"), 21, "checkpoint_every = 25");
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  // The fixture builds train only (gcompile --programs train).
  EXPECT_TRUE(fs::exists(tree() / "train"));
  EXPECT_FALSE(fs::exists(tree() / "analyze"));
  const auto start = std::chrono::steady_clock::now();
  const Outcome stuck =
      train_with_rank_1_signalled("STOP", 3, "--watchdog-s 4 --no-checkpoint --out " + (dir_ / "run").string());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(hung(stuck)) << "the job hung instead of stopping\n" << stuck.output;
  EXPECT_EQ(stuck.status, 3) << stuck.output;
  EXPECT_LT(seconds, 60.0) << stuck.output;
  EXPECT_NE(stuck.output.find("train: watchdog: rank 0 of 2"), std::string::npos) << stuck.output;
  EXPECT_NE(stuck.output.find("(the limit is --watchdog-s 4;"), std::string::npos) << stuck.output;
  EXPECT_NE(stuck.output.find(", step "), std::string::npos) << stuck.output;
}

// A non-finite loss is the same reduced number on every rank: all stop at the
// same step, rank 0 says why once, and the job ends instead of hanging.
TEST_F(DataParallel, ANonFiniteLossStopsEveryRankAtTheSameStep) {
  std::string spec = kDataParallel;
  spec.replace(spec.find("lr = 3e-3"), 9, "lr = 1e30");  // the second step overflows
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome run = train("--out " + (dir_ / "run").string(), 2, 120);
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_FALSE(hung(run)) << "the job hung";
  const std::string message = "the loss or gradient norm is not finite";
  const std::size_t first = run.output.find(message);
  ASSERT_NE(first, std::string::npos) << run.output;
  EXPECT_EQ(run.output.find(message, first + 1), std::string::npos) << "only rank 0 reports it";
  int events = 0;
  for (const auto& r : read_jsonl(dir_ / "run" / "metrics.jsonl")) events += r.value("event", "") == "nonfinite";
  EXPECT_EQ(events, 1);
}

// The reader side: each rank's micro-batches are disjoint, and all ranks
// together cover every micro-batch of a step exactly once.
TEST(DataParallelSlices, RanksShareEachStepsMicroBatchesExactlyOnce) {
  for (int world : {1, 2, 3, 4, 8}) {
    for (int micro_batches : {world, 2 * world, 5 * world}) {
      std::vector<int> owners(std::size_t(micro_batches), 0);
      for (int rank = 0; rank < world; ++rank) {
        int mine = 0;
        for (int m = 0; m < micro_batches; ++m) {
          if (gc::rt::rank_owns_micro_batch(m, rank, world)) {
            ++owners[std::size_t(m)];
            ++mine;
          }
        }
        EXPECT_EQ(mine, micro_batches / world) << world << " " << rank;
      }
      for (int count : owners) EXPECT_EQ(count, 1);
    }
  }
}

}  // namespace
