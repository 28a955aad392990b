// The papers' analyses end to end: a spec's [metrics] section -> records in
// metrics.jsonl and heatmaps from ./train; ./analyze metrics / tokens /
// compare on the checkpoints, with its errors. One tree, built once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;
using gc::test::Outcome;
using gc::test::read_jsonl;
using gc::test::sh;
using nlohmann::json;

const std::string kMetricsSpec = gc::test::fixture_spec("metrics.toml");


// metric name -> step -> record
std::map<std::string, std::map<std::int64_t, json>> by_metric(const std::vector<json>& records) {
  std::map<std::string, std::map<std::int64_t, json>> out;
  for (const auto& r : records) {
    if (r.contains("metric")) {
      auto& slot = out[r["metric"].get<std::string>()];
      const std::int64_t step = r["step"];
      if (r["metric"] == "cosine_image") {
        slot[step * 1000 + std::int64_t(slot.size())] = r;  // several images per step
      } else {
        slot[step] = r;
      }
    }
  }
  return out;
}

std::set<std::int64_t> steps_of(const std::map<std::int64_t, json>& m) {
  std::set<std::int64_t> s;
  for (const auto& [step, r] : m) s.insert(step);
  return s;
}

std::set<std::string> keys_of(const json& values) {
  std::set<std::string> s;
  for (const auto& [k, v] : values.items()) s.insert(k);
  return s;
}

class Metrics : public gc::test::TreeTest {
 protected:
  Outcome run(const std::string& program, const std::string& args) {
    return sh("cd " + dir_.string() + " && " + (tree() / program).string() + " " + args);
  }
};

TEST_F(Metrics, TrainRecordsTheScheduledMetricsAndAnalyzeReproducesAndComparesThem) {
  programs_ = "train,analyze";  // the programs this test runs (CI time)
  const Outcome gen = generate(kMetricsSpec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  ASSERT_EQ(run("train", "--out run").status, 0);
  const auto records = by_metric(read_jsonl(dir_ / "run" / "metrics.jsonl"));

  // Schedules: each metric at step 0 and at multiples of its interval.
  EXPECT_EQ(steps_of(records.at("sink_score")), (std::set<std::int64_t>{0, 5, 10, 15, 20}));
  EXPECT_EQ(steps_of(records.at("stable_rank")), (std::set<std::int64_t>{0, 10, 20}));
  EXPECT_EQ(steps_of(records.at("grad_norm")), (std::set<std::int64_t>{1, 4, 8, 12, 16, 20}));
  EXPECT_EQ(steps_of(records.at("initial_loss")), (std::set<std::int64_t>{0}));
  EXPECT_EQ(records.count("logit_std"), 0u);
  // A disabled metric's code is pruned from the generated trainer (its metrics schedule).
  const std::string trainer = sh("cat " + (tree() / "src/train/metrics_schedule.hpp").string()).output;
  EXPECT_EQ(trainer.find("kLogitStdEvery"), std::string::npos);
  EXPECT_NE(trainer.find("kSinkScoreEvery"), std::string::npos);

  // Selections: layers and classes from the spec.
  const json& sink = records.at("sink_score").at(0);
  EXPECT_EQ(keys_of(sink["values"]), (std::set<std::string>{"1"}));
  // At γ = 1 the attention is nearly uniform at step 0: S ≈ (1/T) Σ_i 1/i (T = 16).
  double uniform = 0.0;
  for (int i = 1; i <= 16; ++i) uniform += 1.0 / i;
  EXPECT_NEAR(sink["values"]["1"].get<double>(), uniform / 16, 0.01);
  const json& rank = records.at("stable_rank").at(20);
  EXPECT_EQ(keys_of(rank["values"]),
            (std::set<std::string>{"model.layers.0.mlp.down_proj.weight", "model.layers.0.self_attn.q_proj.weight",
                                   "model.layers.2.mlp.down_proj.weight", "model.layers.2.self_attn.q_proj.weight"}));
  for (const auto& [name, v] : rank["values"].items()) {
    EXPECT_GE(v.get<double>(), 1.0) << name;
    EXPECT_LE(v.get<double>(), 32.0) << name;  // at most min(rows, cols)
  }
  EXPECT_FALSE(rank.contains("unconverged"));

  // The initial loss sits near ln V; the residual flow near d^(1-γ) = 1 at γ = 1.
  const json& initial = records.at("initial_loss").at(0);
  EXPECT_DOUBLE_EQ(initial["log_vocab"].get<double>(), std::log(64.0));
  EXPECT_NEAR(initial["ratio"].get<double>(), 1.0, 0.05);
  EXPECT_GT(records.at("residual_flow").at(0)["value"].get<double>(), 0.2);
  EXPECT_LT(records.at("residual_flow").at(0)["value"].get<double>(), 5.0);
  // ε = 1e-12 leaves the RMSNorm factor at its ε-free value.
  const json& factor = records.at("rmsnorm_factor").at(0);
  for (const auto& [norm, v] : factor["values"].items()) {
    EXPECT_NEAR(v.get<double>() / factor["eps_free"][norm].get<double>(), 1.0, 1e-6) << norm;
  }
  EXPECT_TRUE(factor["values"].contains("2.post_attention"));
  EXPECT_TRUE(factor["values"].contains("final"));
  // Update ratios are small positive numbers for every class.
  for (const auto& [cls, v] : records.at("update_ratio").at(20)["values"].items()) {
    EXPECT_GT(v.get<double>(), 0.0) << cls;
    EXPECT_LT(v.get<double>(), 0.5) << cls;
  }

  // Heatmaps at the image steps, one per selected tensor, as PNG files.
  int images = 0;
  for (const auto& [key, r] : records.at("cosine_image")) {
    const fs::path png = dir_ / "run" / r["path"].get<std::string>();
    ASSERT_TRUE(fs::exists(png)) << png;
    EXPECT_EQ(sh("head -c 4 " + png.string() + " | od -An -c").output.find("P   N   G") != std::string::npos, true);
    EXPECT_TRUE(r["step"] == 0 || r["step"] == 20);
    ++images;
  }
  // Steps 0 and 20 × the q_proj of 3 layers, and the top-token embeddings at step 0
  // (embedding_cosine is due then, not at step 20).
  EXPECT_EQ(images, 2 * 3 + 1);

  // analyze metrics on the final checkpoint reproduces the trainer's step-20 numbers.
  const Outcome analyzed = run("analyze", "metrics run -o analyzed.jsonl --images analysis");
  ASSERT_EQ(analyzed.status, 0) << analyzed.output;
  const auto again = by_metric(read_jsonl(dir_ / "analyzed.jsonl"));
  EXPECT_EQ(again.at("stable_rank").at(20)["values"], rank["values"]);
  EXPECT_EQ(again.at("sink_score").at(20)["values"], records.at("sink_score").at(20)["values"]);
  EXPECT_TRUE(again.count("logit_std"));  // analyze measures everything
  EXPECT_TRUE(fs::exists(dir_ / "analysis" / "images" / "step_000020" / "embedding_top_tokens.png"));

  // compare: a checkpoint against itself changes nothing; against the step-10
  // checkpoint it reports the same mean losses as the training log.
  ASSERT_EQ(run("analyze", "tokens run/checkpoints/step_000010 -o s10.safetensors --batches 2").status, 0);
  const Outcome self = run("analyze", "compare run run -o self.json --batches 2");
  ASSERT_EQ(self.status, 0) << self.output;
  const json same = json::parse(sh("cat " + (dir_ / "self.json").string()).output);
  EXPECT_EQ(same["mean_delta_sym_p"].get<double>(), 0.0);
  EXPECT_EQ(same["tokens"].get<int>(), 2 * 4 * 16);
  const Outcome cmp = run("analyze", "compare run s10.safetensors -o cmp.json --batches 2 --tokens-out cmp.tsv --top 5");
  ASSERT_EQ(cmp.status, 0) << cmp.output;
  const json c = json::parse(sh("cat " + (dir_ / "cmp.json").string()).output);
  double val10 = 0, val20 = 0;
  for (const auto& r : read_jsonl(dir_ / "run" / "metrics.jsonl")) {
    if (r.contains("val_loss") && r["step"] == 10) val10 = r["val_loss"];
    if (r.contains("val_loss") && r["step"] == 20) val20 = r["val_loss"];
  }
  EXPECT_NEAR(c["a"]["mean_loss"].get<double>(), val20, 1e-5);
  EXPECT_NEAR(c["b"]["mean_loss"].get<double>(), val10, 1e-5);
  ASSERT_EQ(c["deciles"].size(), 10u);
  std::int64_t counted = 0;
  for (const auto& d : c["deciles"]) counted += d["count"].get<std::int64_t>();
  EXPECT_EQ(counted, 128);
  EXPECT_EQ(c["top_gains"].size(), 5u);
  EXPECT_EQ(std::count(std::istreambuf_iterator<char>(std::ifstream(dir_ / "cmp.tsv").rdbuf()), {}, '\n'), 129);

  // Errors name the problem and the file.
  const Outcome missing = run("analyze", "metrics nowhere");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("nowhere: no such checkpoint"), std::string::npos) << missing.output;
  const Outcome sizes = run("analyze", "compare run s10.safetensors --batches 1");
  EXPECT_EQ(sizes.status, 1);
  EXPECT_NE(sizes.output.find("different numbers of tokens"), std::string::npos) << sizes.output;
  // Another vocabulary: the token file's vocab_size says 99 instead of 64.
  std::string bytes = sh("cat " + (dir_ / "s10.safetensors").string()).output;
  const auto at = bytes.find("\"vocab_size\":\"64\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 17, "\"vocab_size\":\"99\"");
  std::ofstream(dir_ / "other_vocab.safetensors", std::ios::binary) << bytes;
  const Outcome vocab = run("analyze", "compare run other_vocab.safetensors --batches 2");
  EXPECT_EQ(vocab.status, 1);
  EXPECT_NE(vocab.output.find("mismatched vocabularies"), std::string::npos) << vocab.output;
  // A checkpoint from another spec.
  fs::copy(dir_ / "run" / "checkpoints" / "step_000020", dir_ / "foreign", fs::copy_options::recursive);
  std::string state = sh("cat " + (dir_ / "foreign" / "state.json").string()).output;
  const auto hash = state.find("\"spec_hash\"");
  ASSERT_NE(hash, std::string::npos);
  state[state.find(':', hash) + 3] ^= 1;  // flip one hex digit
  std::ofstream(dir_ / "foreign" / "state.json") << state;
  const Outcome foreign = run("analyze", "metrics foreign");
  EXPECT_EQ(foreign.status, 1);
  EXPECT_NE(foreign.output.find("spec"), std::string::npos) << foreign.output;
  EXPECT_EQ(run("analyze", "compare run").status, 2);
  EXPECT_EQ(run("analyze", "tokens run").status, 2);  // needs -o
  EXPECT_EQ(run("analyze", "metrics run --top x").status, 2);
  const Outcome device = run("analyze", "metrics run --device gpu");
  EXPECT_EQ(device.status, 2);
  EXPECT_NE(device.output.find("--device needs cpu, cuda or auto, not 'gpu'"), std::string::npos) << device.output;
  // No GPU here: --device cuda is refused naming why (no device, or a tree without the CUDA backend).
  if (gc::test::sh("nvidia-smi -L").status != 0) {
    const Outcome cuda = run("analyze", "metrics run --device cuda");
    EXPECT_EQ(cuda.status, 1);
    EXPECT_NE(cuda.output.find("--device cuda"), std::string::npos) << cuda.output;
  }
}

}  // namespace
