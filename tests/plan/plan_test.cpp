// The planner: tensor table, init stds, optimizer groups, counts, FLOPs,
// schedule and the plan-time diagnostics.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/kernel_rules.hpp"  // templates/core: the rules the tree applies
#include "plan/cuda_kernels.hpp"
#include "plan/plan.hpp"
#include "test_util.hpp"

namespace gc {
namespace {

using test::messages;

// A small dense model with every feature that adds tensors.
const char* const kFullDense = R"toml([experiment]
name = "full"

[model]
vocab_size = 1000
d_model = 96
n_layers = 3
n_heads = 4
n_kv_heads = 2
head_dim = 32
d_ff = 160
qk_norm = true
embedding_norm = true
norm_placement = "sandwich"
gated_attention = "elementwise"

[optim]
lr = 1e-3

[train]
seq_len = 64
global_batch = 8
micro_batch = 2
tokens = 5000

[data]
format = "synthetic"
)toml";

Plan must_plan(const std::string& text) {
  Diagnostics diags;
  auto spec = test::spec_from(text, diags);
  EXPECT_TRUE(spec) << ::testing::PrintToString(messages(diags));
  auto plan = make_plan(*spec, diags);
  EXPECT_TRUE(plan) << ::testing::PrintToString(messages(diags));
  return *plan;
}

std::vector<std::string> plan_errors(const std::string& text) {
  Diagnostics diags;
  auto spec = test::spec_from(text, diags);
  if (spec) make_plan(*spec, diags);
  return messages(diags);
}

const ParamEntry& find(const Plan& plan, const std::string& name) {
  for (const auto& p : plan.params) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no tensor " << name;
  static ParamEntry none;
  return none;
}

TEST(Plan, TensorTableOfAFullDenseModel) {
  const Plan plan = must_plan(kFullDense);
  std::vector<std::string> layer1;
  for (const auto& p : plan.params) {
    if (p.layer == 1) layer1.push_back(p.name.substr(std::string("model.layers.1.").size()));
  }
  EXPECT_EQ(layer1, (std::vector<std::string>{
                        "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                        "self_attn.v_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight",
                        "self_attn.gate_proj.weight", "self_attn.o_proj.weight", "self_attn.out_norm.weight",
                        "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                        "mlp.down_proj.weight", "mlp.out_norm.weight"}));
  EXPECT_EQ(find(plan, "model.layers.0.self_attn.q_proj.weight").shape, (std::vector<std::int64_t>{128, 96}));
  EXPECT_EQ(find(plan, "model.layers.0.self_attn.k_proj.weight").shape, (std::vector<std::int64_t>{64, 96}));
  EXPECT_EQ(find(plan, "model.layers.0.self_attn.gate_proj.weight").shape, (std::vector<std::int64_t>{128, 96}));
  const auto& o = find(plan, "model.layers.2.self_attn.o_proj.weight");
  EXPECT_EQ(o.shape, (std::vector<std::int64_t>{96, 128}));
  EXPECT_EQ(o.fan_in, 128);
  EXPECT_EQ(o.fan_out, 96);
  EXPECT_EQ(find(plan, "model.layers.0.self_attn.q_norm.weight").shape, (std::vector<std::int64_t>{32}));
  const auto& emb = find(plan, "model.embed_tokens.weight");
  EXPECT_EQ(emb.fan_in, 96);
  EXPECT_EQ(emb.fan_out, 1000);
  EXPECT_EQ(plan.params.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(plan.params[1].name, "model.embed_norm.weight");
  EXPECT_EQ(plan.params.back().name, "lm_head.weight");
}

TEST(Plan, CountsOfTheFullDenseModel) {
  const Plan plan = must_plan(kFullDense);
  const std::int64_t d = 96, V = 1000, q = 128, kv = 64, f = 160, hd = 32;
  const std::int64_t per_layer = q * d + 2 * kv * d + q * d /*gate*/ + d * q + 2 * hd /*qk norms*/ +
                                 3 * d * f + 4 * d /*input, post-attn, 2 sandwich*/;
  const std::int64_t total = 2 * V * d + d /*embed norm*/ + 3 * per_layer + d /*final norm*/;
  EXPECT_EQ(plan.counts.total, total);
  EXPECT_EQ(plan.counts.embedding, 2 * V * d);
  EXPECT_EQ(plan.counts.non_embedding, total - 2 * V * d);
  EXPECT_EQ(plan.counts.attn_gate, 3 * q * d);
  EXPECT_EQ(plan.counts.active, total);
}

TEST(Plan, HeadwiseGateHasOneOutputPerHead) {
  std::string text = kFullDense;
  text.replace(text.find("\"elementwise\""), 13, "\"headwise\"");
  const Plan plan = must_plan(text);
  EXPECT_EQ(find(plan, "model.layers.0.self_attn.gate_proj.weight").shape, (std::vector<std::int64_t>{4, 96}));
  EXPECT_EQ(plan.counts.attn_gate, 3 * 4 * 96);
}

TEST(Plan, TiedEmbeddingsHaveNoLmHeadButTheMatmulStillCosts) {
  const Plan untied = must_plan(kFullDense);
  std::string tied_text = kFullDense;
  tied_text.replace(tied_text.find("qk_norm = true"), 14, "qk_norm = true\ntie_embeddings = true");
  const Plan tied = must_plan(tied_text);
  for (const auto& p : tied.params) EXPECT_NE(p.cls, ParamClass::lm_head);
  EXPECT_EQ(untied.counts.total - tied.counts.total, 1000 * 96);
  EXPECT_DOUBLE_EQ(untied.flops.matmul_params, tied.flops.matmul_params);
}

TEST(Plan, FlopsFollowPalmConvention) {
  const Plan plan = must_plan(kFullDense);
  double matmul = 0;
  for (const auto& p : plan.params) {
    if (p.cls != ParamClass::norm && p.cls != ParamClass::embedding) matmul += double(p.numel());
  }
  EXPECT_DOUBLE_EQ(plan.flops.matmul_params, matmul);
  EXPECT_DOUBLE_EQ(plan.flops.attention_per_token, 12.0 * 3 * 4 * 32 * 64);
  EXPECT_DOUBLE_EQ(plan.flops.per_token, 6.0 * matmul + 12.0 * 3 * 4 * 32 * 64);
  EXPECT_DOUBLE_EQ(plan.flops.per_step, plan.flops.per_token * 8 * 64);
}

TEST(Plan, ScheduleRoundsTokensUpToWholeSteps) {
  const Plan plan = must_plan(kFullDense);
  EXPECT_EQ(plan.schedule.tokens_per_step, 512);
  EXPECT_EQ(plan.schedule.total_steps, 10);  // ceil(5000 / 512)
  EXPECT_EQ(plan.schedule.grad_accum, 4);
  EXPECT_EQ(plan.schedule.warmup_steps, 0);  // round(0.03 · 10)
}

// Model state is counted over the flat array the program allocates: every tensor rounded up
// to 128 elements (templates/model/model.hpp kTensorAlign; the generated code checks it).
TEST(Plan, MemoryCountsModelStateBytes) {
  const Plan plan = must_plan(kFullDense);
  std::int64_t stored = 0;
  for (const auto& p : plan.params) stored += (p.numel() + 127) / 128 * 128;
  EXPECT_EQ(plan.counts.stored, stored);
  EXPECT_GT(plan.counts.stored, plan.counts.total);  // the norm gains and others leave gaps
  const double n = double(plan.counts.stored);
  EXPECT_DOUBLE_EQ(plan.memory.weights, 2 * n);
  EXPECT_DOUBLE_EQ(plan.memory.master_weights, 4 * n);
  EXPECT_DOUBLE_EQ(plan.memory.total, 18 * n);
}

// The LM head holds every row's logits while they fit in 2^27 elements, else a multiple of 64
// rows under that bound; the planned model buffers count two such chunks (logits, dlogits).
TEST(Plan, LmHeadLogitsAreChunkedWhenTheyWouldNotFit) {
  const Plan small = must_plan(kFullDense);
  EXPECT_EQ(small.head_chunk_rows, 128);  // N = 2·64 rows of 1000 logits: kept whole
  std::string text = kFullDense;
  text.replace(text.find("vocab_size = 1000"), 17, "vocab_size = 60000");
  text.replace(text.find("seq_len = 64"), 12, "seq_len = 2048");
  text.replace(text.find("global_batch = 8"), 16, "global_batch = 16");
  text.replace(text.find("micro_batch = 2"), 15, "micro_batch = 8");
  text.replace(text.find("tokens = 5000"), 13, "tokens = 1000000");
  const Plan large = must_plan(text);
  EXPECT_EQ(large.head_chunk_rows, 2176);  // ⌊2^27 / 60000⌋ = 2236 → 2176 of N = 16384
  const double act = large.spec.train.precision == Precision::bf16 ? 2.0 : 4.0;
  const double whole_logits = 16384.0 * 60000.0 * act;
  EXPECT_LT(large.memory.model_buffers, whole_logits);  // not even one N×V buffer
  EXPECT_GT(large.memory.model_buffers, 2 * 2176.0 * 60000.0 * act);
}

TEST(Plan, GammaRuleUsesFanInOrDModel) {
  const Plan by_fan = must_plan(std::string(kFullDense) + "\n[init]\ngamma = 1\n");
  EXPECT_DOUBLE_EQ(find(by_fan, "model.layers.0.mlp.down_proj.weight").std, 1.0 / 160);
  EXPECT_DOUBLE_EQ(find(by_fan, "model.layers.0.self_attn.o_proj.weight").std, 1.0 / 128);
  EXPECT_DOUBLE_EQ(find(by_fan, "model.embed_tokens.weight").std, 1.0 / 96);
  const Plan by_d = must_plan(std::string(kFullDense) + "\n[init]\ngamma = 1\nfan = \"d_model\"\n");
  EXPECT_DOUBLE_EQ(find(by_d, "model.layers.0.mlp.down_proj.weight").std, 1.0 / 96);
}

TEST(Plan, ClassOverridesExpressionsAndDepthScaling) {
  const Plan plan = must_plan(std::string(kFullDense) + R"toml(
[init]
gamma = 0.5
depth_scaling = "per_layer"
depth_scaling_classes = ["attn_o"]

[init.attn_q]
gamma = 1.0

[init.mlp_down]
std = "0.02 / sqrt(2 * n_layers) * max(1, layer)"
distribution = "trunc_normal"
cutoff = 2.0
)toml");
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.0.self_attn.q_proj.weight").std, 1.0 / 96);
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.0.self_attn.k_proj.weight").std, 1.0 / std::sqrt(96.0));
  for (int l = 0; l < 3; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    EXPECT_DOUBLE_EQ(find(plan, prefix + "self_attn.o_proj.weight").std,
                     std::pow(128.0, -0.5) / std::sqrt(2.0 * (l + 1)));
    const auto& down = find(plan, prefix + "mlp.down_proj.weight");
    EXPECT_DOUBLE_EQ(down.std, 0.02 / std::sqrt(6.0) * std::max(1, l));
    EXPECT_EQ(down.distribution, Distribution::trunc_normal);
    EXPECT_EQ(down.cutoff, 2.0);
    // Var of N(0,1) truncated to ±2: 1 − 2·2·φ(2)/(2Φ(2) − 1) = 0.773741...
    EXPECT_NEAR(down.effective_std / down.std, std::sqrt(0.7737413), 1e-6);
  }
}

TEST(Plan, DepthScalingTotal) {
  const Plan plan = must_plan(std::string(kFullDense) + "\n[init]\ndepth_scaling = \"total\"\n");
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.2.mlp.down_proj.weight").std, std::pow(160.0, -0.5) / std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.2.mlp.up_proj.weight").std, std::pow(96.0, -0.5));
}

TEST(Plan, NormGainsStartAtOneAndSkipWeightDecay) {
  const Plan plan = must_plan(kFullDense);
  for (const auto& p : plan.params) {
    if (p.cls != ParamClass::norm) continue;
    EXPECT_EQ(p.init_value, 1.0) << p.name;
    EXPECT_EQ(p.weight_decay, 0.0) << p.name;
  }
  EXPECT_EQ(find(plan, "lm_head.weight").weight_decay, 0.1);
}

const char* const kMoe = R"toml([experiment]
name = "moe"

[model]
arch = "moe"
vocab_size = 500
d_model = 64
n_layers = 5
n_heads = 4
d_ff = 256

[moe]
n_dense_layers = 1
layer_interval = 2
n_experts = 8
top_k = 2
n_shared_experts = 2
expert_d_ff = 32
shared_d_ff = 48

[init.mlp_up]
gamma = 1.0

[init.expert_down]
std = "0.001"

[optim]
lr = 1e-3
no_decay = ["norm", "router"]

[optim.lr_mult]
router = 0.5
expert_up = "1 / width_mult"

[train]
seq_len = 16
global_batch = 2
steps = 3

[data]
format = "synthetic"
)toml";

TEST(Plan, MoeLayoutCountsAndExpertFallback) {
  const Plan plan = must_plan(kMoe);
  std::vector<LayerKind> kinds;
  for (const auto& l : plan.layers) kinds.push_back(l.kind);
  EXPECT_EQ(kinds, (std::vector<LayerKind>{LayerKind::dense, LayerKind::moe, LayerKind::dense, LayerKind::moe,
                                           LayerKind::dense}));
  const auto& up = find(plan, "model.layers.1.mlp.experts.up_proj.weight");
  EXPECT_EQ(up.shape, (std::vector<std::int64_t>{8, 32, 64}));
  EXPECT_EQ(up.fan_in, 64);
  EXPECT_DOUBLE_EQ(up.std, 1.0 / 64);  // expert_up falls back to mlp_up's γ = 1
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.1.mlp.experts.gate_proj.weight").std, 1.0 / 8);  // init.gamma 0.5
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.3.mlp.experts.down_proj.weight").std, 0.001);
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.3.mlp.shared_experts.up_proj.weight").std, 1.0 / 64);
  EXPECT_EQ(find(plan, "model.layers.3.mlp.shared_experts.down_proj.weight").shape,
            (std::vector<std::int64_t>{64, 96}));
  const auto& router = find(plan, "model.layers.1.mlp.router.weight");
  EXPECT_EQ(router.lr_mult, 0.5);
  EXPECT_EQ(router.weight_decay, 0.0);
  const std::int64_t expert_params = 3 * 64 * 32;
  EXPECT_EQ(plan.counts.total - plan.counts.active, 2 * (8 - 2) * expert_params);
}

TEST(Plan, OptimizerGroupsCollectEqualSettings) {
  const Plan plan = must_plan(kMoe);
  ASSERT_EQ(plan.optim_groups.size(), 3u);  // (1, 0.1), (0.5, 0) router, (1, 0) norms
  std::int64_t total = 0;
  for (const auto& g : plan.optim_groups) total += g.n_params;
  EXPECT_EQ(total, plan.counts.total);
  // Groups appear in table order: decayed weights, norms, then the router.
  EXPECT_EQ(plan.optim_groups[0].classes.front(), ParamClass::embedding);
  EXPECT_EQ(plan.optim_groups[1].classes, (std::vector<ParamClass>{ParamClass::norm}));
  EXPECT_EQ(plan.optim_groups[2].lr_mult, 0.5);
  EXPECT_EQ(plan.optim_groups[2].weight_decay, 0.0);
  EXPECT_EQ(plan.optim_groups[2].classes, (std::vector<ParamClass>{ParamClass::router}));
}

TEST(PlanErrors, StdExpressionThatDividesByZeroPointsAtTheFormula) {
  EXPECT_EQ(plan_errors(std::string(kFullDense) + "\n[init.attn_o]\nstd = \"1 / layer\"\n"),
            (std::vector<std::string>{
                "spec.toml:30:7: error: in 'init.attn_o.std' for model.layers.0.self_attn.o_proj.weight: division by zero"}));
}

TEST(PlanErrors, NonPositiveStd) {
  EXPECT_EQ(plan_errors(std::string(kFullDense) + "\n[init.attn_q]\nstd = \"0.02 - 0.01 * layer\"\n"),
            (std::vector<std::string>{"spec.toml:30:7: error: 'init.attn_q.std' evaluates to 0 for "
                                      "model.layers.2.self_attn.q_proj.weight; a std must be > 0"}));
}

TEST(PlanErrors, WarmupLongerThanTraining) {
  EXPECT_EQ(plan_errors(std::string(kFullDense) + "\n[schedule]\nwarmup_steps = 11\n"),
            (std::vector<std::string>{"spec.toml:30:16: error: 'schedule.warmup_steps' (11) exceeds the 10 training steps"}));
}

TEST(PlanErrors, NegativeLrMultiplier) {
  EXPECT_EQ(plan_errors(std::string(kFullDense) + "\n[optim.lr_mult]\nattn_q = \"1 - width_mult * 2\"\n"),
            (std::vector<std::string>{"spec.toml:30:10: error: 'optim.lr_mult.attn_q' evaluates to -1 for "
                                      "model.layers.0.self_attn.q_proj.weight; it must be >= 0"}));
}

TEST(PlanWarnings, SmallEmbeddingInitWithTinyEpsAndNoEmbeddingNorm) {
  std::string text = kFullDense;
  text.replace(text.find("embedding_norm = true"), 21, "norm_eps = 1e-12");
  EXPECT_EQ(plan_errors(text + "\n[init]\ngamma = 1.0\n"),
            (std::vector<std::string>{
                "spec.toml:13:12: warning: small embedding init (γ ≈ 1) with ε = 1e-12 and no embedding norm: the "
                "first RMSNorm scales its input by about 96; seed 003 (§6.1, App. D) needed model.embedding_norm "
                "and sandwich norm to avoid loss spikes at scale"}));
  // With the embedding norm, or at γ = 0.5, or with ε = 1e-5: no warning.
  EXPECT_TRUE(plan_errors(std::string(kFullDense) + "\n[init]\ngamma = 1.0\n").empty());
  EXPECT_TRUE(plan_errors(text + "\n[init]\ngamma = 0.5\n").empty());
}

TEST(Plan, ScalesAndWidthMultiplier) {
  const Plan plan = must_plan(std::string(kFullDense) + R"toml(
[init]
base_width = 32

[optim.lr_mult]
attn_q = "1 / width_mult"
)toml" + "\n[metrics.sink_score]\nenabled = false\n");
  EXPECT_DOUBLE_EQ(plan.width_mult, 3.0);
  EXPECT_DOUBLE_EQ(plan.attn_scale, 1.0 / std::sqrt(32.0));
  EXPECT_DOUBLE_EQ(find(plan, "model.layers.0.self_attn.q_proj.weight").lr_mult, 1.0 / 3.0);
  for (const auto& m : plan.metrics) EXPECT_NE(m.name, "sink_score");
}

}  // namespace
}  // namespace gc

namespace gc {
namespace {

// train's and parity's --attention / --experts (core::set_kernel_choice): each flag sets its own
// choice; any other flag or value changes nothing.
TEST(Plan, KernelFlagsSetTheirChoiceOnly) {
  using tree::core::TensorCoreKernels;
  tree::core::KernelChoices k;
  EXPECT_TRUE(tree::core::set_kernel_choice(k, "--attention", "wgmma"));
  EXPECT_EQ(k.attention, TensorCoreKernels::wgmma);
  EXPECT_EQ(k.experts, TensorCoreKernels::automatic);
  EXPECT_TRUE(tree::core::set_kernel_choice(k, "--experts", "mma"));
  EXPECT_EQ(k.experts, TensorCoreKernels::mma);
  EXPECT_TRUE(tree::core::set_kernel_choice(k, "--attention", "auto"));
  EXPECT_EQ(k.attention, TensorCoreKernels::automatic);
  EXPECT_FALSE(tree::core::set_kernel_choice(k, "--attention", "hgmma"));
  EXPECT_FALSE(tree::core::set_kernel_choice(k, "--gemm", "wgmma"));
  EXPECT_EQ(k.attention, TensorCoreKernels::automatic);
  EXPECT_EQ(k.experts, TensorCoreKernels::mma);
}

// bf16 projections with a width not a multiple of 8 run on zero-padded copies on the GPU
// (cuda/aligned_linear.cuh); the plan sizes that scratch for the largest call: here the LM head,
// 128 rows × 1001 logits padded to 1008 (ŷ 128·1008 + Ŵ 1008·96; dŴ 1008·96 in fp32).
TEST(Plan, ProjectionsWithWidthsNotAMultipleOf8GetPaddedScratchInBf16Only) {
  EXPECT_EQ(must_plan(kFullDense).align_scratch.act_elems, 0);  // every width a multiple of 8
  std::string text = kFullDense;
  text.replace(text.find("vocab_size = 1000"), 17, "vocab_size = 1001");
  text.replace(text.find("d_ff = 160"), 10, "d_ff = 150");
  const Plan padded = must_plan(text);
  EXPECT_EQ(padded.align_scratch.act_elems, 128 * 1008 + 1008 * 96);
  EXPECT_EQ(padded.align_scratch.grad_elems, 1008 * 96);
  text.replace(text.find("vocab_size = 1001"), 17, "vocab_size = 1000");
  // Without the head: the stacked gate and up projection (out 300 -> 304: ŷ 128·304, Ŵ 304·96)
  // needs more than the down projection (x̂ and dx̂ 2·128·152, Ŵ 96·152).
  EXPECT_EQ(must_plan(text).align_scratch.act_elems, 128 * 304 + 304 * 96);
  EXPECT_EQ(must_plan(text).align_scratch.grad_elems, 304 * 96);
  text.replace(text.find("tokens = 5000"), 13, "tokens = 5000\nprecision = \"fp32\"");
  EXPECT_EQ(must_plan(text).align_scratch.act_elems, 0);
  EXPECT_EQ(must_plan(text).align_scratch.grad_elems, 0);
  // A MoE's router backward runs through the same padded projection (64 -> n_experts): with every
  // other width aligned, 4 experts (padded to 8) still need ŷ 32·8 + Ŵ 8·64 (32 rows: 2 × 16).
  std::string moe = kMoe;
  moe.replace(moe.find("vocab_size = 500"), 16, "vocab_size = 512");
  moe.replace(moe.find("expert_d_ff = 32"), 16, "expert_d_ff = 32\nn_shared_experts = 0");
  moe.replace(moe.find("n_shared_experts = 2\n"), 21, "");
  EXPECT_EQ(must_plan(moe).align_scratch.act_elems, 0);  // 8 experts
  moe.replace(moe.find("n_experts = 8"), 13, "n_experts = 4");
  EXPECT_EQ(must_plan(moe).align_scratch.act_elems, 32 * 8 + 8 * 64);
  EXPECT_EQ(must_plan(moe).align_scratch.grad_elems, 8 * 64);
  EXPECT_EQ(unaligned_widths(must_plan(moe).spec), (std::vector<std::string>{"n_experts (router) 4"}));
}

// gcompile explain's kernels section (plan/cuda_kernels.hpp) follows the templates' compile-time
// choices: tensor-core attention for bf16 and head_dim a multiple of 16 up to 128
// (flash_attention_supported), the Hopper kernels beside it for bf16 at head_dim 64 or 128, grouped expert GEMMs for bf16 and whole 64-column tiles
// (core::grouped_gemm_takes), zero-padded projections for widths not a multiple of 8 (bf16 only).
TEST(Plan, CudaKernelsFollowThePrecisionAndTheShapes) {
  const auto chosen = [](const std::string& text, const std::string& op) {
    for (const KernelChoice& k : cuda_kernels(must_plan(text).spec)) {
      if (k.op == op) return k.kernel.substr(0, k.kernel.find(':'));
    }
    return std::string("none");
  };
  const auto with = [](std::string text, const std::string& from, const std::string& to) {
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  const std::string fp32 = with(kFullDense, "tokens = 5000", "tokens = 5000\nprecision = \"fp32\"");
  EXPECT_EQ(chosen(kFullDense, "attention"), "cuda/flash_attention.cuh");  // bf16, head_dim 32
  EXPECT_EQ(chosen(fp32, "attention"), "cuda/attention.cuh");
  EXPECT_EQ(chosen(with(kFullDense, "head_dim = 32", "head_dim = 24"), "attention"), "cuda/attention.cuh");
  EXPECT_EQ(chosen(with(kFullDense, "head_dim = 32", "head_dim = 144"), "attention"), "cuda/attention.cuh");
  // The Hopper kernels (core::sm90_attention_takes): bf16 at head_dim 64 or 128 only.
  const std::string hopper = "cuda/attention_sm90.cuh, cuda/attention_sm90_backward.cuh";
  EXPECT_EQ(chosen(kFullDense, "sm_90a attn"), "none");  // head_dim 32
  EXPECT_EQ(chosen(with(kFullDense, "head_dim = 32", "head_dim = 64"), "sm_90a attn"), hopper);
  EXPECT_EQ(chosen(with(kFullDense, "head_dim = 32", "head_dim = 128"), "sm_90a attn"), hopper);
  EXPECT_EQ(chosen(with(fp32, "head_dim = 32", "head_dim = 64"), "sm_90a attn"), "none");
  EXPECT_EQ(chosen(kFullDense, "experts"), "none");  // a dense model
  EXPECT_EQ(chosen(kMoe, "experts"), "cuda/expert_linear.cuh");  // expert_d_ff 32: half a tile
  EXPECT_EQ(chosen(with(kMoe, "expert_d_ff = 32", "expert_d_ff = 128"), "experts"), "cuda/grouped_gemm.cuh");
  // Their Hopper version: d_model and expert_d_ff whole 128-column tiles (core::sm90_grouped_gemm_takes).
  EXPECT_EQ(chosen(with(kMoe, "expert_d_ff = 32", "expert_d_ff = 128"), "sm_90a exp"), "none");  // d_model 64
  EXPECT_EQ(chosen(with(with(kMoe, "expert_d_ff = 32", "expert_d_ff = 128"), "d_model = 64", "d_model = 128"),
                   "sm_90a exp"),
            "cuda/grouped_gemm_sm90.cuh");
  EXPECT_TRUE(unaligned_widths(must_plan(kFullDense).spec).empty());
  const std::string odd = with(with(kFullDense, "vocab_size = 1000", "vocab_size = 1001"), "d_ff = 160", "d_ff = 150");
  EXPECT_EQ(unaligned_widths(must_plan(odd).spec), (std::vector<std::string>{"vocab_size 1001", "d_ff 150"}));
  EXPECT_TRUE(unaligned_widths(must_plan(with(odd, "tokens = 5000", "tokens = 5000\nprecision = \"fp32\"")).spec)
                  .empty());
}

}  // namespace
}  // namespace gc
