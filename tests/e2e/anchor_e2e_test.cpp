// The anchor-function task end to end (data.format = "anchor"): gcompile generates the
// data, ./train learns it with the loss on the last position only and records the four
// accuracies at every evaluation, ./analyze anchor reproduces them from the checkpoint,
// and on a hand-made checkpoint whose prediction is a known function of the last input
// token the accuracies equal the ones counted here independently. One tree, built once.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/anchor.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/safetensors.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace anchor = gc::rt::anchor;
using gc::test::Outcome;
using gc::test::read_jsonl;
using gc::test::sh;
using nlohmann::json;

// d_model >= vocab, so the hand-made checkpoint can give every token its own direction.
const std::string kAnchorSpec = gc::test::fixture_spec("anchor.toml");

constexpr int kVocab = 112, kDModel = 128;

class AnchorE2e : public gc::test::TreeTest {
 protected:
  Outcome run(const std::string& program, const std::string& args) {
    return sh("cd " + dir_.string() + " && OMP_NUM_THREADS=2 " + (tree() / program).string() + " " + args);
  }
};

std::vector<json> anchor_records(const std::vector<json>& records) {
  std::vector<json> out;
  for (const auto& r : records) {
    if (r.value("metric", "") == "anchor") out.push_back(r);
  }
  return out;
}

// The prediction of the hand-made model: a function of the last input token alone.
int predicted_from_last(int last) { return last >= 20 ? last - 10 : 100 + last; }

// A checkpoint whose attention and MLP outputs are zero (o_proj, down_proj = 0), so the
// last position's hidden state is the embedding of the last input token; embeddings are
// one-hot and lm_head maps token t's direction to predicted_from_last(t).
void write_hand_made_checkpoint(const std::string& trained, const std::string& run_dir) {
  const auto file = gc::rt::read_safetensors(trained + "/model.safetensors");
  std::vector<std::vector<float>> storage;
  std::vector<gc::rt::ParamBuffers> params;
  for (const auto& t : file.tensors()) {
    std::vector<float> w = file.load_f32(t.name);
    const bool zero = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos;
    if (zero) std::fill(w.begin(), w.end(), 0.0f);
    if (t.name.find("norm") != std::string::npos) std::fill(w.begin(), w.end(), 1.0f);
    if (t.name == "model.embed_tokens.weight") {
      std::fill(w.begin(), w.end(), 0.0f);
      for (int v = 0; v < kVocab; ++v) w[std::size_t(v) * kDModel + v] = 1.0f;
    }
    if (t.name == "lm_head.weight") {  // [V, D]: logit v = Σ_d f_d W[v][d]
      std::fill(w.begin(), w.end(), 0.0f);
      for (int last = 0; last < kVocab; ++last) {
        const int v = predicted_from_last(last);
        if (v < kVocab) w[std::size_t(v) * kDModel + last] = 1.0f;
      }
    }
    storage.push_back(std::move(w));
    params.push_back({t.name, t.shape, nullptr, nullptr, nullptr});
  }
  for (std::size_t i = 0; i < params.size(); ++i) params[i].weight = storage[i].data();
  gc::rt::CheckpointState state = gc::rt::read_checkpoint_state(trained);
  state.files.clear();
  gc::rt::save_checkpoint(run_dir, params, state, 0);
}

TEST_F(AnchorE2e, TrainRecordsAccuraciesAnalyzeReproducesThemAndAHandMadeModelScoresAsCounted) {
  programs_ = "train,analyze";  // the programs this test runs (CI time)
  const Outcome gen = generate(kAnchorSpec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome train = run("train", "--out run");
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_NE(train.output.find("anchor accuracy train"), std::string::npos) << train.output;

  // One record at initialization and at every evaluation, each over the 70 sequences.
  const auto records = read_jsonl(dir_ / "run" / "metrics.jsonl");
  const auto acc = anchor_records(records);
  ASSERT_EQ(acc.size(), 3u);
  for (std::size_t i = 0; i < acc.size(); ++i) {
    EXPECT_EQ(acc[i]["step"], std::int64_t(i) * 20);
    EXPECT_EQ(acc[i]["sequences"], 70);
    for (const char* k : {"train", "test", "inferential", "symmetric"}) {
      const double v = acc[i]["values"][k];
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
      EXPECT_DOUBLE_EQ(std::round(v * 70) / 70, v) << k << ": not a count out of 70";
    }
  }
  // The loss covers the one target per sequence: at init it is about ln V.
  for (const auto& r : records) {
    if (r.value("metric", "") == "initial_loss") {
      EXPECT_NEAR(r["value"].get<double>(), std::log(112.0), 0.5);
    }
  }

  // analyze anchor on the final checkpoint gives the training loop's last record.
  const Outcome analyzed = run("analyze", "anchor run -o anchor.jsonl");
  ASSERT_EQ(analyzed.status, 0) << analyzed.output;
  const auto again = read_jsonl(dir_ / "anchor.jsonl");
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0], acc.back());

  // The hand-made checkpoint: count the expected accuracies from the task's own sequences.
  const std::string trained = gc::rt::resolve_checkpoint((dir_ / "run").string());
  write_hand_made_checkpoint(trained, (dir_ / "hand").string());
  const anchor::Task task{77, 4, 3};
  anchor::Scores expected;
  for (auto stream : {anchor::Stream::train, anchor::Stream::test, anchor::Stream::held_out}) {
    for (const auto& s : anchor::make_sequences(task, stream, 70)) {
      anchor::score(stream, s, predicted_from_last(s.tokens.back()), expected);
    }
  }
  const Outcome hand = run("analyze", "anchor hand -o hand.jsonl");
  ASSERT_EQ(hand.status, 0) << hand.output;
  const json got = read_jsonl(dir_ / "hand.jsonl").at(0)["values"];
  EXPECT_DOUBLE_EQ(got["train"].get<double>(), expected.train.value());
  EXPECT_DOUBLE_EQ(got["test"].get<double>(), expected.test.value());
  EXPECT_DOUBLE_EQ(got["inferential"].get<double>(), expected.inferential.value());
  EXPECT_DOUBLE_EQ(got["symmetric"].get<double>(), expected.symmetric.value());
  // Sequences with the pair at the end (p = 6) are predicted from an anchor (never right);
  // the others are right exactly when the last noise token is x (or x + 4 for symmetric).
  EXPECT_GT(expected.test.correct + expected.train.correct + expected.inferential.correct, 0)
      << "the hand-made model should hit some targets, or the comparison shows nothing";

  // analyze anchor is for anchor trees only; the other commands see one target per sequence.
  const Outcome tokens = run("analyze", "tokens run -o tokens.safetensors");
  ASSERT_EQ(tokens.status, 0) << tokens.output;
  const Outcome compare = run("analyze", "compare run hand -o compare.json");
  ASSERT_EQ(compare.status, 0) << compare.output;
  const json c = json::parse(gc::test::read_text(dir_ / "compare.json"));
  EXPECT_EQ(c["tokens"], 4 * 16) << "the 70 validation sequences make 4 whole batches of 16: one target each";
}

}  // namespace
