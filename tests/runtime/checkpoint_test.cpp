#include "runtime/checkpoint.hpp"
#include "runtime/sha256.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime/safetensors.hpp"
#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

namespace fs = std::filesystem;
using test::entries;
using test::error_of;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

const std::string kHash = std::string(32, 'a') + std::string(32, 'b');

// A two-parameter model whose buffers hold distinct values (seeded by `base`).
struct Model {
  std::vector<float> embed, embed_m, embed_v, norm, norm_m, norm_v;
  explicit Model(float base) {
    for (int i = 0; i < 12; ++i) {
      embed.push_back(base + i);
      embed_m.push_back(base + 0.5f * i);
      embed_v.push_back(base + 0.25f * i);
    }
    for (int i = 0; i < 3; ++i) {
      norm.push_back(base - i);
      norm_m.push_back(base - 0.5f * i);
      norm_v.push_back(base - 0.25f * i);
    }
  }
  std::vector<ParamBuffers> params() {
    return {{"model.embed_tokens.weight", {4, 3}, embed.data(), embed_m.data(), embed_v.data()},
            {"model.norm.weight", {3}, norm.data(), norm_m.data(), norm_v.data()}};
  }
  bool operator==(const Model& o) const {
    return embed == o.embed && embed_m == o.embed_m && embed_v == o.embed_v && norm == o.norm && norm_m == o.norm_m &&
           norm_v == o.norm_v;
  }
};

CheckpointState state_at(std::int64_t step) {
  CheckpointState s;
  s.step = step;
  s.data["train"] = DataPosition{1, 5, 2, "b.bin"};
  s.seed = 18446744073709551615ull;
  s.rng_state = "philox:7:123";
  s.spec_hash = kHash;
  s.gcompile_version = "0.1.0";
  s.extra = {{"lr", 0.001}};
  return s;
}

TEST(RuntimeCheckpoint, RoundTrip) {
  TempDir run;
  Model saved(1);
  const std::string dir = save_checkpoint(run.str(), saved.params(), state_at(123), 3);
  EXPECT_EQ(dir, run / "checkpoints/step_000123");
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
  EXPECT_EQ(entries(run / "checkpoints"), (std::vector<std::string>{"latest", "step_000123"}));
  EXPECT_EQ(read_bytes(run / "checkpoints/latest"), "step_000123\n");

  const SafetensorsFile model = read_safetensors(dir + "/model.safetensors");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  EXPECT_EQ(model.tensor("model.embed_tokens.weight").dtype, Dtype::F32);
  const SafetensorsFile opt = read_safetensors(dir + "/optimizer.safetensors");
  EXPECT_TRUE(opt.has("exp_avg.model.norm.weight"));
  EXPECT_TRUE(opt.has("exp_avg_sq.model.embed_tokens.weight"));

  Model loaded(0);
  ASSERT_EQ(latest_checkpoint(run.str()), dir);
  const CheckpointState s = load_checkpoint(dir, loaded.params(), kHash);
  EXPECT_TRUE(loaded == saved);
  EXPECT_EQ(s.step, 123);
  EXPECT_EQ(s.data.at("train"), (DataPosition{1, 5, 2, "b.bin"}));
  EXPECT_EQ(s.seed, 18446744073709551615ull);
  EXPECT_EQ(s.rng_state, "philox:7:123");
  EXPECT_EQ(s.spec_hash, kHash);
  EXPECT_EQ(s.gcompile_version, "0.1.0");
  EXPECT_EQ(s.extra, (nlohmann::json{{"lr", 0.001}}));
}

TEST(RuntimeCheckpoint, WeightsOnlyLoad) {
  TempDir run;
  Model saved(1);
  const std::string dir = save_checkpoint(run.str(), saved.params(), state_at(1), 0);
  Model loaded(0);
  auto params = loaded.params();
  for (auto& p : params) p.exp_avg = p.exp_avg_sq = nullptr;
  load_checkpoint(dir, params, "");
  EXPECT_EQ(loaded.embed, saved.embed);
  EXPECT_EQ(loaded.embed_m, Model(0).embed_m);
}

TEST(RuntimeCheckpoint, KeepsTheMostRecentK) {
  TempDir run;
  Model m(1);
  for (int step = 10; step <= 50; step += 10) save_checkpoint(run.str(), m.params(), state_at(step), 2);
  EXPECT_EQ(list_checkpoints(run.str()),
            (std::vector<std::string>{run / "checkpoints/step_000040", run / "checkpoints/step_000050"}));
  EXPECT_EQ(latest_checkpoint(run.str()), run / "checkpoints/step_000050");
  // Resuming from an older checkpoint: the one just written is never pruned.
  save_checkpoint(run.str(), m.params(), state_at(45), 1);
  EXPECT_EQ(list_checkpoints(run.str()), std::vector<std::string>{run / "checkpoints/step_000045"});
  for (int step = 1; step <= 3; ++step) save_checkpoint(run.str(), m.params(), state_at(step), 0);
  EXPECT_EQ(list_checkpoints(run.str()).size(), 4u);
}

TEST(RuntimeCheckpoint, DifferentSpecHash) {
  TempDir run;
  Model m(1);
  const std::string dir = save_checkpoint(run.str(), m.params(), state_at(5), 3);
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, m.params(), std::string(64, 'd')); }),
            "checkpoint " + dir +
                " was written by a different spec (hash aaaaaaaaaaaa\u2026 in the checkpoint vs "
                "dddddddddddd\u2026 for this spec)");
}

TEST(RuntimeCheckpoint, MissingTensorUnknownTensorAndShapeMismatchLoadNothing) {
  TempDir run;
  Model saved(1);
  const std::string dir = save_checkpoint(run.str(), saved.params(), state_at(5), 3);
  const std::string model = dir + "/model.safetensors";
  Model loaded(0);
  std::vector<float> head(12);

  auto params = loaded.params();
  params.push_back({"lm_head.weight", {4, 3}, head.data(), nullptr, nullptr});
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, params, kHash); }),
            "no tensor 'lm_head.weight' in " + model + " (it has 2 tensors)");

  params = loaded.params();
  params.pop_back();
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, params, kHash); }),
            model + ": tensor 'model.norm.weight': is not a parameter of this model");

  params = loaded.params();
  params[0].shape = {3, 4};
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, params, kHash); }),
            model + ": tensor 'model.embed_tokens.weight': shape [4, 3] does not match the expected [3, 4]");
  EXPECT_TRUE(loaded == Model(0));  // nothing copied
}

TEST(RuntimeCheckpoint, MissingOptimizerTensor) {
  TempDir run;
  Model saved(1);
  auto params = saved.params();
  params[1].exp_avg = params[1].exp_avg_sq = nullptr;
  const std::string dir = save_checkpoint(run.str(), params, state_at(5), 3);
  Model loaded(0);
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, loaded.params(), kHash); }),
            "no tensor 'exp_avg.model.norm.weight' in " + dir + "/optimizer.safetensors (it has 2 tensors)");
  EXPECT_TRUE(loaded == Model(0));
}

TEST(RuntimeCheckpoint, CrashLeavesThePreviousCheckpointLoadable) {
  TempDir run;
  Model saved(1);
  save_checkpoint(run.str(), saved.params(), state_at(100), 3);
  // A crash while writing step 200: a partial temporary directory and a
  // half-written temporary `latest`.
  const std::string ckpts = run / "checkpoints";
  fs::create_directories(ckpts + "/step_000200.tmp");
  write_bytes(ckpts + "/step_000200.tmp/model.safetensors", "\x40\x00\x00");
  write_bytes(ckpts + "/latest.tmp.99999", "step_0002");

  EXPECT_EQ(list_checkpoints(run.str()), std::vector<std::string>{ckpts + "/step_000100"});
  const auto latest = latest_checkpoint(run.str());
  ASSERT_EQ(latest, ckpts + "/step_000100");
  Model loaded(0);
  EXPECT_EQ(load_checkpoint(*latest, loaded.params(), kHash).step, 100);
  EXPECT_TRUE(loaded == saved);

  // The next save replaces the stale temporary.
  save_checkpoint(run.str(), saved.params(), state_at(200), 3);
  EXPECT_EQ(latest_checkpoint(run.str()), ckpts + "/step_000200");
  EXPECT_FALSE(fs::exists(ckpts + "/step_000200.tmp"));
}

TEST(RuntimeCheckpoint, FailedSaveKeepsLatestAndThePreviousCheckpoint) {
  TempDir run;
  Model saved(1);
  save_checkpoint(run.str(), saved.params(), state_at(100), 1);
  auto params = saved.params();
  params[1].name = params[0].name;  // the model writer refuses duplicate names mid-save
  const std::string ckpts = run / "checkpoints";
  EXPECT_EQ(error_of([&] { save_checkpoint(run.str(), params, state_at(200), 1); }),
            ckpts +
                "/step_000200.tmp/model.safetensors: tensor 'model.embed_tokens.weight': appears twice in the "
                "tensor list");
  EXPECT_EQ(entries(ckpts), (std::vector<std::string>{"latest", "step_000100"}));
  EXPECT_EQ(read_bytes(ckpts + "/latest"), "step_000100\n");
  Model loaded(0);
  load_checkpoint(ckpts + "/step_000100", loaded.params(), kHash);
  EXPECT_TRUE(loaded == saved);
}

TEST(RuntimeCheckpoint, ResavingTheSameStepReplacesIt) {
  TempDir run;
  Model first(1), second(2);
  save_checkpoint(run.str(), first.params(), state_at(7), 3);
  const std::string dir = save_checkpoint(run.str(), second.params(), state_at(7), 3);
  Model loaded(0);
  load_checkpoint(dir, loaded.params(), kHash);
  EXPECT_TRUE(loaded == second);
  EXPECT_EQ(entries(run / "checkpoints"), (std::vector<std::string>{"latest", "step_000007"}));
}

TEST(RuntimeCheckpoint, LatestFileProblems) {
  TempDir run;
  EXPECT_EQ(latest_checkpoint(run.str()), std::nullopt);
  Model m(1);
  save_checkpoint(run.str(), m.params(), state_at(3), 0);
  save_checkpoint(run.str(), m.params(), state_at(4), 0);
  const std::string latest = run / "checkpoints/latest";
  fs::remove(latest);
  EXPECT_EQ(latest_checkpoint(run.str()), run / "checkpoints/step_000004");  // newest complete one
  write_bytes(latest, "step_000999\n");
  EXPECT_EQ(error_of([&] { latest_checkpoint(run.str()); }),
            latest + ": names step_000999, which is not a complete checkpoint");
  write_bytes(latest, "../../etc\n");
  EXPECT_EQ(error_of([&] { latest_checkpoint(run.str()); }),
            latest + ": does not name a checkpoint directory: '../../etc'");
}

TEST(RuntimeCheckpoint, CorruptStateJson) {
  TempDir run;
  Model m(1);
  const std::string dir = save_checkpoint(run.str(), m.params(), state_at(3), 0);
  const std::string state = dir + "/state.json";
  auto j = nlohmann::json::parse(read_bytes(state));
  const auto with = [&](const nlohmann::json& v) {
    write_bytes(state, v.dump());
    return error_of([&] { load_checkpoint(dir, m.params(), kHash); });
  };
  auto k = j;
  k.erase("step");
  EXPECT_EQ(with(k), state + ": missing \"step\"");
  k = j;
  k["step"] = 4;
  EXPECT_EQ(with(k), state + ": step 4 does not match the directory name step_000003");
  k = j;
  k["data"]["train"]["offset"] = -1;
  EXPECT_EQ(with(k), state + ": \"data.train.offset\" is not a non-negative integer: -1");
  k = j;
  k["spec_hash"] = 5;
  EXPECT_EQ(with(k), state + ": \"spec_hash\" is not a string: 5");
  write_bytes(state, "{\"step\": 3,");
  EXPECT_EQ(error_of([&] { read_checkpoint_state(dir); }),
            state +
                ": not valid JSON: [json.exception.parse_error.101] parse error at line 1, column 12: syntax "
                "error while parsing object key - unexpected end of input; expected string literal");
}

TEST(RuntimeCheckpoint, CorruptModelFileNamesIt) {
  TempDir run;
  Model m(1);
  const std::string dir = save_checkpoint(run.str(), m.params(), state_at(3), 0);
  const std::string model = dir + "/model.safetensors";
  const std::string bytes = read_bytes(model);
  write_bytes(model, bytes.substr(0, bytes.size() - 4));
  EXPECT_EQ(error_of([&] { load_checkpoint(dir, m.params(), kHash); }),
            model + ": is corrupted: " + std::to_string(bytes.size() - 4) + " bytes, but state.json records " +
                std::to_string(bytes.size()) + " (resume an older checkpoint with --checkpoint)");
  // A checkpoint of format_version 1 (no fingerprints) still loads, and the
  // safetensors checks still catch a truncation.
  const std::string state = dir + "/state.json";
  auto j = nlohmann::json::parse(read_bytes(state));
  j["format_version"] = 1;
  j.erase("files");
  write_bytes(state, j.dump());
  EXPECT_EQ(
      error_of([&] { load_checkpoint(dir, m.params(), kHash); }),
      model + ": tensor 'model.norm.weight': data_offsets [48, 60] run past the end of the data section (56 bytes)");
  write_bytes(model, bytes);
  Model loaded(0);
  EXPECT_EQ(load_checkpoint(dir, loaded.params(), kHash).step, 3);
  EXPECT_TRUE(loaded == m);
}

TEST(RuntimeCheckpoint, OneFlippedByteIsNamedAndNothingIsLoaded) {
  TempDir run;
  Model m(1);
  const std::string dir = save_checkpoint(run.str(), m.params(), state_at(3), 0);
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const std::string file = dir + "/" + name;
    const std::string good = read_bytes(file);
    std::string bad = good;
    bad[bad.size() - 3] = char(bad[bad.size() - 3] ^ 1);  // inside the last tensor's data
    write_bytes(file, bad);
    Model loaded(0);
    const std::string err = error_of([&] { load_checkpoint(dir, loaded.params(), kHash); });
    EXPECT_EQ(err.rfind(file + ": is corrupted: its SHA-256 ", 0), 0u) << err;
    EXPECT_TRUE(loaded == Model(0));
    write_bytes(file, good);
  }
  Model loaded(0);
  load_checkpoint(dir, loaded.params(), kHash);
  EXPECT_TRUE(loaded == m);
}

TEST(RuntimeCheckpoint, StateJsonFingerprintsAreValidated) {
  TempDir run;
  Model m(1);
  const std::string dir = save_checkpoint(run.str(), m.params(), state_at(3), 0);
  const std::string state = dir + "/state.json";
  const auto j = nlohmann::json::parse(read_bytes(state));
  EXPECT_EQ(j["format_version"], 2);
  EXPECT_EQ(j["files"]["model.safetensors"]["sha256"], sha256_file_hex(dir + "/model.safetensors"));
  const auto with = [&](const nlohmann::json& v) {
    write_bytes(state, v.dump());
    return error_of([&] { load_checkpoint(dir, m.params(), kHash); });
  };
  auto k = j;
  k["files"].erase("optimizer.safetensors");
  EXPECT_EQ(with(k), state + ": missing \"files.optimizer.safetensors\"");
  k = j;
  k["files"]["model.safetensors"]["sha256"] = "xyz";
  EXPECT_EQ(with(k), state + ": \"files.model.safetensors.sha256\" is not 64 lowercase hex digits: \"xyz\"");
  k = j;
  k.erase("files");
  EXPECT_EQ(with(k), state + ": missing \"files\"");
  k = j;
  k["format_version"] = 3;
  EXPECT_EQ(with(k), state + ": unsupported format_version 3 (expected 1 or 2)");
}

}  // namespace
}  // namespace gc::rt
