// The fixture of the CPU multi-process tests (data and expert parallelism): a generated tree's
// train run by one process or by N ranks under `mpirun --oversubscribe`, one OpenMP thread each
// (CI has two cores); a job that hangs (a rank left in a collective) is ended by timeout: SIGTERM
// (status 124), and SIGKILL 10 s later if mpirun outlives it (status 137, which mpirun also
// returns for a rank killed by a signal: the tests that kill a rank time the job instead).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>

#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace gc::test {

class MpiTreeTest : public TreeTest {
 protected:
  void SetUp() override {
    TreeTest::SetUp();
    programs_ = "train";  // these tests run only train: its tree builds nothing else (CI time)
    if (sh("command -v mpirun").status != 0) {
      if (in_ci()) FAIL() << "mpirun is missing (scripts/setup installs openmpi-bin)";
      GTEST_SKIP() << "no mpirun (apt install openmpi-bin libopenmpi-dev)";
    }
  }
  // A job that timeout's SIGTERM ended (see above for its SIGKILL).
  static bool hung(const Outcome& o) { return o.status == 124; }
  // One process (ranks 0), or `ranks` under mpirun, stopped after `seconds`.
  Outcome train(const std::string& args, int ranks = 0, int seconds = 600) {
    const std::string program = (tree() / "train").string() + " " + args;
    const std::string limit = "timeout -k 10 " + std::to_string(seconds) + " ";
    if (ranks == 0) return sh("OMP_NUM_THREADS=1 " + limit + program);
    return sh("OMP_NUM_THREADS=1 " + limit + "mpirun --allow-run-as-root --oversubscribe -np " +
              std::to_string(ranks) + " " + program);
  }
  // Two ranks of `train ARGS`, rank 1 sent `signal` (KILL, STOP) after `seconds`; the job is ended
  // after 120 s (hung()) if it hangs.
  Outcome train_with_rank_1_signalled(const std::string& signal, int seconds, const std::string& args) {
    const std::string rank_program = "if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then (sleep " + std::to_string(seconds) +
                                     "; kill -" + signal + " $$) & fi; exec " + (tree() / "train").string() + " " + args;
    return sh("OMP_NUM_THREADS=1 timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np 2 sh -c " +
              shell_quote(rank_program));
  }
  // Two ranks of `train --out run`, rank 1 killed (SIGKILL) after `seconds`: the job must stop
  // (not hang until the timeout) and name the dead rank.
  void expect_a_killed_rank_stops_the_job(const std::filesystem::path& run, int seconds) {
    const auto start = std::chrono::steady_clock::now();
    const Outcome killed = train_with_rank_1_signalled("KILL", seconds, "--out " + run.string());
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(killed.status, 0) << killed.output;
    EXPECT_FALSE(hung(killed)) << "the job hung instead of stopping";
    EXPECT_LT(took, 100.0) << "the job hung until the timeout killed it\n" << killed.output;
    EXPECT_NE(killed.output.find("rank 1"), std::string::npos) << killed.output;
  }
  // The newest step among run's checkpoints, each of which must have its state.json (nothing
  // half-written under a step name); `check` may look at each further.
  static long long newest_complete_checkpoint(const std::filesystem::path& run,
                                              const std::function<void(const std::filesystem::path&)>& check = {}) {
    long long newest = 0;
    for (const auto& entry : std::filesystem::directory_iterator(run / "checkpoints")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_", 0) != 0) continue;
      const bool complete = std::filesystem::exists(entry.path() / "state.json");
      EXPECT_TRUE(complete) << entry.path();
      if (complete && check) check(entry.path());
      newest = std::max(newest, std::stoll(name.substr(5)));
    }
    return newest;
  }
};

}  // namespace gc::test
