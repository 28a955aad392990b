// End to end: spec -> gcompile (generate + build) -> the generated programs.
// Each test builds one tree in a temporary directory (about a minute on two
// cores) and checks what a user would: gradients against finite differences
// for every feature, loss falling, bit-identical resume, clear errors on
// corrupt inputs, byte-identical regeneration.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "runtime/sha256.hpp"
#include "step_profile_check.hpp"
#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

using gc::test::Outcome;
using gc::test::read_jsonl;
using gc::test::sh;

class Tree : public gc::test::TreeTest {
 protected:
  Outcome train(const std::string& args) { return sh((tree() / "train").string() + " " + args); }
};


// Every feature that adds tensors or code paths, in one small model.
const std::string kAllFeatures = gc::test::fixture_spec("all_features.toml");

TEST_F(Tree, GradientsMatchFiniteDifferencesWithEveryFeature) {
  programs_ = "gradcheck";  // the one program this test runs: the tree builds nothing else (CI time)
  const Outcome gen = generate(kAllFeatures);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome check = sh((tree() / "gradcheck").string());
  EXPECT_EQ(check.status, 0) << check.output;
  EXPECT_NE(check.output.find("self_attn.gate_proj.weight"), std::string::npos);
  EXPECT_NE(check.output.find("self_attn.q_norm.weight"), std::string::npos);
  EXPECT_NE(check.output.find("mlp.out_norm.weight"), std::string::npos);
  EXPECT_NE(check.output.find(": ok"), std::string::npos) << check.output;
}

TEST_F(Tree, GradientsMatchWithHeadwiseGateAndTiedEmbeddings) {
  std::string spec = kAllFeatures;
  for (auto [from, to] : {std::pair<std::string, std::string>{"\"elementwise\"", "\"headwise\""},
                          {"norm_placement = \"sandwich\"", "tie_embeddings = true"},
                          {"qk_norm = true", "qk_norm = false"},
                          {"embedding_norm = true", "embedding_norm = false"},
                          // 24 × 64 is a multiple of the 128-element alignment: W_up follows W_gate
                          // and the MLP's input projections run as one stacked GEMM (kAllFeatures'
                          // 24 × 40 leaves a gap, so that test covers the two-GEMM path).
                          {"d_ff = 40", "d_ff = 64"}}) {
    spec.replace(spec.find(from), from.size(), to);
  }
  programs_ = "gradcheck";  // the one program this test runs: the tree builds nothing else (CI time)
  const Outcome gen = generate(spec);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome check = sh((tree() / "gradcheck").string());
  EXPECT_EQ(check.status, 0) << check.output;
  EXPECT_EQ(check.output.find("lm_head"), std::string::npos) << "tied embeddings have no LM head";
  const std::string model = gc::test::read_text(tree() / "src" / "model" / "model_impl.hpp");
  EXPECT_NE(model.find("ops_.swiglu_pair_forward("), std::string::npos) << "the stacked path is the one generated";
  EXPECT_EQ(model.find("ops_.swiglu_forward("), std::string::npos) << "the two-GEMM path is pruned";
}

// Real text with strong regularities: a short SentencePiece vocabulary is
// trained on it, and a small model learns it within 60 steps.
const std::string kSmallTraining = gc::test::fixture_spec("small_training.toml");

void write_corpus(const fs::path& file) {
  const char* subjects[] = {"the cat", "a dog", "the bird", "my friend", "the teacher", "a child"};
  const char* verbs[] = {"sees", "likes", "finds", "follows", "greets", "watches"};
  const char* objects[] = {"the ball.", "a tree.", "the house.", "the river.", "a book.", "the garden."};
  std::ofstream out(file);
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (const char* s : subjects) {
      for (const char* v : verbs) {
        for (const char* o : objects) out << s << " " << v << " " << o << "\n";
      }
    }
  }
}

TEST_F(Tree, TrainsProfilesResumesBitIdenticallyAndRejectsCorruptCheckpoints) {
  programs_ = "train,analyze";  // the programs this test runs (CI time)
  write_corpus(dir_ / "corpus.txt");
  const Outcome gen = generate(kSmallTraining);
  ASSERT_EQ(gen.status, 0) << gen.output;

  // Uninterrupted: the loss falls on the copy task.
  const Outcome full = train("--out " + (dir_ / "full").string());
  ASSERT_EQ(full.status, 0) << full.output;
  const auto log = read_jsonl(dir_ / "full" / "metrics.jsonl");
  std::vector<double> loss, val;
  for (const auto& rec : log) {
    if (rec.contains("loss")) loss.push_back(rec["loss"].get<double>());
    if (rec.contains("val_loss")) val.push_back(rec["val_loss"].get<double>());
  }
  ASSERT_EQ(loss.size(), 60u);
  ASSERT_EQ(val.size(), 3u);
  EXPECT_LT(val.back(), val.front() - 0.5) << full.output;
  EXPECT_LT(loss.back(), loss.front() - 2.0) << full.output;

  // The step profile on the CPU: 2 warm-up + 3 timed steps, the table and RUN/profile.json; and
  // the misuse of its flags and of --watchdog-s, named.
  const Outcome profiled = train("--profile 3 --no-metrics --out " + (dir_ / "profile").string());
  ASSERT_EQ(profiled.status, 0) << profiled.output;
  gc::test::expect_step_profile(dir_ / "profile", profiled.output, {"cpu", 3, 2, 2, false});
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--profile 0", "--profile needs a step count from 1 to 1000"},
           {"--profile 3 --steps 10", "--profile sets the steps itself"},
           {"--profile 100", "more than the schedule's 60"},
           {"--profile-ceilings 700,4000", "--profile-ceilings needs --profile"},
           {"--profile --profile-ceilings 700", "--profile-ceilings needs two positive numbers"},
           {"--profile --resume " + (dir_ / "full").string(), "--profile starts a new run"},
           {"--watchdog-s", "--watchdog-s needs a number of seconds"},
           {"--watchdog-s -5", "--watchdog-s needs a number of seconds (0 turns the watchdog off), not '-5'"},
           {"--watchdog-s 10x", "not '10x'"}}) {
    const Outcome bad = train(args);
    EXPECT_EQ(bad.status, 2) << args << "\n" << bad.output;
    EXPECT_NE(bad.output.find(says), std::string::npos) << args << "\n" << bad.output;
  }

  // Interrupted at step 20, resumed to the end: the same numbers, bit for bit.
  const fs::path part = dir_ / "part";
  ASSERT_EQ(train("--out " + part.string() + " --steps 20").status, 0);
  const fs::path poisoned = dir_ / "poisoned";
  fs::copy(part, poisoned, fs::copy_options::recursive);
  const Outcome resumed = train("--resume " + part.string());
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  // Each process ends with its own summary record (timings); the rest must match.
  auto without_summaries = [](std::vector<nlohmann::json> records) {
    records.erase(std::remove_if(records.begin(), records.end(),
                                 [](const nlohmann::json& r) { return r.value("event", "") == "summary"; }),
                  records.end());
    return records;
  };
  const auto log2 = without_summaries(read_jsonl(part / "metrics.jsonl"));
  EXPECT_EQ(read_jsonl(part / "metrics.jsonl").size(), log.size() + 1);  // the first process's summary too
  ASSERT_EQ(log2.size(), without_summaries(log).size());
  const auto log1 = without_summaries(log);
  // The training and evaluation fields of `other`'s records equal the uninterrupted run's.
  const auto expect_same_records = [&](const std::vector<nlohmann::json>& other) {
    for (std::size_t i = 0; i < log1.size(); ++i) {
      for (const char* key : {"step", "loss", "lr", "grad_norm", "val_loss"}) {
        if (log1[i].contains(key)) {
          EXPECT_EQ(other[i][key], log1[i][key]) << "record " << i << " key " << key;
        }
      }
    }
  };
  expect_same_records(log2);

  // A NaN in the weights stops the run with a clear message; the last good
  // checkpoint stays the latest.
  const fs::path weights = poisoned / "checkpoints" / "step_000020" / "model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(weights) - 4));
    const float nan = std::nanf("");
    f.write(reinterpret_cast<const char*>(&nan), sizeof nan);
  }
  {
    // A NaN the training itself produced: state.json fingerprints the file as written.
    const fs::path state_file = poisoned / "checkpoints" / "step_000020" / "state.json";
    auto state = nlohmann::json::parse(sh("cat " + state_file.string()).output);
    state["files"]["model.safetensors"]["sha256"] = gc::rt::sha256_file_hex(weights.string());
    std::ofstream(state_file) << state.dump(2);
  }
  const Outcome stopped = train("--resume " + poisoned.string());
  EXPECT_EQ(stopped.status, 1);
  EXPECT_NE(stopped.output.find("is not finite"), std::string::npos) << stopped.output;
  EXPECT_EQ(sh("cat " + (poisoned / "checkpoints" / "latest").string()).output.find("step_000020"), 0u);

  // A fresh run refuses to overwrite a run directory.
  const Outcome again = train("--out " + part.string());
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.output.find("already holds a run"), std::string::npos) << again.output;

  // One flipped byte in a tensor of the latest checkpoint: resuming names the
  // damaged file; --checkpoint picks the older one, which resumes bit-identically.
  const fs::path latest = part / "checkpoints" / "step_000060" / "model.safetensors";
  ASSERT_TRUE(fs::exists(latest));
  {
    std::fstream f(latest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(fs::file_size(latest) / 2));
    char byte = 0;
    f.read(&byte, 1);
    byte = char(byte ^ 0x10);
    f.seekp(std::streamoff(fs::file_size(latest) / 2));
    f.write(&byte, 1);
  }
  const Outcome corrupt = train("--resume " + part.string());
  EXPECT_EQ(corrupt.status, 1);
  EXPECT_NE(corrupt.output.find("step_000060/model.safetensors: is corrupted: its SHA-256"), std::string::npos)
      << corrupt.output;
  const Outcome analyzed = sh((tree() / "analyze").string() + " metrics " + part.string() + " -o " +
                              (dir_ / "m.jsonl").string());
  EXPECT_EQ(analyzed.status, 1);
  EXPECT_NE(analyzed.output.find("is corrupted"), std::string::npos) << analyzed.output;
  const Outcome unknown = train("--resume " + part.string() + " --checkpoint step_000030");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_NE(unknown.output.find("the run has: step_000040, step_000060"), std::string::npos) << unknown.output;
  const Outcome older = train("--resume " + part.string() + " --checkpoint step_000040");
  ASSERT_EQ(older.status, 0) << older.output;
  const auto log3 = without_summaries(read_jsonl(part / "metrics.jsonl"));
  ASSERT_EQ(log3.size(), log1.size());
  expect_same_records(log3);
  EXPECT_EQ(train("--checkpoint step_000040").status, 2);  // --checkpoint needs --resume

  // Without --out, each run gets a new numbered directory runs/NAME/N/ under
  // the current directory, outside the tree.
  for (int i = 0; i < 2; ++i) {
    const Outcome run = sh("cd " + dir_.string() + " && ./tree/train --steps 2 --no-checkpoint");
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_NE(run.output.find("run directory runs/small_training/" + std::to_string(i + 1)), std::string::npos)
        << run.output;
  }
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "small_training" / "1" / "metrics.jsonl"));
  EXPECT_TRUE(fs::exists(dir_ / "runs" / "small_training" / "2" / "metrics.jsonl"));
  EXPECT_FALSE(fs::exists(tree() / "run"));

  // Bad flags are usage errors.
  EXPECT_EQ(train("--steps 0").status, 2);
  EXPECT_EQ(train("--steps 61").status, 2);
  EXPECT_EQ(train("--frobnicate").status, 2);
  // A run that fails at start leaves no numbered directory behind.
  EXPECT_EQ(sh("cd " + dir_.string() + " && ./tree/train --device cuda").status, 1);
  EXPECT_FALSE(fs::exists(dir_ / "runs" / "small_training" / "3"));
}

TEST_F(Tree, SameSpecGivesByteIdenticalTrees) {
  write_corpus(dir_ / "corpus.txt");
  ASSERT_EQ(generate(kSmallTraining, false).status, 0);
  const fs::path first = dir_ / "first";
  fs::rename(tree(), first);
  ASSERT_EQ(generate(kSmallTraining, false).status, 0);
  const Outcome diff = sh("diff -r " + first.string() + " " + tree().string());
  EXPECT_EQ(diff.status, 0) << diff.output;
}

// The tree carries nlohmann/json whole: every header json.hpp includes resolves
// inside runtime/third_party, never to the build machine's /usr/include, whose
// version may differ (the GPU image's 3.11.3 beside a 3.11.2 json.hpp failed
// to compile).
TEST_F(Tree, JsonHeadersResolveInsideTheTree) {
  write_corpus(dir_ / "corpus.txt");
  ASSERT_EQ(generate(kSmallTraining, false).status, 0);
  const std::string t = tree().string();
  const Outcome deps = sh("g++ -std=gnu++17 -M -I " + t + " -I " + t + "/src -I " + t + "/runtime/third_party " + t +
                          "/runtime/checkpoint.cpp");
  ASSERT_EQ(deps.status, 0) << deps.output;
  EXPECT_NE(deps.output.find(t + "/runtime/third_party/nlohmann/detail/"), std::string::npos) << deps.output;
  EXPECT_EQ(deps.output.find("/usr/include/nlohmann"), std::string::npos) << deps.output;
}

// Regenerating a tree never loses what the user put in it, refuses to
// overwrite hand edits or a directory gcompile did not write, and swaps the
// tree atomically (its manifest exists at every moment).
TEST_F(Tree, RegeneratingKeepsUserFilesAndSwapsAtomically) {
  write_corpus(dir_ / "corpus.txt");
  ASSERT_EQ(generate(kSmallTraining, false).status, 0);
  auto write = [](const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
  };
  auto read = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  // A run directory of an older gcompile (it wrote run/ inside the tree), notes, a file among the sources.
  write(tree() / "run" / "checkpoints" / "step_000010" / "state.json", "{\"step\": 10}\n");
  write(tree() / "run" / "metrics.jsonl", "{\"step\": 1, \"loss\": 7.5}\n");
  write(tree() / "notes.txt", "my notes\n");
  write(tree() / "src" / "model" / "scratch.txt", "scratch\n");
  const auto inode_before = sh("stat -c %i " + tree().string()).output;

  std::atomic<bool> done{false}, missing{false};
  std::thread watcher([&] {
    while (!done) {
      if (!fs::exists(tree() / "manifest.json")) missing = true;
    }
  });
  const Outcome again = generate(kSmallTraining, false);
  done = true;
  watcher.join();
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_FALSE(missing) << "the tree was missing during regeneration";
  EXPECT_NE(sh("stat -c %i " + tree().string()).output, inode_before) << "the tree was replaced, not edited in place";
  EXPECT_NE(again.output.find("kept what you added"), std::string::npos) << again.output;
  EXPECT_EQ(read(tree() / "run" / "metrics.jsonl"), "{\"step\": 1, \"loss\": 7.5}\n");
  EXPECT_EQ(read(tree() / "run" / "checkpoints" / "step_000010" / "state.json"), "{\"step\": 10}\n");
  EXPECT_EQ(read(tree() / "notes.txt"), "my notes\n");
  EXPECT_EQ(read(tree() / "src" / "model" / "scratch.txt"), "scratch\n");
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().find(".tree.gcompile-"), std::string::npos) << "staging left behind";
  }

  // A generated file edited by hand: refused, named, and left as edited.
  const fs::path config = tree() / "src" / "config.hpp";
  const std::string edited = read(config) + "// my change\n";
  write(config, edited);
  const Outcome refused = generate(kSmallTraining, false);
  EXPECT_EQ(refused.status, 1);
  EXPECT_NE(refused.output.find("src/config.hpp"), std::string::npos) << refused.output;
  EXPECT_EQ(read(config), edited);
  EXPECT_EQ(read(tree() / "notes.txt"), "my notes\n");

  // A directory gcompile did not write is never replaced.
  const fs::path mine = dir_ / "mine";
  write(mine / "data.txt", "precious\n");
  const Outcome foreign = sh(std::string(GCOMPILE_BINARY) + " " + spec_path().string() + " --no-build -o " +
                             mine.string());
  EXPECT_EQ(foreign.status, 1);
  EXPECT_NE(foreign.output.find("not a tree generated by gcompile"), std::string::npos) << foreign.output;
  EXPECT_EQ(read(mine / "data.txt"), "precious\n");
}

// `gcompile diff`: an init ablation changes init constants only; gating adds
// the gate's code and tensors.
TEST_F(Tree, DiffShowsExactlyWhatAnAblationChanges) {
  write_corpus(dir_ / "corpus.txt");
  std::ofstream(dir_ / "a.toml") << kSmallTraining;
  std::string gamma1 = std::string(kSmallTraining) + "\n[init]\ngamma = 1.0\n";
  std::ofstream(dir_ / "b.toml") << gamma1;
  const Outcome d = sh("cd " + dir_.string() + " && " + GCOMPILE_BINARY + " diff a.toml b.toml");
  ASSERT_EQ(d.status, 0) << d.output;
  std::vector<std::string> changed;
  std::istringstream lines(d.output);
  for (std::string line; std::getline(lines, line);) {
    if ((line[0] == '+' || line[0] == '-') && line.rfind("+++", 0) != 0 && line.rfind("---", 0) != 0) {
      changed.push_back(line);
    }
  }
  // Changed lines: the init σ rows of plan_init.cpp ("    0.125,  // NAME"),
  // gamma in spec.resolved.toml, the spec hash in experiment.cpp and the
  // README's spec line.
  for (const auto& line : changed) {
    const bool init_row = line.find(",  // model.") != std::string::npos || line.find(",  // lm_head.") != std::string::npos;
    const bool gamma = line.find("gamma = ") != std::string::npos;
    // The spec hash (clang-format puts the long literal on its own line).
    const bool hash_literal = line.size() == 1 + 4 + 1 + 64 + 2 && line.find("    \"") == 1 && line.back() == ';';
    const bool provenance = hash_literal || line.find("kSpecHash") != std::string::npos ||
                            line.find("SHA-256") != std::string::npos || line.find("b.toml") != std::string::npos ||
                            line.find("a.toml") != std::string::npos;
    EXPECT_TRUE(init_row || gamma || provenance) << line;
  }
  EXPECT_GT(changed.size(), 10u);

  std::string ungated = kSmallTraining;
  ungated.replace(ungated.find("\"headwise\""), 10, "\"none\"");
  std::ofstream(dir_ / "c.toml") << ungated;
  const Outcome g = sh("cd " + dir_.string() + " && " + GCOMPILE_BINARY + " diff c.toml a.toml");
  ASSERT_EQ(g.status, 0) << g.output;
  // The gate's calls appear as added lines (the ungated tree pruned them).
  bool gate_call_added = false;
  std::istringstream diff_lines(g.output);
  for (std::string line; std::getline(diff_lines, line);) {
    if (line.rfind("+", 0) == 0 && line.find("ops_.template gate_forward<kGatedAttention>(") != std::string::npos) {
      gate_call_added = true;
    }
  }
  EXPECT_TRUE(gate_call_added) << g.output;
  // Files that differ only in their provenance banner do not appear.
  EXPECT_EQ(g.output.find("src/cpu/attention.hpp"), std::string::npos) << "banner-only hunks are hidden";
  EXPECT_NE(g.output.find("self_attn.gate_proj.weight"), std::string::npos);
}

}  // namespace

namespace {

// `gcompile sweep`: one spec per grid point, each extending the base; the
// trees of a γ sweep differ only in the two files that hold the experiment's
// identity and init σ (so their builds share every other object); bad input
// is refused before anything is generated, and no spec is overwritten.
class Sweep : public gc::test::TreeTest {};

TEST_F(Sweep, WritesOneSpecPerPointAndTreesThatDifferOnlyWhereTheyMust) {
  std::string base = gc::test::minimal_spec_sections();
  base.replace(base.find("name = \"t\""), 10, "name = \"base\"");
  std::ofstream(dir_ / "base.toml") << base;
  const std::string gcompile = std::string(GCOMPILE_BINARY);
  const Outcome out = sh("cd " + dir_.string() + " && " + gcompile +
                         " sweep base.toml --set init.gamma=0.5,1 --set experiment.seed=1,2 -o sw --no-build");
  ASSERT_EQ(out.status, 0) << out.output;
  for (const char* name : {"base-gamma0.5-seed1", "base-gamma0.5-seed2", "base-gamma1-seed1", "base-gamma1-seed2"}) {
    EXPECT_TRUE(fs::exists(dir_ / "sw" / (std::string(name) + ".toml"))) << name;
    EXPECT_TRUE(fs::exists(dir_ / "generated" / name / "src" / "experiment.cpp")) << name;
  }
  const std::string spec = sh("cat " + (dir_ / "sw" / "base-gamma1-seed2.toml").string()).output;
  EXPECT_NE(spec.find("extends = '../base.toml'"), std::string::npos) << spec;
  EXPECT_NE(spec.find("[init]\ngamma = 1\n"), std::string::npos) << spec;
  EXPECT_NE(spec.find("seed = 2\n"), std::string::npos) << spec;
  EXPECT_TRUE(fs::exists(dir_ / "sw" / "sweep.json"));

  // Every source is identical across the points but these two files (banners
  // name the spec, but ccache compares preprocessed sources, so comments do
  // not count; CMakeLists.txt differs in the project name only).
  const Outcome diff = sh("cd " + (dir_ / "generated").string() +
                          " && diff -rq -I 'Generated by gcompile' -x manifest.json -x README.md -x spec.resolved.toml "
                          "-x CMakeLists.txt base-gamma0.5-seed1 base-gamma1-seed2");
  EXPECT_EQ(diff.output,
            "Files base-gamma0.5-seed1/src/experiment.cpp and base-gamma1-seed2/src/experiment.cpp differ\n"
            "Files base-gamma0.5-seed1/src/plan_init.cpp and base-gamma1-seed2/src/plan_init.cpp differ\n");

  // So do the points of a sweep over the run's schedule: the learning rate, the step count (and
  // with it the warm-up and the cosine heatmaps' steps) and a metric's cadence live in the same
  // two files, and reuse the first sweep's specialization (the code group's cache key is theirs).
  const Outcome schedule = sh("cd " + dir_.string() + " && " + gcompile +
                              " sweep base.toml --set optim.lr=0.001,0.002 --set train.steps=10,40 "
                              "--set metrics.grad_norm.interval=1,5 -o sched --no-build");
  ASSERT_EQ(schedule.status, 0) << schedule.output;
  const std::string a = "base-lr0.001-steps10-interval1", b = "base-lr0.002-steps40-interval5";
  ASSERT_TRUE(fs::exists(dir_ / "generated" / a / "src" / "experiment.cpp")) << schedule.output;
  const Outcome schedule_diff = sh("cd " + (dir_ / "generated").string() +
                                   " && diff -rq -I 'Generated by gcompile' -x manifest.json -x README.md "
                                   "-x spec.resolved.toml -x CMakeLists.txt " + a + " " + b);
  EXPECT_EQ(schedule_diff.output, "Files " + a + "/src/experiment.cpp and " + b + "/src/experiment.cpp differ\n") <<
      "the step count's heatmap steps are in plan_init.cpp only when the spec lists image_steps";
  const std::string experiment = gc::test::read_text(dir_ / "generated" / b / "src" / "experiment.cpp");
  for (const char* literal : {"kLr = 0.002;", "kTotalSteps = 40;", "kGradNormEvery = 5;"}) {
    EXPECT_NE(experiment.find(literal), std::string::npos) << literal << " in\n" << experiment;
  }

  // An unknown key is reported at its line in the point's spec; nothing is generated.
  const Outcome bad = sh("cd " + dir_.string() + " && " + gcompile +
                         " sweep base.toml --set init.gama=0.5,1 -o bad --no-build");
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("bad/base-gama0.5.toml:8:1: error: unknown key 'gama' in [init]"), std::string::npos)
      << bad.output;
  EXPECT_FALSE(fs::exists(dir_ / "generated" / "base-gama0.5"));
  // A point spec the user changed is never overwritten.
  std::ofstream(dir_ / "sw" / "base-gamma1-seed1.toml", std::ios::app) << "# my note\n";
  const Outcome again = sh("cd " + dir_.string() + " && " + gcompile +
                           " sweep base.toml --set init.gamma=0.5,1 --set experiment.seed=1,2 -o sw --no-build");
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.output.find("base-gamma1-seed1.toml: exists with other content"), std::string::npos) << again.output;
  EXPECT_EQ(sh("cd " + dir_.string() + " && " + gcompile + " sweep base.toml -o x").status, 2);
  // --programs as gcompile SPEC takes it (README's sweep builds and trains with --programs train,
  // Docs.Examples), refused where it cannot hold.
  const std::string sweep = "cd " + dir_.string() + " && " + gcompile + " sweep base.toml --set init.gamma=0.5 -o p ";
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {"--programs trian", "--programs needs a comma-separated list of train, analyze"},
           {"--programs train,train", "--programs needs a comma-separated list"},
           {"--programs train --no-build", "--programs and --no-build contradict each other"},
           {"--train --programs analyze", "--train needs train among --programs"},
           {"--cpu-only --programs train,parity", "--programs parity needs the CUDA backend"}}) {
    const Outcome refused = sh(sweep + args);
    EXPECT_EQ(refused.status, 2) << args;
    EXPECT_NE(refused.output.find(says), std::string::npos) << args << ": " << refused.output;
  }
  EXPECT_FALSE(fs::exists(dir_ / "p"));
}

// Issue 13, item 1: the CUDA kernels are specialized too, so an ablation's diff points at the
// kernel files it changes. ε is a literal of the RMSNorm kernel file; head_dim (and with it the
// attention scale) is the attention kernel file's shape; each file's header names the values.
std::vector<std::string> diff_files(const std::string& diff) {
  std::vector<std::string> files;
  std::istringstream lines(diff);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("diff -ruN", 0) == 0) files.push_back(line.substr(line.rfind(" b/") + 3));
  }
  return files;
}

bool has_line(const std::string& diff, const std::string& line) {
  std::istringstream lines(diff);
  for (std::string l; std::getline(lines, l);) {
    if (l == line) return true;
  }
  return false;
}

bool lists(const std::vector<std::string>& files, const std::string& file) {
  return std::find(files.begin(), files.end(), file) != files.end();
}

TEST_F(Tree, DiffOfEpsAndHeadDimAblationsShowsTheChangedKernelConstants) {
  write_corpus(dir_ / "corpus.txt");
  const auto with_model_keys = [](const std::string& keys) {
    std::string spec = kSmallTraining;
    const std::string anchor = "gated_attention = \"headwise\"\n";
    spec.insert(spec.find(anchor) + anchor.size(), keys);
    return spec;
  };
  // Three trees: the base (ε 1e-5, head_dim 64), its ε ablation and its head_dim ablation (the
  // base's second generation comes from the specialization cache).
  std::ofstream(dir_ / "eps5.toml") << with_model_keys("norm_eps = 1e-5\nhead_dim = 64\n");
  std::ofstream(dir_ / "eps12.toml") << with_model_keys("norm_eps = 1e-12\nhead_dim = 64\n");
  const Outcome eps = sh("cd " + dir_.string() + " && " + GCOMPILE_BINARY + " diff eps5.toml eps12.toml");
  ASSERT_EQ(eps.status, 0) << eps.output;
  const auto eps_files = diff_files(eps.output);
  EXPECT_TRUE(lists(eps_files, "src/cuda/rmsnorm.cuh")) << eps.output;
  EXPECT_FALSE(lists(eps_files, "src/cuda/attention.cuh")) << eps.output;
  EXPECT_TRUE(has_line(eps.output, "+  static constexpr float kEps = 1e-12f;")) << eps.output;
  EXPECT_TRUE(has_line(eps.output, "-  static constexpr float kEps = 1e-5f;")) << eps.output;
  // The banner names the new ε (the heads are there for QK-norm over the stacked projection).
  EXPECT_NE(eps.output.find(" // Specialized for: model.d_model = 32, model.head_dim = 64, model.n_heads = 4,\n"
                            "-//   model.n_kv_heads = 4, model.norm_eps = 1e-5.\n"
                            "+//   model.n_kv_heads = 4, model.norm_eps = 1e-12."),
            std::string::npos)
      << eps.output;

  std::ofstream(dir_ / "hd128.toml") << with_model_keys("norm_eps = 1e-5\nhead_dim = 128\n");
  const Outcome hd = sh("cd " + dir_.string() + " && " + GCOMPILE_BINARY + " diff eps5.toml hd128.toml");
  ASSERT_EQ(hd.status, 0) << hd.output;
  const auto hd_files = diff_files(hd.output);
  for (const char* kernel : {"src/cuda/attention.cuh", "src/cuda/rope.cuh", "src/cuda/gate.cuh", "src/cuda/rmsnorm.cuh"}) {
    EXPECT_TRUE(lists(hd_files, kernel)) << kernel << "\n" << hd.output;
  }
  EXPECT_FALSE(lists(hd_files, "src/cuda/cross_entropy.cuh")) << hd.output;
  EXPECT_TRUE(has_line(hd.output, "-  static constexpr int kHeadDim = 64;")) << hd.output;
  EXPECT_TRUE(has_line(hd.output, "+  static constexpr int kHeadDim = 128;")) << hd.output;
  // 1/sqrt(head_dim): 0.125 → 0.0883883…
  EXPECT_TRUE(has_line(hd.output, "-  static constexpr float kScale = 0.125f;  // s = scale · q·k")) << hd.output;
}

}  // namespace
