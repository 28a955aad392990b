// `gcompile export` end to end: a trained checkpoint exported for each class
// (LlamaForCausalLM, Qwen2MoeForCausalLM, custom GcompileForCausalLM for dense
// and MoE), loaded by transformers from the project venv, gives the tree's own
// logits (probe --checkpoint) within 1e-4; the tokenizer encodes the corpus as
// the data pipeline did; and every bad input is a clear error that touches
// nothing. The log-likelihoods lm-evaluation-harness would compute on the
// export (docs/eval's offline task) equal the reference model's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "runtime/safetensors.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

using gc::test::Outcome;
using gc::test::in_ci;
using gc::test::sh;

const std::string kPython = std::string(GCOMPILE_SOURCE_DIR) + "/.venv/bin/python";
const std::string kCorpus = "/usr/share/doc/python3.11/html/_sources/tutorial";

bool venv_ready() {
  static const bool ok = sh(kPython + " -c 'import transformers, safetensors, sentencepiece, torch'").status == 0;
  return ok;
}

// A small text model on the Python tutorial (a fast tokenizer), trained 12 steps.
std::string spec(const std::string& name, const std::string& model, const std::string& extra = "") {
  return "[experiment]\nname = \"" + name + "\"\nseed = 7\n\n[model]\nvocab_size = 512\nd_model = 64\n" +
         "n_heads = 4\nn_kv_heads = 2\nd_ff = 128\nnorm_eps = 1e-5\n" + model +
         "\n[init]\ngamma = 0.5\n\n[optim]\nlr = 3e-3\n\n[train]\nseq_len = 32\nglobal_batch = 4\n"
         "micro_batch = 4\nsteps = 12\nprecision = \"fp32\"\ncheckpoint_every = 12\nlog_every = 4\n\n"
         "[data]\nformat = \"text\"\ntrain = \"" + kCorpus + "\"\ntext_extensions = [\".txt\"]\n"
         "tokenizer_type = \"bpe\"\nval_fraction = 0.05\n" + extra;
}

class Export : public gc::test::TreeTest {
 protected:
  void SetUp() override {
    gc::test::TreeTest::SetUp();
    programs_ = "train,probe";  // the programs these tests run: the trees build nothing else (CI time)
    if (!venv_ready()) {
      if (in_ci()) {
        FAIL() << "CI is set and " << kPython << " lacks transformers/safetensors/sentencepiece/torch: "
               << "scripts/setup creates that venv, so the export check must not be skipped in CI";
      }
      GTEST_SKIP() << kPython << " is missing or incomplete (run scripts/setup)";
    }
  }

  fs::path run() const { return dir_ / "run"; }

  // Generates, builds and trains the spec; the run is dir_/run.
  void train(const std::string& spec_text) {
    const Outcome gen = generate(spec_text);
    ASSERT_EQ(gen.status, 0) << gen.output;
    const Outcome t = sh((tree() / "train").string() + " --out " + run().string());
    ASSERT_EQ(t.status, 0) << t.output;
  }

  Outcome export_hf(const std::string& args) {
    return sh(std::string(GCOMPILE_BINARY) + " export " + args);
  }

  // Exports the run, probes its checkpoint and checks the export in transformers.
  void expect_matches(const std::string& architecture, const std::string& flags = "",
                      const std::string& check_flags = "") {
    const fs::path out = dir_ / ("hf" + std::to_string(exports_++));
    const Outcome e = export_hf(run().string() + " --hf " + out.string() + flags);
    ASSERT_EQ(e.status, 0) << e.output;
    EXPECT_NE(e.output.find(architecture), std::string::npos) << e.output;
    const fs::path probe = dir_ / "probe.safetensors";
    if (!fs::exists(probe)) {
      const Outcome p = sh((tree() / "probe").string() + " " + probe.string() + " --checkpoint " + run().string());
      ASSERT_EQ(p.status, 0) << p.output;
    }
    const Outcome c = sh(kPython + " " + GCOMPILE_SOURCE_DIR + "/tests/export/check_export.py " + out.string() + " " +
                         probe.string() + " --expect " + architecture + " " + check_flags);
    EXPECT_EQ(c.status, 0) << c.output;
    EXPECT_NE(c.output.find(": ok"), std::string::npos) << c.output;
  }

  // lm-evaluation-harness's log-likelihood path over docs/eval's task on the
  // export, checked against the reference model on the tree. Returns loglikelihood.py's report.
  std::string expect_loglikelihoods_match(const fs::path& export_dir) {
    const Outcome l = sh(kPython + " " + GCOMPILE_SOURCE_DIR + "/tests/export/loglikelihood.py " + export_dir.string() +
                         " " + tree().string() + " " + GCOMPILE_SOURCE_DIR + "/docs/eval/python_docs_continuation.jsonl");
    EXPECT_EQ(l.status, 0) << l.output;
    EXPECT_NE(l.output.find("40 items"), std::string::npos) << l.output;
    return l.output;
  }

  // lm-evaluation-harness itself (.venv's lm_eval, offline) on docs/eval's task: it loads the
  // export as an `hf` model and scores the 40 items; its accuracy must be the one the
  // log-likelihoods of loglikelihood.py give (`loglikelihoods`: its report on the same export).
  void expect_lm_eval_agrees(const fs::path& export_dir, const std::string& loglikelihoods) {
    std::smatch ours;
    ASSERT_TRUE(std::regex_search(loglikelihoods, ours, std::regex(R"(acc (\d\.\d+), acc_norm (\d\.\d+))")))
        << loglikelihoods;
    const fs::path results = dir_ / "lm_eval";
    const Outcome e = sh("cd " + std::string(GCOMPILE_SOURCE_DIR) + " && HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 " +
                         GCOMPILE_SOURCE_DIR + "/.venv/bin/lm_eval --model hf --model_args pretrained=" +
                         export_dir.string() + ",trust_remote_code=True,add_bos_token=True --device cpu" +
                         " --include_path docs/eval --tasks gcompile_python_docs --output_path " + results.string());
    ASSERT_EQ(e.status, 0) << e.output;
    const Outcome r = sh(kPython + " -c \"import glob, json, sys; f = sorted(glob.glob(sys.argv[1] + '/**/results_*.json', "
                         "recursive=True))[-1]; t = json.load(open(f))['results']['gcompile_python_docs']; "
                         "print('acc %.3f, acc_norm %.3f' % (t['acc,none'], t['acc_norm,none']))\" " + results.string());
    ASSERT_EQ(r.status, 0) << r.output << e.output;
    EXPECT_NE(r.output.find("acc " + ours[1].str() + ", acc_norm " + ours[2].str()), std::string::npos)
        << "lm_eval: " << r.output << "loglikelihood.py: " << loglikelihoods;
  }

  // Importing the export (probe --init-from, the same loader as train
  // --init-from) gives back exactly the checkpoint's weights and logits.
  void expect_import_round_trips(const fs::path& export_dir) {
    const fs::path from_checkpoint = dir_ / "probe.safetensors", from_export = dir_ / "probe_import.safetensors";
    const Outcome p = sh((tree() / "probe").string() + " " + from_export.string() + " --init-from " + export_dir.string());
    ASSERT_EQ(p.status, 0) << p.output;
    const auto a = gc::rt::read_safetensors(from_checkpoint.string());
    const auto b = gc::rt::read_safetensors(from_export.string());
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    for (const auto& t : a.tensors()) {
      const auto& u = b.tensor(t.name);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(a.bytes(t)), t.nbytes()),
                std::string(reinterpret_cast<const char*>(b.bytes(u)), u.nbytes()))
          << t.name << " differs bitwise";
    }
  }

  // A copy of export `from` named `name`, its weights `t` (name -> numpy array) changed by `edit` (Python).
  fs::path edited_copy(const fs::path& from, const std::string& name, const std::string& edit) {
    const fs::path to = dir_ / name;
    fs::copy(from, to);
    const Outcome e = sh(kPython + " -c \"from safetensors.numpy import load_file, save_file; p='" +
                         (to / "model.safetensors").string() + "'; t=load_file(p); " + edit +
                         "; save_file(t, p, metadata={'format':'pt'})\"");
    EXPECT_EQ(e.status, 0) << e.output;
    return to;
  }

  int exports_ = 0;
};

// The Llama-shaped model, with metrics (heatmaps for TensorBoard); the error
// test uses the same shape so its tree compiles from ccache.
const char* const kLlamaModel = "arch = \"dense\"\nn_layers = 2\ntie_embeddings = true\n";
const char* const kLlamaMetrics =
    "\n[metrics.stable_rank]\ninterval = 4\n\n[metrics.cosine_similarity]\ninterval = 6\nimage_steps = [0, 12]\n";

// TensorBoard: the event file mirrors metrics.jsonl (scalars and heatmap
// images), still reads with a torn last record, and after a resume holds the
// resumed run's whole history once.
TEST_F(Export, TensorBoardEventsMirrorMetricsAcrossResumeAndTruncation) {
  train(spec("export_llama", kLlamaModel, kLlamaMetrics));
  const std::string check = kPython + " " + GCOMPILE_SOURCE_DIR + "/tests/export/check_tensorboard.py ";
  Outcome c = sh(check + run().string() + " --truncate 7");
  EXPECT_EQ(c.status, 0) << c.output;
  EXPECT_NE(c.output.find(" images: ok"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find(" 0 images"), std::string::npos) << c.output;

  const fs::path resumed = dir_ / "resumed";
  Outcome t = sh((tree() / "train").string() + " --steps 6 --out " + resumed.string());
  ASSERT_EQ(t.status, 0) << t.output;
  t = sh((tree() / "train").string() + " --resume " + resumed.string());
  ASSERT_EQ(t.status, 0) << t.output;
  c = sh(check + resumed.string());
  EXPECT_EQ(c.status, 0) << c.output;
}

TEST_F(Export, LlamaCompatibleSpecLoadsAsLlamaWithItsTokenizer) {
  train(spec("export_llama", kLlamaModel, kLlamaMetrics));
  expect_matches("LlamaForCausalLM", "", "--corpus " + kCorpus + " --files 17");
  EXPECT_FALSE(fs::exists(dir_ / "hf0" / "modeling_gcompile.py")) << "plain Llama needs no custom code";
  expect_loglikelihoods_match(dir_ / "hf0");
  // bf16 weights, computed in bf16 by transformers: the same model up to bf16 rounding.
  expect_matches("LlamaForCausalLM", " --dtype bf16", "--tol 5e-2");
  // A bf16 export imports too (widened to fp32).
  const Outcome p = sh((tree() / "probe").string() + " " + (dir_ / "bf16.safetensors").string() + " --init-from " +
                       (dir_ / "hf1").string());
  EXPECT_EQ(p.status, 0) << p.output;
}

TEST_F(Export, Qwen2MoeCompatibleSpecLoadsAsQwen2Moe) {
  train(spec("export_qwen", "arch = \"moe\"\nn_layers = 3\n",
             "\n[moe]\nn_dense_layers = 1\nn_experts = 4\ntop_k = 2\nn_shared_experts = 1\nexpert_d_ff = 32\n"
             "shared_d_ff = 32\nrouter_scoring = \"softmax\"\nload_balance = \"aux_loss\"\nnorm_topk_prob = true\n"));
  expect_matches("Qwen2MoeForCausalLM");
  expect_import_round_trips(dir_ / "hf0");
  // A Qwen2-MoE model with a real attention bias is not one this tree computes.
  const fs::path biased = edited_copy(dir_ / "hf0", "biased", "t['model.layers.1.self_attn.k_proj.bias'][3]=0.5");
  const Outcome bad = sh((tree() / "train").string() + " --init-from " + biased.string() + " --out " +
                         (dir_ / "biased_run").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("tensor 'model.layers.1.self_attn.k_proj.bias': is not zero"), std::string::npos)
      << bad.output;
}

TEST_F(Export, EveryDenseFeatureLoadsThroughCustomCode) {
  train(spec("export_custom", "arch = \"dense\"\nn_layers = 2\ntie_embeddings = true\nnorm_placement = \"sandwich\"\n"
                              "embedding_norm = true\nqk_norm = true\ngated_attention = \"headwise\"\n"
                              "embedding_scale = \"sqrt(d_model)\"\nlogit_scale = 0.5\nattn_scale = \"1/head_dim\"\n"));
  expect_matches("GcompileForCausalLM");
  EXPECT_TRUE(fs::exists(dir_ / "hf0" / "modeling_gcompile.py"));
  EXPECT_TRUE(fs::exists(dir_ / "hf0" / "configuration_gcompile.py"));
  expect_import_round_trips(dir_ / "hf0");
  expect_matches("GcompileForCausalLM", " --dtype bf16", "--tol 5e-2");  // the custom code computing in bf16

  // train --init-from: a new run that starts where the exported one ended (its
  // loss at step 0 on the validation batches is the source run's last).
  const fs::path continued = dir_ / "continued";
  const Outcome t = sh((tree() / "train").string() + " --init-from " + (dir_ / "hf0").string() + " --steps 2 --out " +
                       continued.string());
  ASSERT_EQ(t.status, 0) << t.output;
  EXPECT_NE(t.output.find("initialized from"), std::string::npos) << t.output;
  double source_val = 0.0, initial = -1.0;
  for (const auto& r : gc::test::read_jsonl(run() / "metrics.jsonl")) {
    if (r.contains("val_loss")) source_val = r["val_loss"].get<double>();
  }
  for (const auto& r : gc::test::read_jsonl(continued / "metrics.jsonl")) {
    if (r.value("metric", "") == "initial_loss") initial = r["value"].get<double>();
  }
  EXPECT_EQ(initial, source_val);
  // --init-from starts a run; it cannot be combined with --resume.
  EXPECT_EQ(sh((tree() / "train").string() + " --init-from " + (dir_ / "hf0").string() + " --resume " +
               continued.string()).status, 2);
}

TEST_F(Export, MoeWithSigmoidRouterAndSelectionBiasesLoadsThroughCustomCode) {
  // aux_free: the trained selection biases change which experts run, so the
  // logits only match when the export carries them.
  train(spec("export_custom_moe", "arch = \"moe\"\nn_layers = 3\ngated_attention = \"elementwise\"\n",
             "\n[moe]\nlayer_interval = 2\nn_experts = 4\ntop_k = 2\nexpert_d_ff = 32\nrouter_scoring = \"sigmoid\"\n"
             "load_balance = \"aux_free\"\n"));
  expect_matches("GcompileForCausalLM");
  expect_import_round_trips(dir_ / "hf0");
  // Selection biases of the wrong length are refused, naming the layer.
  const fs::path cut = edited_copy(dir_ / "hf0", "cut",
                                   "k='model.layers.2.mlp.router.selection_bias'; t[k]=t[k][:3].copy()");
  const Outcome bad = sh((tree() / "probe").string() + " " + (dir_ / "cut.safetensors").string() + " --init-from " +
                         cut.string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.output.find("layer 2's selection bias has 3 values for 4 experts"), std::string::npos) << bad.output;
}

TEST_F(Export, TinySpecExportsWithCustomCode) {
  std::ifstream in(std::string(GCOMPILE_SOURCE_DIR) + "/specs/tiny.toml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const Outcome gen = generate(text);
  ASSERT_EQ(gen.status, 0) << gen.output;
  const Outcome t = sh((tree() / "train").string() + " --steps 4 --no-metrics --out " + run().string());
  ASSERT_EQ(t.status, 0) << t.output;
  expect_matches("GcompileForCausalLM");
  expect_lm_eval_agrees(dir_ / "hf0", expect_loglikelihoods_match(dir_ / "hf0"));
}

TEST_F(Export, BadInputsAreClearErrorsThatTouchNothing) {
  train(spec("export_errors", kLlamaModel, kLlamaMetrics));
  // An existing, non-empty output directory is never replaced.
  fs::create_directories(dir_ / "taken");
  std::ofstream(dir_ / "taken" / "mine.txt") << "user data";
  Outcome e = export_hf(run().string() + " --hf " + (dir_ / "taken").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("already exists and is not an empty directory"), std::string::npos) << e.output;
  EXPECT_TRUE(fs::exists(dir_ / "taken" / "mine.txt"));

  e = export_hf((dir_ / "nowhere").string() + " --hf " + (dir_ / "x").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("no such checkpoint or run directory"), std::string::npos) << e.output;
  e = export_hf(run().string() + " --hf " + (dir_ / "x").string() + " --dtype fp16");
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.output.find("--dtype must be fp32 or bf16"), std::string::npos) << e.output;
  e = export_hf(run().string());
  EXPECT_EQ(e.status, 2);
  EXPECT_NE(e.output.find("--hf OUT is required"), std::string::npos) << e.output;

  // A damaged checkpoint is named.
  const fs::path ckpt = run() / "checkpoints" / "step_000012";
  fs::copy(run(), dir_ / "damaged", fs::copy_options::recursive);
  {
    std::fstream f(dir_ / "damaged" / "checkpoints" / "step_000012" / "model.safetensors",
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-4, std::ios::end);
    f.write("\x01\x02\x03\x04", 4);
  }
  e = export_hf((dir_ / "damaged").string() + " --hf " + (dir_ / "x").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("model.safetensors"), std::string::npos) << e.output;

  // The run's spec must be the checkpoint's.
  fs::copy(run(), dir_ / "respecced", fs::copy_options::recursive);
  const std::string resolved = gc::test::read_text(run() / "spec.resolved.toml");
  std::string changed = resolved;
  const auto at = changed.find("seed = 7");
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, 8, "seed = 8");
  std::ofstream(dir_ / "respecced" / "spec.resolved.toml") << changed;
  e = export_hf((dir_ / "respecced").string() + " --hf " + (dir_ / "x").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("this checkpoint belongs to another spec"), std::string::npos) << e.output;

  // A text run whose tokenizer is gone: the error says what to pass.
  fs::remove(run() / "tokenizer.model");
  e = export_hf(run().string() + " --hf " + (dir_ / "x").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("pass --tokenizer FILE"), std::string::npos) << e.output;
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  // A tokenizer that is not a SentencePiece model.
  e = export_hf(run().string() + " --hf " + (dir_ / "x").string() + " --tokenizer " + spec_path().string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("spec.toml: not a SentencePiece model"), std::string::npos) << e.output;
  // --init-from a directory that is not an export.
  Outcome init = sh((tree() / "train").string() + " --init-from " + (run() / "checkpoints").string() + " --out " +
                    (dir_ / "not_export").string());
  EXPECT_EQ(init.status, 1);
  EXPECT_NE(init.output.find("not a Hugging Face model directory (no config.json)"), std::string::npos) << init.output;
  EXPECT_FALSE(fs::exists(dir_ / "not_export" / "checkpoints"));

  // The names the atomic swap uses beside OUT are never taken over.
  fs::create_directories(dir_ / "y.tmp");
  std::ofstream(dir_ / "y.tmp" / "mine.txt") << "user data";
  e = export_hf(run().string() + " --hf " + (dir_ / "y").string() + " --tokenizer " + (tree() / "tokenizer.model").string());
  EXPECT_EQ(e.status, 1);
  EXPECT_NE(e.output.find("y.tmp: exists"), std::string::npos) << e.output;
  EXPECT_TRUE(fs::exists(dir_ / "y.tmp" / "mine.txt"));
  EXPECT_FALSE(fs::exists(dir_ / "y"));
  // "OUT/" is OUT; the output's parent directories are created.
  e = export_hf(run().string() + " --hf " + (dir_ / "slash").string() + "/ --tokenizer " +
                (tree() / "tokenizer.model").string());
  EXPECT_EQ(e.status, 0) << e.output;
  EXPECT_TRUE(fs::exists(dir_ / "slash" / "config.json"));
  const fs::path nested = dir_ / "exports" / "x";
  e = export_hf(run().string() + " --hf " + nested.string() + " --tokenizer " + (tree() / "tokenizer.model").string());
  EXPECT_EQ(e.status, 0) << e.output;
  EXPECT_TRUE(fs::exists(nested / "tokenizer.model"));
}

}  // namespace
