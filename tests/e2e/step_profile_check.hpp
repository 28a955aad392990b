// What a run of `train --profile N` must leave (templates/train/trainer_profile.hpp): a
// RUN/profile.json whose ops and idle time cover the step, every op of the model's step counted
// as often as the model runs it, GEMMs and attention with TFLOP/s, the printed table, and no
// allocation in the profiled steps. Shared by the CPU (e2e_test.cpp) and emulated-GPU
// (gpu_data_parallel_emulated_test.cpp) end-to-end tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tree_test_util.hpp"

namespace gc::test {

struct ProfileExpectation {
  std::string backend;     // "cpu" or "cuda"
  int steps = 0;           // N of --profile N
  int layers = 0;          // n_layers
  int micro_batches = 0;   // per step and rank
  bool moe = false;
};

inline void expect_step_profile(const std::filesystem::path& run, const std::string& output,
                                const ProfileExpectation& want) {
  const nlohmann::json p = nlohmann::json::parse(read_text(run / "profile.json"), nullptr, false);
  ASSERT_FALSE(p.is_discarded()) << "profile.json missing or not JSON in " << run << "\n" << output;
  EXPECT_EQ(p["schema"], "gcompile-profile-1");
  EXPECT_EQ(p["backend"], want.backend);
  EXPECT_EQ(p["profiled_steps"], want.steps);
  EXPECT_EQ(p["warmup_steps"], 2);
  EXPECT_FALSE(p["overflowed"].get<bool>());
  const double step_ms = p["step_ms"].get<double>(), ops_ms = p["ops_ms"].get<double>();
  EXPECT_GT(step_ms, 0.0);
  EXPECT_LE(ops_ms, step_ms * (1 + 1e-9)) << "the ops' time exceeds the step's: a region timed twice";
  // Most of a step is its ops. The host's own work between them (the batch, the bookkeeping) is
  // idle time, and on a loaded 2-core CI machine a few-millisecond CPU step was measured 46 %
  // covered (other test processes preempt it between ops): a third is the bar, which an untimed
  // forward or backward pass (most of a step) would still fall below.
  EXPECT_GT(ops_ms, step_ms / 3.0) << "most of the step is not covered by any op";
  double covered = 0.0;
  for (const auto& [name, c] : p["categories"].items()) covered += c["ms_per_step"].get<double>();
  EXPECT_NEAR(covered, step_ms, 1e-6 * step_ms) << "categories plus idle must make up the step";
  std::set<std::string> categories;
  for (const auto& [name, c] : p["categories"].items()) categories.insert(name);
  for (const char* c : {"attention", "gemm.qkv", "gemm.attn_out", "lm_head_ce", "norm", "optimizer", "idle"}) {
    EXPECT_TRUE(categories.count(c)) << "no " << c << " in " << p["categories"].dump();
  }
  const std::vector<std::string> mlp = want.moe ? std::vector<std::string>{"gemm.experts", "gemm.router", "moe_routing"}
                                                : std::vector<std::string>{"gemm.mlp_in", "gemm.mlp_down", "swiglu"};
  for (const std::string& c : mlp) {
    EXPECT_TRUE(categories.count(c)) << "no " << c << " in " << p["categories"].dump();
  }
  // The attention runs once per layer and micro-batch each way; every GEMM has a FLOP rate.
  const double per_step = double(want.layers) * want.micro_batches;
  int attention_rows = 0;
  for (const auto& op : p["ops"]) {
    const std::string category = op["category"], name = op["op"];
    if (category == "attention") {
      ++attention_rows;
      EXPECT_DOUBLE_EQ(op["calls_per_step"].get<double>(), per_step) << op.dump();
    }
    if (name == "linear_forward" || name == "linear_backward" || category == "attention") {
      EXPECT_TRUE(op["tflops"].is_number() && op["tflops"].get<double>() > 0) << op.dump();
    }
  }
  EXPECT_EQ(attention_rows, 2) << p["ops"].dump();
  for (const char* text : {"step profile:", "by category", "idle", "written: "}) {
    EXPECT_NE(output.find(text), std::string::npos) << "the printed table lacks '" << text << "':\n" << output;
  }
  const std::vector<nlohmann::json> records = read_jsonl(run / "metrics.jsonl");
  ASSERT_FALSE(records.empty()) << "no metrics.jsonl in " << run;
  const nlohmann::json& summary = records.back();
  // The CPU backend allocates nothing on the host in a step; on a GPU nothing on the device (the
  // CUDA emulator's launches allocate host memory of their own, so host counts mean nothing there).
  if (want.backend == "cpu") {
    EXPECT_EQ(summary.value("host_allocations_in_steps", -1), 0) << summary.dump();
  }
  if (want.backend == "cuda") {
    EXPECT_EQ(summary.value("allocations_in_loop", -1), 0) << summary.dump();
  }
  EXPECT_FALSE(std::filesystem::exists(run / "checkpoints")) << "a profile run saves no checkpoint";
}

}  // namespace gc::test
