// The generated model against outside references. Each test writes a spec into
// a temporary directory, runs gcompile (generate + build, about 40 s on two
// cores) and the tree's ./probe, which writes the initial parameters and one
// batch's logits, loss and gradients to a safetensors file. Then:
//   - an independent PyTorch model (reference_model.py, written from the model's
//     description, run with Debian's python3-torch) recomputes logits, loss and
//     every gradient in fp32 and fp64 and must agree to 1e-5 relative;
//   - the initial weights must have the plan's effective std (normal,
//     trunc_normal, uniform; depth scaling), mean ~0, norm gains exactly 1, and
//     be byte-identical whatever the thread count.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "common/diagnostics.hpp"
#include "plan/plan.hpp"
#include "runtime/safetensors.hpp"
#include "spec/spec.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

using gc::test::Outcome;
using gc::test::sh;

// Debian's python3 (python3-torch); GCOMPILE_TEST_PYTHON overrides it (the
// test below uses that to show a missing torch fails in CI).
const std::string kPython = [] {
  const char* p = std::getenv("GCOMPILE_TEST_PYTHON");
  return std::string(p != nullptr && *p != '\0' ? p : "/usr/bin/python3");
}();

bool torch_available() {
  static const bool ok = sh(kPython + " -c 'import torch, numpy'").status == 0;
  return ok;
}

class Reference : public gc::test::TreeTest {
 protected:
  void SetUp() override {
    gc::test::TreeTest::SetUp();
    programs_ = "probe";  // the only program these tests run: the tree builds nothing else (CI time)
  }
  // Runs ./probe ARGS with an optional environment prefix ("OMP_NUM_THREADS=1").
  Outcome probe(const std::string& args, const std::string& env = "") {
    return sh((env.empty() ? "" : env + " ") + (tree() / "probe").string() + " " + args);
  }
  Outcome reference(const fs::path& out) {
    return sh(kPython + " " + GCOMPILE_SOURCE_DIR + "/tests/reference/reference_model.py " +
              tree().string() + " " + out.string());
  }

  // gcompile, probe, the PyTorch reference: all must succeed, with the norm
  // gains as initialized (all 1) and moved off 1 (so their use is compared too).
  void compare_with_pytorch(const std::string& spec_text) {
    if (!torch_available()) {
      // In CI the oracle must run: scripts/setup installs python3-torch, so a
      // missing torch is a broken setup, not a reason to skip.
      if (gc::test::in_ci()) {
        FAIL() << "CI is set and " << kPython << " cannot import torch and numpy: the PyTorch oracle must not be "
               << "skipped in CI (scripts/setup installs python3-torch)";
      }
      GTEST_SKIP() << kPython << " cannot import torch (apt install python3-torch)";
    }
    const Outcome gen = generate(spec_text);
    ASSERT_EQ(gen.status, 0) << gen.output;
    for (const std::string flags : {"", " --perturb-norms"}) {
      SCOPED_TRACE("probe" + flags);
      const fs::path out = dir_ / (flags.empty() ? "probe.safetensors" : "probe_perturbed.safetensors");
      const Outcome p = probe(out.string() + flags);
      ASSERT_EQ(p.status, 0) << p.output;
      const Outcome ref = reference(out);
      std::printf("probe%s:\n%s", flags.c_str(), ref.output.c_str());
      EXPECT_EQ(ref.status, 0) << ref.output;
      EXPECT_NE(ref.output.find(": ok"), std::string::npos) << ref.output;
    }
  }
};

// Every feature that adds tensors or code paths: GQA, QK-norm, embedding norm,
// sandwich norms, elementwise gate, untied head, non-default RoPE base and
// forward scales (attn_scale stays the default 1/sqrt(head_dim)).
const char* const kAllFeatures = R"toml([experiment]
name = "ref_all_features"
seed = 11

[model]
vocab_size = 97
d_model = 24
n_layers = 2
n_heads = 4
n_kv_heads = 2
head_dim = 8
d_ff = 40
qk_norm = true
embedding_norm = true
norm_placement = "sandwich"
gated_attention = "elementwise"
tie_embeddings = false
embedding_scale = "sqrt(d_model)"
logit_scale = 0.5
rope_theta = 500.0
norm_eps = 1e-6

[optim]
lr = 1e-3

[train]
seq_len = 16
global_batch = 2
steps = 2
precision = "fp32"

[data]
format = "synthetic"
)toml";

// Headwise gate with tied embeddings; multi-query attention and an explicit attention scale.
const char* const kHeadwiseTied = R"toml([experiment]
name = "ref_headwise_tied"
seed = 5

[model]
vocab_size = 97
d_model = 24
n_layers = 2
n_heads = 4
n_kv_heads = 1
d_ff = 40
gated_attention = "headwise"
tie_embeddings = true
attn_scale = 0.3

[init]
gamma = 0.75

[optim]
lr = 1e-3

[train]
seq_len = 16
global_batch = 2
steps = 2
precision = "fp32"

[data]
format = "synthetic"
)toml";

TEST_F(Reference, MatchesPyTorchWithEveryFeature) { compare_with_pytorch(kAllFeatures); }

TEST_F(Reference, MatchesPyTorchWithHeadwiseGateAndTiedEmbeddings) { compare_with_pytorch(kHeadwiseTied); }

// Mixture of experts: a dense first layer, then MoE layers with sigmoid
// routing, renormalized top-k weights, two shared experts and both balancing
// losses, per batch and per sequence (large coefficients, so their gradients are
// visible in the router's).
const char* const kMoe = R"toml([experiment]
name = "ref_moe"
seed = 11

[model]
arch = "moe"
vocab_size = 97
d_model = 24
n_layers = 3
n_heads = 4
n_kv_heads = 2
d_ff = 40
gated_attention = "elementwise"

[moe]
n_dense_layers = 1
n_experts = 6
top_k = 2
n_shared_experts = 2
expert_d_ff = 16
shared_d_ff = 8
router_scoring = "sigmoid"
norm_topk_prob = true
load_balance = "aux_loss"
load_balance_coef = 0.5
seq_aux_loss = 0.4

[init]
gamma = 0.5

[optim]
lr = 1e-3

[train]
seq_len = 16
global_batch = 2
steps = 2
precision = "fp32"

[data]
format = "synthetic"
)toml";

TEST_F(Reference, MatchesPyTorchWithMixtureOfExperts) { compare_with_pytorch(kMoe); }

// Softmax routing with the router z-loss and the sequence-wise balancing loss alone (no
// per-batch loss), four sequences, and a capacity of 3 assignments per expert and sequence
// (ceil(0.8 · 8 · 2 / 5)): some are dropped.
const char* const kMoeZLoss = R"toml([experiment]
name = "ref_moe_z"
seed = 13

[model]
arch = "moe"
vocab_size = 97
d_model = 24
n_layers = 2
n_heads = 4
d_ff = 40

[moe]
n_experts = 5
top_k = 2
expert_d_ff = 16
router_scoring = "softmax"
load_balance = "none"
seq_aux_loss = 0.6
z_loss = 0.2
capacity_factor = 0.8

[init]
gamma = 0.5

[optim]
lr = 1e-3

[train]
seq_len = 8
global_batch = 4
steps = 2
precision = "fp32"

[data]
format = "synthetic"
)toml";

TEST_F(Reference, MatchesPyTorchWithRouterZLossAndSequenceBalancing) { compare_with_pytorch(kMoeZLoss); }

// Large enough tensors for tight statistics; every distribution and depth scaling.
const char* const kInitStats = R"toml([experiment]
name = "ref_init_stats"
seed = 42

[model]
vocab_size = 4096
d_model = 256
n_layers = 2
n_heads = 4
n_kv_heads = 2
d_ff = 768
qk_norm = true
embedding_norm = true
gated_attention = "elementwise"
tie_embeddings = false

[init]
gamma = 0.5
distribution = "normal"
depth_scaling = "per_layer"

[init.embedding]
std = 0.02

[init.attn_q]
distribution = "trunc_normal"
cutoff = 2.0

[init.attn_k]
distribution = "uniform"

[init.attn_o]
std = "0.02"
distribution = "uniform"

[init.mlp_up]
distribution = "uniform"

[init.mlp_down]
distribution = "trunc_normal"
cutoff = 2.0

[init.lm_head]
std = "d_model^-0.5"
distribution = "trunc_normal"
cutoff = 2.0

[optim]
lr = 1e-3

[train]
seq_len = 16
global_batch = 2
steps = 2
precision = "fp32"

[data]
format = "synthetic"
)toml";

TEST_F(Reference, InitialWeightsHaveThePlannedStatistics) {
  const Outcome gen = generate(kInitStats);
  ASSERT_EQ(gen.status, 0) << gen.output;
  gc::Diagnostics diags;
  const auto spec = gc::load_spec(spec_path().string(), diags);
  ASSERT_TRUE(spec);
  const auto plan = gc::make_plan(*spec, diags);
  ASSERT_TRUE(plan);

  const fs::path one = dir_ / "threads1.safetensors", two = dir_ / "threads2.safetensors";
  const Outcome p1 = probe(one.string(), "OMP_NUM_THREADS=1");
  ASSERT_EQ(p1.status, 0) << p1.output;
  const Outcome p2 = probe(two.string(), "OMP_NUM_THREADS=2");
  ASSERT_EQ(p2.status, 0) << p2.output;
  const gc::rt::SafetensorsFile f1 = gc::rt::read_safetensors(one.string());
  const gc::rt::SafetensorsFile f2 = gc::rt::read_safetensors(two.string());
  EXPECT_EQ(f1.metadata().at("format"), "pt");

  int checked = 0;
  std::map<gc::Distribution, int> seen;
  for (const gc::ParamEntry& p : plan->params) {
    SCOPED_TRACE(p.name);
    ASSERT_TRUE(f1.has(p.name));
    const gc::rt::TensorInfo& t1 = f1.tensor(p.name);
    EXPECT_EQ(t1.shape, p.shape);
    ASSERT_EQ(t1.numel(), p.numel());
    ASSERT_TRUE(f1.has("grad." + p.name));
    // Thread count changes nothing in the initial parameters, not even a bit.
    ASSERT_TRUE(f2.has(p.name));
    const gc::rt::TensorInfo& t2 = f2.tensor(p.name);
    ASSERT_EQ(t1.nbytes(), t2.nbytes());
    EXPECT_EQ(std::memcmp(f1.bytes(t1), f2.bytes(t2), t1.nbytes()), 0) << "differs between 1 and 2 threads";

    const std::vector<float> w = f1.load_f32(p.name);
    if (p.cls == gc::ParamClass::norm) {
      for (float x : w) ASSERT_EQ(x, 1.0f) << "norm gains start at exactly 1";
      continue;
    }
    if (p.numel() < 10000) continue;
    double sum = 0.0, sum_sq = 0.0, max_abs = 0.0;
    for (float x : w) {
      sum += x;
      sum_sq += double(x) * x;
      max_abs = std::max(max_abs, std::fabs(double(x)));
    }
    const double n = double(w.size());
    const double mean = sum / n;
    const double sd = std::sqrt(sum_sq / n - mean * mean);
    std::printf("  %-44s %-12s n=%-8.0f std %.6f plan %.6f (%+.2f%%) mean %+.2e\n", p.name.c_str(),
                p.distribution == gc::Distribution::normal         ? "normal"
                : p.distribution == gc::Distribution::trunc_normal ? "trunc_normal"
                                                                   : "uniform",
                n, sd, p.effective_std, 100.0 * (sd / p.effective_std - 1.0), mean);
    EXPECT_NEAR(sd / p.effective_std, 1.0, 0.02) << "empirical std " << sd << ", plan " << p.effective_std;
    EXPECT_LT(std::fabs(mean), 5.0 * p.effective_std / std::sqrt(n)) << "mean " << mean;
    // The support of each distribution.
    if (p.distribution == gc::Distribution::trunc_normal) {
      EXPECT_LE(max_abs, p.cutoff * p.std * (1 + 1e-6));
    } else if (p.distribution == gc::Distribution::uniform) {
      EXPECT_LE(max_abs, std::sqrt(3.0) * p.std * (1 + 1e-6));
    }
    ++checked;
    ++seen[p.distribution];
  }
  EXPECT_GE(checked, 15);
  EXPECT_EQ(seen.size(), 3u) << "normal, trunc_normal and uniform are all covered";
  // per_layer depth scaling, 1/sqrt(2·(layer+1)): layer 1's down projection has
  // 1/sqrt(2) of layer 0's σ (the statistics above confirm the samples follow).
  double down0 = 0, down1 = 0;
  for (const gc::ParamEntry& p : plan->params) {
    if (p.name == "model.layers.0.mlp.down_proj.weight") down0 = p.std;
    if (p.name == "model.layers.1.mlp.down_proj.weight") down1 = p.std;
  }
  EXPECT_NEAR(down1 / down0, std::sqrt(0.5), 1e-12);
}

// The oracle cannot vanish: with CI set and no torch, the reference test
// fails (it only skips outside CI).
TEST(ReferenceOracle, MissingTorchFailsInCiAndSkipsOutside) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const std::string run = " GCOMPILE_TEST_PYTHON=/bin/false " + self +
                          " --gtest_filter=Reference.MatchesPyTorchWithEveryFeature 2>&1";
  const Outcome in_ci = sh("CI=true" + run);
  EXPECT_NE(in_ci.status, 0) << in_ci.output;
  EXPECT_NE(in_ci.output.find("must not be skipped in CI"), std::string::npos) << in_ci.output;
  const Outcome outside = sh("env -u CI" + run);
  EXPECT_EQ(outside.status, 0) << outside.output;
  EXPECT_NE(outside.output.find("SKIPPED"), std::string::npos) << outside.output;
}

}  // namespace
