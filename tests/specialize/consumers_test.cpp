// No spec key silently does nothing: every key of the schema is read by a
// template knob or consumed at a place table_consumer() names, and values the
// code does not implement are refused with the key's location.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <tuple>

#include "emit/emit.hpp"
#include "spec/schema.hpp"
#include "spec/spec.hpp"
#include "tree_test_util.hpp"

namespace {

namespace fs = std::filesystem;

// The spec keys the templates' knobs read: gc::knob<T>("KEY", default).
std::set<std::string> knob_keys() {
  std::set<std::string> out;
  const std::regex knob(R"re(knob<[^>]*>\s*\(\s*"([a-z0-9_.]+)")re");
  for (const auto& e : fs::recursive_directory_iterator(fs::path(GCOMPILE_SOURCE_DIR) / "templates")) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (std::sregex_iterator it(s.begin(), s.end(), knob), end; it != end; ++it) out.insert((*it)[1]);
  }
  return out;
}

TEST(SpecKeys, EveryKeyIsReadByAKnobOrANamedConsumer) {
  const std::set<std::string> knobs = knob_keys();
  ASSERT_GT(knobs.size(), 40u) << "the knob scan found too few knobs";
  for (const auto& key : gc::schema()) {
    const bool by_knob = knobs.count(key.path) > 0;
    const auto place = gc::table_consumer(key.path);
    EXPECT_TRUE(by_knob || place) << "'" << key.path << "' is read by no knob and has no consumer";
    EXPECT_FALSE(by_knob && place) << "'" << key.path << "' is read by a knob; its table_consumer entry is stale";
  }
}

// The knob table is written from the typed spec (emit/knobs.cpp), not copied from the resolved
// map: for every committed spec, each value it binds is the one spec.resolved.toml records, and
// it binds every spec key a template knob reads.
bool same_value(const gc::Value& a, const gc::Value& b) {
  const bool numeric_a = a.kind == gc::Value::Kind::integer || a.kind == gc::Value::Kind::number;
  const bool numeric_b = b.kind == gc::Value::Kind::integer || b.kind == gc::Value::Kind::number;
  if (numeric_a && numeric_b) return a.as_double() == b.as_double();
  return a.kind == b.kind && a.to_toml() == b.to_toml();
}

// Every knob key with a default, set to another value (the committed specs leave some alone).
constexpr const char* kEveryKnobOffDefault = R"toml([experiment]
name = "off_default"
seed = 99
[model]
arch = "moe"
vocab_size = 64
d_model = 32
n_layers = 2
n_heads = 4
n_kv_heads = 2
head_dim = 8
max_seq_len = 32
norm_eps = 1e-6
norm_placement = "sandwich"
embedding_norm = true
qk_norm = true
tie_embeddings = true
rope_theta = 500000.0
gated_attention = "headwise"
[moe]
n_dense_layers = 1
n_experts = 4
top_k = 2
expert_d_ff = 16
dense_d_ff = 48
[optim]
lr = 2e-3
betas = [0.8, 0.99]
eps = 1e-10
grad_clip = 0.5
[schedule]
decay = "linear"
min_lr_ratio = 0.05
[train]
seq_len = 16
micro_batch = 2
global_batch = 8
steps = 4
precision = "fp32"
eval_every = 2
eval_batches = 3
checkpoint_every = 3
log_every = 2
[data]
format = "synthetic"
[distributed]
backend = "nccl"
zero_stage = 1
bucket_mb = 10.0
expert_parallel = 2
expert_exchange_factor = 2.5
[metrics.sink_score]
enabled = false
interval = 7
[metrics.residual_flow]
enabled = false
interval = 7
[metrics.rmsnorm_factor]
enabled = false
interval = 7
[metrics.cosine_similarity]
enabled = false
interval = 7
[metrics.stable_rank]
enabled = false
interval = 7
[metrics.embedding_cosine]
enabled = false
interval = 7
top_tokens = 20
[metrics.param_norm]
enabled = false
interval = 7
[metrics.grad_norm]
enabled = false
interval = 7
[metrics.update_ratio]
enabled = false
interval = 7
[metrics.activation_rms]
enabled = false
interval = 7
[metrics.attention_entropy]
enabled = false
interval = 7
[metrics.logit_std]
enabled = false
interval = 7
[metrics.initial_loss]
enabled = false
[metrics.moe_routing]
enabled = false
interval = 7
)toml";

// The resolved value of a knob key; optim.beta1 and optim.beta2 are the items of optim.betas.
gc::Value resolved_value(const gc::Spec& spec, const std::string& key) {
  if (key == "optim.beta1" || key == "optim.beta2") {
    return spec.resolved.at("optim.betas").items.at(key == "optim.beta1" ? 0 : 1);
  }
  const auto it = spec.resolved.find(key);
  if (it == spec.resolved.end()) ADD_FAILURE() << "'" << key << "' is not resolved";
  return it == spec.resolved.end() ? gc::Value::string("(unresolved)") : it->second;
}

TEST(SpecKeys, KnobValuesFromTheTypedSpecEqualTheResolvedSpec) {
  const std::set<std::string> knobs = knob_keys();
  int loaded = 0;
  std::set<std::string> non_default;  // keys some spec sets to other than the schema default
  std::vector<std::pair<std::string, gc::Spec>> specs;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(GCOMPILE_SOURCE_DIR) / "specs")) {
    if (e.path().extension() != ".toml") continue;
    gc::Diagnostics diags;
    auto spec = gc::load_spec(e.path().string(), diags);
    if (spec) specs.emplace_back(e.path().string(), std::move(*spec));  // a base file (common.toml) is not whole
  }
  gc::Diagnostics diags;
  auto off = gc::load_spec_text(kEveryKnobOffDefault, "off_default.toml", ".", diags);
  ASSERT_TRUE(off) << "the off-default spec does not load";
  specs.emplace_back("off_default.toml", std::move(*off));
  for (const auto& [path, spec] : specs) {
    ++loaded;
    const gc::KnobTable values = gc::spec_knob_values(spec);
    for (const std::string& key : knobs) {
      if (key.rfind("plan.", 0) == 0) continue;  // derived by the planner, not a spec key
      const auto bound = values.find(key);
      ASSERT_NE(bound, values.end()) << path << ": knob key '" << key << "' is not bound";
      const gc::Value resolved = resolved_value(spec, key);
      EXPECT_TRUE(same_value(bound->second, resolved))
          << path << ": '" << key << "' binds " << bound->second.to_toml() << ", resolved " << resolved.to_toml();
      const gc::KeySpec* schema_key = gc::find_key(key);
      if (schema_key && schema_key->default_value && !same_value(*schema_key->default_value, resolved)) {
        non_default.insert(key);
      }
    }
  }
  EXPECT_GT(loaded, 40) << "too few specs loaded";
  // The comparison means something only where some spec moves a value off its default.
  for (const std::string& key : knobs) {
    const gc::KeySpec* schema_key = gc::find_key(key);
    if (!schema_key || !schema_key->default_value) continue;  // plan.*, or required / derived
    EXPECT_TRUE(non_default.count(key)) << "no spec here sets '" << key << "' off its default";
  }
}

class NotImplemented : public gc::test::TreeTest {};

TEST_F(NotImplemented, DistributedValuesBeyondOneProcessAreRefusedWithTheirLocation) {
  const std::string base = R"toml([experiment]
name = "dist"
[model]
vocab_size = 64
d_model = 16
n_layers = 1
n_heads = 2
d_ff = 32
[optim]
lr = 1e-3
[train]
seq_len = 8
global_batch = 2
steps = 2
[data]
format = "synthetic"
[distributed]
)toml";
  for (const auto& [line, where, key] : {std::tuple{"zero_stage = 2", "spec.toml:18:14", "distributed.zero_stage"},
                                         std::tuple{"zero_stage = 3", "spec.toml:18:14", "distributed.zero_stage"}}) {
    const gc::test::Outcome out = generate(base + line + "\n", false);
    EXPECT_EQ(out.status, 1) << out.output;
    EXPECT_NE(out.output.find(std::string(where) + ": error: not implemented: " + key), std::string::npos)
        << out.output;
    EXPECT_FALSE(fs::exists(tree()));
  }
  const gc::test::Outcome ok = generate(base + "backend = \"none\"\nzero_stage = 0\n", false);
  EXPECT_EQ(ok.status, 0) << ok.output;
  const gc::test::Outcome zero1 = generate(base + "zero_stage = 1\n", false);  // CPU data parallelism shards moments
  EXPECT_EQ(zero1.status, 0) << zero1.output;
  // NCCL data parallelism on GPUs exists: backend = "nccl" generates (a CPU job is refused at run time).
  const gc::test::Outcome nccl = generate(base + "backend = \"nccl\"\nzero_stage = 1\n", false);
  EXPECT_EQ(nccl.status, 0) << nccl.output;
}

}  // namespace
