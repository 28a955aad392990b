// The training watchdog (runtime/watchdog.hpp): progress keeps it quiet, silence past the
// timeout or a communicator's asynchronous error ends the process with status 3 after the abort
// hooks ran, and a destroyed watchdog never fires. Each firing case runs in a death test's child.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "runtime/watchdog.hpp"

namespace {

using gc::rt::Watchdog;
using namespace std::chrono_literals;

const Watchdog::Where kRank1{1, 4, "node7"};

TEST(Watchdog, DescribesRankHostStepAndPhase) {
  const std::string text = Watchdog::describe(kRank1, 12, "reduce_grads", "no progress for 9 s");
  EXPECT_EQ(text, "train: watchdog: rank 1 of 4 (host node7), step 12, in reduce_grads: no progress for 9 s; aborting "
                  "the communicators and stopping this rank (exit status 3)");
}

TEST(Watchdog, BeatsKeepItQuietAndDestructionStopsIt) {
  {
    Watchdog dog(0.3, kRank1, 0.02);
    for (int i = 0; i < 20; ++i) {  // 1 s of beats, 50 ms apart
      dog.beat(i, "forward_backward");
      std::this_thread::sleep_for(50ms);
    }
  }
  std::this_thread::sleep_for(500ms);  // past the timeout with no watchdog left: still alive
  SUCCEED();
}

TEST(WatchdogDeathTest, SilencePastTheTimeoutEndsTheProcessAfterTheAbortHooks) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog dog(0.2, kRank1, 0.02);
        dog.add_abort_hook([] { std::fprintf(stderr, "abort hook ran\n"); });
        dog.beat(7, "reduce_grads");
        std::this_thread::sleep_for(5s);
        std::exit(0);  // not reached: the watchdog ends the process first
      },
      ::testing::ExitedWithCode(Watchdog::kExitStatus),
      "rank 1 of 4 \\(host node7\\), step 7, in reduce_grads: no progress for [0-9.]+ s[^\n]*--watchdog-s 0.2[^\n]*\n"
      "abort hook ran");
}

TEST(WatchdogDeathTest, ACommunicatorErrorEndsTheProcessAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        Watchdog dog(3600.0, kRank1, 0.02);
        dog.add_poll([] { return std::string(); });
        dog.add_poll([] { return std::string("remote process exited"); });
        dog.beat(3, "read_step");
        std::this_thread::sleep_for(5s);
        std::exit(0);
      },
      ::testing::ExitedWithCode(Watchdog::kExitStatus),
      "step 3, in read_step: a communicator reported an asynchronous error: remote process exited");
}

}  // namespace
