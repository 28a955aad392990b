// End to end for mixture-of-experts trees: gradients against finite
// differences with every MoE feature, deterministic training whatever the
// thread count, bit-identical resume including the aux_free selection bias,
// the routing records, the planned memory, and the CPU-only backend.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

using gc::test::Outcome;
using gc::test::read_jsonl;
using gc::test::sh;

class MoeTree : public gc::test::TreeTest {
 protected:
  Outcome train(const std::string& args, const std::string& env = "") {
    return sh((env.empty() ? "" : env + " ") + (tree() / "train").string() + " " + args);
  }
};

// Sigmoid scoring, renormalized weights, shared experts, the balancing loss,
// a dense layer between MoE layers (layer_interval 2), sandwich norms.
const std::string kMoeGradients = gc::test::fixture_spec("moe_gradients.toml");

TEST_F(MoeTree, GradientsMatchFiniteDifferencesWithEveryMoeFeature) {
  programs_ = "gradcheck";  // the one program this test runs: the tree builds nothing else (CI time)
  const Outcome gen = generate(kMoeGradients);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome check = sh((tree() / "gradcheck").string());
  EXPECT_EQ(check.status, 0) << check.output;
  // Layers 1 and 3 are MoE, 0 and 2 dense.
  for (const char* name : {"layers.1.mlp.router.weight", "layers.3.mlp.experts.down_proj.weight",
                           "layers.1.mlp.shared_experts.up_proj.weight", "layers.2.mlp.gate_proj.weight"}) {
    EXPECT_NE(check.output.find(name), std::string::npos) << name << "\n" << check.output;
  }
  EXPECT_EQ(check.output.find("layers.2.mlp.router"), std::string::npos);
  EXPECT_NE(check.output.find(": ok"), std::string::npos) << check.output;
}

// Softmax routing with the auxiliary-loss-free bias, on text-free synthetic data.
const std::string kMoeAuxFree = gc::test::fixture_spec("moe_aux_free.toml");

using gc::test::read_text;

std::vector<double> losses(const std::vector<nlohmann::json>& records) { return gc::test::training_losses(records); }

TEST_F(MoeTree, TrainsDeterministicallyAndResumesWithTheSelectionBias) {
  programs_ = "train,analyze";  // the programs this test runs (CI time)
  const Outcome gen = generate(kMoeAuxFree);
  ASSERT_EQ(gen.status, 0) << gen.output;

  const Outcome cuda = train("--device cuda --out " + (dir_ / "cuda").string());  // a --cpu-only tree
  EXPECT_EQ(cuda.status, 1);
  EXPECT_NE(cuda.output.find("this tree was built without the CUDA backend"), std::string::npos) << cuda.output;

  const Outcome one = train("--out " + (dir_ / "one").string(), "OMP_NUM_THREADS=1");
  ASSERT_EQ(one.status, 0) << one.output;
  const Outcome two = train("--out " + (dir_ / "two").string(), "OMP_NUM_THREADS=2");
  ASSERT_EQ(two.status, 0) << two.output;
  const auto log1 = read_jsonl(dir_ / "one" / "metrics.jsonl");
  const auto log2 = read_jsonl(dir_ / "two" / "metrics.jsonl");
  const auto loss1 = losses(log1);
  ASSERT_EQ(loss1.size(), 40u);
  EXPECT_EQ(loss1, losses(log2)) << "the thread count changed the training";
  EXPECT_LT(loss1.back(), loss1.front());

  // Routing records: the load of every step's 2·32·4·2 = 512 assignments, and the bias in checkpoints.
  int routing = 0;
  for (const auto& r : log1) {
    if (r.value("metric", "") != "moe_routing") continue;
    ++routing;
    std::int64_t total = 0;
    for (const auto& c : r["load"]["0"]) total += c.get<std::int64_t>();
    EXPECT_EQ(total % 512, 0) << r.dump();
    EXPECT_GE(r["imbalance"]["0"].get<double>(), 1.0);
    EXPECT_GT(r["router_entropy"]["1"].get<double>(), 0.0);
    EXPECT_EQ(r["aux_loss"], 0.0);  // aux_free adds no loss
  }
  EXPECT_EQ(routing, 40);
  // Matrix metrics of stacked expert tensors: the mean over experts, and experts 0 and 1 by name.
  bool seen_rank = false, seen_cosine = false;
  for (const auto& r : log1) {
    if (r.value("metric", "") == "stable_rank" && r["step"] == 20) {
      seen_rank = true;
      const auto& v = r["values"];
      for (const char* key : {"model.layers.0.mlp.experts.up_proj.weight", "model.layers.0.mlp.experts.0.up_proj.weight",
                              "model.layers.1.mlp.experts.1.up_proj.weight", "model.layers.1.mlp.router.weight"}) {
        EXPECT_TRUE(v.contains(key) && v[key].get<double>() >= 1.0) << key << " " << r.dump();
      }
      EXPECT_FALSE(v.contains("model.layers.0.mlp.experts.2.up_proj.weight"));
    }
    if (r.value("metric", "") == "cosine_similarity" && r["step"] == 20) {
      seen_cosine = true;
      EXPECT_TRUE(r["values"].contains("model.layers.1.mlp.experts.down_proj.weight")) << r.dump();
    }
  }
  EXPECT_TRUE(seen_rank && seen_cosine);
  const auto state = nlohmann::json::parse(read_text(dir_ / "one" / "checkpoints" / "step_000040" / "state.json"));
  ASSERT_TRUE(state["extra"].contains("moe_bias")) << state.dump();
  double moved = 0.0;
  for (const auto& b : state["extra"]["moe_bias"]["1"]) moved += std::abs(b.get<double>());
  EXPECT_GT(moved, 0.0) << "the selection bias never moved";

  // analyze recomputes the validation loss (cross-entropy, without the balancing loss) of the last checkpoint.
  double val40 = -1.0;
  for (const auto& r : log1) {
    if (r.contains("val_loss") && r["step"] == 40) val40 = r["val_loss"].get<double>();
  }
  const Outcome analyzed = sh((tree() / "analyze").string() + " metrics " + (dir_ / "one").string());
  ASSERT_EQ(analyzed.status, 0) << analyzed.output;
  const auto first = nlohmann::json::parse(analyzed.output.substr(0, analyzed.output.find('\n')));
  EXPECT_NEAR(first["val_loss"].get<double>(), val40, 1e-9 * std::abs(val40)) << analyzed.output.substr(0, 300);
  EXPECT_NE(analyzed.output.find("\"data\":\"validation\",\"imbalance\""), std::string::npos) << analyzed.output;

  // Resume from step 20: the same losses and biases as the uninterrupted run.
  const Outcome resumed = train("--resume " + (dir_ / "one").string() + " --checkpoint step_20");
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_EQ(losses(read_jsonl(dir_ / "one" / "metrics.jsonl")), loss1);
  const auto again = nlohmann::json::parse(read_text(dir_ / "one" / "checkpoints" / "step_000040" / "state.json"));
  EXPECT_EQ(again["extra"]["moe_bias"], state["extra"]["moe_bias"]);

  // The planner's buffer estimate is what the model allocates; no allocation inside steps.
  const Outcome quiet = train("--no-metrics --no-checkpoint --steps 5 --out " + (dir_ / "quiet").string());
  ASSERT_EQ(quiet.status, 0) << quiet.output;
  const auto summary = read_jsonl(dir_ / "quiet" / "metrics.jsonl").back();
  ASSERT_EQ(summary["event"], "summary");
  EXPECT_EQ(summary["model_buffer_bytes"], summary["planned_model_buffer_bytes"]);
  EXPECT_EQ(summary["host_allocations_in_steps"], 0);
}

// A plan no machine holds (16M rows of 50k logits: terabytes of activations):
// train stops before allocating, with the planned and available bytes.
TEST_F(MoeTree, StopsBeforeAllocatingWhenThePlanExceedsTheMemory) {
  programs_ = "train";  // the one program this test runs (CI time)
  std::string spec = kMoeAuxFree;
  for (auto [from, to] : {std::pair<std::string, std::string>{"vocab_size = 64", "vocab_size = 50000"},
                          {"seq_len = 32", "seq_len = 4096"},
                          {"global_batch = 8", "global_batch = 4096"},
                          {"micro_batch = 4", "micro_batch = 4096"},
                          {"d_ff = 64", "d_ff = 64\nmax_seq_len = 4096"}}) {
    spec.replace(spec.find(from), from.size(), to);
  }
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome run = train("--steps 1 --out " + (dir_ / "run").string());
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("the CPU backend needs"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("GiB available; train it on a GPU"), std::string::npos) << run.output;
  EXPECT_FALSE(fs::exists(dir_ / "run" / "metrics.jsonl"));
}

// The whole MoE model on the CUDA backend against the CPU backend: the tree's
// own ./parity program compiled by the host compiler against the CUDA
// emulator (tests/cuda_emulator; on a GPU, scripts/gpu_kit runs the real
// one). fp32 with a real top-k; bf16 with every expert selected, because bf16
// activations move near-tied router scores and then both backends are right
// to route a few tokens differently.
class MoeParity : public gc::test::TreeTest {
 protected:
  Outcome emulated_parity() {
#ifndef GCOMPILE_CUDA_EMULATOR_LIBRARY
    return {1, "built without the CUDA emulator (GCOMPILE_CUDA_EMULATED_TESTS=OFF)"};
#else
    const std::string emu = std::string(GCOMPILE_SOURCE_DIR) + "/tests/cuda_emulator";
    const std::string t = tree().string();
    // The emulator's library as the build made it; the tree at -O1, as tests/cuda_emulator/tree_parity.
    const std::string build = "cd " + t + " && g++ -std=c++17 -O1 -fopenmp -DGC_CUDA_EMULATOR -Wno-unknown-pragmas -I" +
                              emu + " -I. -Isrc -Iruntime/third_party -x c++ src/parity_main.cu -x none " +
                              "src/plan_init.cpp src/experiment.cpp " + GCOMPILE_CUDA_EMULATOR_LIBRARY + " " +
                              GCOMPILE_BLAS_LIBRARIES + " -o parity_emulated";
    const Outcome compiled = sh(build);
    if (compiled.status != 0) return compiled;
    return sh(t + "/parity_emulated");
#endif
  }
};

TEST_F(MoeParity, CudaBackendMatchesTheCpuUnderTheEmulatorInFp32) {
  const Outcome gen = generate(kMoeGradients, /*build=*/false);
  ASSERT_EQ(gen.status, 0) << gen.output;
  ASSERT_TRUE(fs::exists(tree() / "src" / "cuda" / "moe.cuh"));
  const Outcome parity = emulated_parity();
  EXPECT_EQ(parity.status, 0) << parity.output;
  EXPECT_NE(parity.output.find("\"precision\": \"fp32\""), std::string::npos) << parity.output;
  EXPECT_NE(parity.output.find("\"pass\": true"), std::string::npos) << parity.output;
}

// bf16: d_model 64 (in a narrower model the per-tensor error of bf16 rounding
// alone approaches the tolerance), pre-norm, every expert selected.
const std::string kMoeParityBf16 = gc::test::fixture_spec("moe_parity_bf16.toml");

TEST_F(MoeParity, CudaBackendMatchesTheCpuUnderTheEmulatorInBf16) {
  const Outcome gen = generate(kMoeParityBf16, /*build=*/false);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome parity = emulated_parity();
  EXPECT_EQ(parity.status, 0) << parity.output;
  EXPECT_NE(parity.output.find("\"precision\": \"bf16\""), std::string::npos) << parity.output;
}

// Seed 000's MoE ablation pair: the diff is the init (plan_init.cpp), ε and the
// gate (config.hpp, the model's gate branch, the gate tensors), nothing else.
TEST(MoeDiff, PaperAblationDiffShowsExactlyTheInitAndTheSettings) {
  const std::string dir = std::string(GCOMPILE_SOURCE_DIR) + "/specs/paper/seed000/";
  const Outcome diff = sh(std::string(GCOMPILE_BINARY) + " diff " + dir + "moe_1.5b_a250m_g05_standard.toml " + dir +
                          "moe_1.5b_a250m_g1_adjusted.toml");
  ASSERT_EQ(diff.status, 0) << diff.output;
  std::vector<std::string> files;
  std::istringstream lines(diff.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("diff -ruN", 0) == 0) files.push_back(line.substr(line.rfind(" b/") + 3));
  }
  EXPECT_EQ(files, (std::vector<std::string>{"CMakeLists.txt", "README.md", "spec.resolved.toml", "src/config.hpp",
                                             "src/cuda/gate.cuh", "src/cuda/rmsnorm.cuh", "src/experiment.cpp",
                                             "src/model/model_impl.hpp", "src/plan.hpp", "src/plan_init.cpp"}))
      << diff.output;
  EXPECT_NE(diff.output.find("+inline constexpr float kNormEps = 1e-12f;"), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("+  static constexpr float kEps = 1e-12f;"), std::string::npos) << "in the RMSNorm kernel";
  EXPECT_NE(diff.output.find("mlp.experts.down_proj.weight"), std::string::npos) << "expert σ rows change";
}

}  // namespace
