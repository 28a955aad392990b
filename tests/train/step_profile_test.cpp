// The step profile's recorder (templates/profile/step_profile.hpp) and its report
// (profile_report.hpp) against a scripted clock: which regions are timed, how nested and
// excess scopes are treated, the per-step totals, rates, categories and idle time.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "profile/profile_report.hpp"
#include "profile/step_profile.hpp"

namespace {

using gc::tree::profile::Category;
using gc::tree::profile::OpTag;
using gc::tree::profile::Pass;
using gc::tree::profile::Recorder;
using gc::tree::profile::Scope;

// A clock whose marks read a time the test advances by hand.
class ScriptedClock final : public gc::tree::profile::Clock {
 public:
  double now_ms = 0.0;
  int reserved = 0, marks_taken = 0;
  void reserve(int marks) override {
    reserved = marks;
    at_.assign(std::size_t(marks), -1.0);
  }
  void mark(int i) override {
    ASSERT_LT(i, reserved) << "a mark beyond the reserved pool";
    at_[std::size_t(i)] = now_ms;
    ++marks_taken;
  }
  void read_ms(int n, double* ms) override {
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(at_[std::size_t(i)], 0.0) << "mark " << i << " was never taken";
      ms[i] = at_[std::size_t(i)] - at_[0];
    }
  }
  const char* describe() const override { return "scripted"; }

 private:
  std::vector<double> at_;
};

// One "step": a GEMM of 2 ms, a norm of 0.5 ms, 0.25 ms of nothing, a nested region inside the
// norm (not timed on its own).
void run_step(Recorder& r, ScriptedClock& clock) {
  gc::tree::profile::timed(&r, gc::tree::profile::gemm(Category::gemm_qkv, Pass::forward, 1000, 64, 192),
                           [&] { clock.now_ms += 2.0; });
  clock.now_ms += 0.25;  // idle
  gc::tree::profile::timed(&r, gc::tree::profile::memory(Category::norm, "rmsnorm_forward", Pass::forward, 1e6), [&] {
    clock.now_ms += 0.2;
    gc::tree::profile::timed(&r, gc::tree::profile::memory(Category::other, "inner", Pass::forward, 1.0),
                             [&] { clock.now_ms += 0.1; });
    clock.now_ms += 0.2;
  });
}

TEST(StepProfile, TimesEachOpOfAStepAndCallsTheRestIdle) {
  ScriptedClock clock;
  Recorder r(clock);
  run_step(r, clock);  // not profiling: nothing recorded, no marks
  EXPECT_EQ(clock.marks_taken, 0);
  r.begin_counting();
  run_step(r, clock);
  r.end_counting();
  EXPECT_EQ(clock.reserved, 2 * 2 * 2 + 2);  // two outer scopes a step, twice as many allowed, two marks each
  EXPECT_EQ(clock.marks_taken, 0);
  for (int s = 0; s < 3; ++s) {
    r.begin_step();
    run_step(r, clock);
    r.end_step();
  }
  EXPECT_EQ(r.steps(), 3);
  EXPECT_NEAR(r.step_ms(), 2.75, 1e-12);
  EXPECT_FALSE(r.overflowed());
  const auto rows = gc::tree::profile::op_rows(r);
  ASSERT_EQ(rows.size(), 2u);  // the nested region is not a row of its own
  EXPECT_EQ(rows[0].op->tag.category, Category::gemm_qkv);
  EXPECT_DOUBLE_EQ(rows[0].calls, 1.0);
  EXPECT_NEAR(rows[0].ms, 2.0, 1e-12);
  EXPECT_NEAR(rows[0].tflops, 2.0 * 1000 * 64 * 192 / 2e-3 / 1e12, 1e-9);
  EXPECT_EQ(rows[1].op->tag.category, Category::norm);
  EXPECT_NEAR(rows[1].ms, 0.5, 1e-12);
  EXPECT_NEAR(rows[1].gbps, 1e6 / 0.5e-3 / 1e9, 1e-9);

  gc::tree::profile::ReportInfo info;
  info.backend = "cpu";
  info.device = "test";
  info.tokens_per_step = 1000;
  const nlohmann::json j = gc::tree::profile::profile_json(r, info);
  EXPECT_EQ(j["schema"], "gcompile-profile-1");
  EXPECT_EQ(j["profiled_steps"], 3);
  EXPECT_NEAR(j["idle_ms"].get<double>(), 0.25, 1e-12);
  EXPECT_DOUBLE_EQ(j["ops_per_step"].get<double>(), 2.0);
  double total = 0.0;
  for (const auto& [name, c] : j["categories"].items()) total += c["ms_per_step"].get<double>();
  EXPECT_NEAR(total, j["step_ms"].get<double>(), 1e-12);  // categories and idle cover the step
  EXPECT_NEAR(j["categories"]["gemm.qkv"]["share"].get<double>(), 2.0 / 2.75, 1e-12);
  EXPECT_TRUE(j["ops"][1]["tflops"].is_null());  // a memory-bound op has a GB/s rate only

  const std::string table = gc::tree::profile::profile_table(r, info);
  EXPECT_NE(table.find("gemm.qkv"), std::string::npos) << table;
  EXPECT_NE(table.find("idle"), std::string::npos) << table;
  EXPECT_NE(table.find("TFLOP/s"), std::string::npos) << table;
  info.ceiling_tflops = 2 * 1000 * 64 * 192 / 2e-3 / 1e12 * 2;  // the GEMM ran at half of it
  EXPECT_NE(gc::tree::profile::profile_table(r, info).find("(50%)"), std::string::npos);
}

TEST(StepProfile, AStepWithMoreOpsThanCountedIsFlaggedNotOverrun) {
  ScriptedClock clock;
  Recorder r(clock);
  r.begin_counting();
  gc::tree::profile::timed(&r, {Category::other, "a", Pass::forward}, [] {});
  r.end_counting(/*slack=*/1);
  r.begin_step();
  for (int i = 0; i < 3; ++i)
    gc::tree::profile::timed(&r, {Category::other, "a", Pass::forward}, [&] { clock.now_ms += 1; });
  r.end_step();
  EXPECT_TRUE(r.overflowed());
  ASSERT_EQ(gc::tree::profile::op_rows(r).size(), 1u);
  EXPECT_DOUBLE_EQ(gc::tree::profile::op_rows(r)[0].calls, 1.0);  // the one that fitted
  EXPECT_NE(gc::tree::profile::profile_table(r, {}).find("not timed"), std::string::npos);
}

TEST(StepProfile, OneRowPerCategoryOpAndPassWhateverTheSizes) {
  ScriptedClock clock;
  Recorder r(clock);
  r.begin_counting();
  r.end_counting();
  r.begin_step();
  // The LM head in chunks of different rows: one row, FLOPs summed.
  gc::tree::profile::timed(&r, gc::tree::profile::gemm(Category::lm_head_ce, Pass::backward, 512, 8, 100),
                           [&] { clock.now_ms += 1; });
  gc::tree::profile::timed(&r, gc::tree::profile::gemm(Category::lm_head_ce, Pass::backward, 100, 8, 100),
                           [&] { clock.now_ms += 1; });
  r.end_step();
  const auto rows = gc::tree::profile::op_rows(r);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].calls, 2.0);
  EXPECT_NEAR(rows[0].tflops, 4.0 * (512 + 100) * 8 * 100 / 2e-3 / 1e12, 1e-12);  // backward: 4·rows·in·out
}

}  // namespace
