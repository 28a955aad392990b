// Shipped init presets (specs/presets/*.toml) against the formulas of seed 004.
//
// Every preset has an entry in presets() below: its per-class std, distribution,
// cutoff and lr multiplier, and its forward scales, written here in C++
// directly from seed 004's text (and the choices each preset's header records),
// without reading the preset. Each entry is checked on three small models
// (dense untied with an elementwise attention gate, dense tied with a headwise
// gate, MoE with dense, routed and shared experts) for every weight tensor.
// A preset file without an entry, or an entry without a file, fails
// PresetFiles.EveryPresetHasATestCase.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <toml++/toml.h>

#include "plan/plan.hpp"
#include "spec/load.hpp"
#include "test_util.hpp"

namespace gc {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------
// Test models

struct Model {
  std::string label;
  double V = 1000, d = 96, L = 3, H = 4, KV = 2, hd = 32, dff = 160;
  double base_width = 32;  // width_mult = d / base_width = 3 (only μP presets may depend on it)
  bool tied = false;
  GatedAttention gate = GatedAttention::elementwise;
  bool moe = false;
  double E = 4, top_k = 2, expert_dff = 48, n_shared = 2, shared_dff = 40, n_dense = 1;

  double width_mult() const { return d / base_width; }
};

std::vector<Model> models() {
  Model dense;
  dense.label = "dense";
  Model tied;
  tied.label = "tied";
  tied.tied = true;
  tied.gate = GatedAttention::headwise;
  Model moe;
  moe.label = "moe";
  moe.moe = true;
  return {dense, tied, moe};
}

std::string int_str(double x) { return std::to_string(static_cast<long long>(x)); }

std::string spec_text(const std::string& preset, const Model& m, const std::string& extra_init = "") {
  std::ostringstream s;
  s << "[experiment]\nname = \"presets\"\n\n[model]\n";
  s << "arch = \"" << (m.moe ? "moe" : "dense") << "\"\n";
  s << "vocab_size = " << int_str(m.V) << "\nd_model = " << int_str(m.d) << "\nn_layers = " << int_str(m.L) << "\n";
  s << "n_heads = " << int_str(m.H) << "\nn_kv_heads = " << int_str(m.KV) << "\nhead_dim = " << int_str(m.hd) << "\n";
  s << "d_ff = " << int_str(m.dff) << "\n";
  s << "tie_embeddings = " << (m.tied ? "true" : "false") << "\n";
  s << "gated_attention = \"" << to_string(m.gate) << "\"\n";
  if (m.moe) {
    s << "\n[moe]\nn_experts = " << int_str(m.E) << "\ntop_k = " << int_str(m.top_k)
      << "\nexpert_d_ff = " << int_str(m.expert_dff) << "\nn_shared_experts = " << int_str(m.n_shared)
      << "\nshared_d_ff = " << int_str(m.shared_dff) << "\nn_dense_layers = " << int_str(m.n_dense) << "\n";
  }
  s << "\n[init]\npreset = \"" << preset << "\"\nbase_width = " << int_str(m.base_width) << "\n" << extra_init;
  s << "\n[optim]\nlr = 1e-3\n\n[train]\nseq_len = 32\nglobal_batch = 4\nsteps = 10\n\n[data]\nformat = \"synthetic\"\n";
  return s.str();
}

// The weight tensors a model must have, as (class, layer) with their shape,
// derived here from the model description (not from the planner).
struct ExpectedTensor {
  ParamClass cls;
  int layer;
  std::vector<std::int64_t> shape;
};

std::vector<ExpectedTensor> expected_tensors(const Model& m) {
  auto i = [](double x) { return static_cast<std::int64_t>(x); };
  std::vector<ExpectedTensor> t;
  t.push_back({ParamClass::embedding, -1, {i(m.V), i(m.d)}});
  for (int l = 0; l < static_cast<int>(m.L); ++l) {
    t.push_back({ParamClass::attn_q, l, {i(m.H * m.hd), i(m.d)}});
    t.push_back({ParamClass::attn_k, l, {i(m.KV * m.hd), i(m.d)}});
    t.push_back({ParamClass::attn_v, l, {i(m.KV * m.hd), i(m.d)}});
    if (m.gate == GatedAttention::elementwise) t.push_back({ParamClass::attn_gate, l, {i(m.H * m.hd), i(m.d)}});
    if (m.gate == GatedAttention::headwise) t.push_back({ParamClass::attn_gate, l, {i(m.H), i(m.d)}});
    t.push_back({ParamClass::attn_o, l, {i(m.d), i(m.H * m.hd)}});
    if (!m.moe || l < static_cast<int>(m.n_dense)) {
      t.push_back({ParamClass::mlp_gate, l, {i(m.dff), i(m.d)}});
      t.push_back({ParamClass::mlp_up, l, {i(m.dff), i(m.d)}});
      t.push_back({ParamClass::mlp_down, l, {i(m.d), i(m.dff)}});
    } else {
      const double shared = m.n_shared * m.shared_dff;
      t.push_back({ParamClass::router, l, {i(m.E), i(m.d)}});
      t.push_back({ParamClass::expert_gate, l, {i(m.E), i(m.expert_dff), i(m.d)}});
      t.push_back({ParamClass::expert_up, l, {i(m.E), i(m.expert_dff), i(m.d)}});
      t.push_back({ParamClass::expert_down, l, {i(m.E), i(m.d), i(m.expert_dff)}});
      t.push_back({ParamClass::shared_gate, l, {i(shared), i(m.d)}});
      t.push_back({ParamClass::shared_up, l, {i(shared), i(m.d)}});
      t.push_back({ParamClass::shared_down, l, {i(m.d), i(shared)}});
    }
  }
  if (!m.tied) t.push_back({ParamClass::lm_head, -1, {i(m.V), i(m.d)}});
  return t;
}

// ---------------------------------------------------------------------------
// What a preset prescribes for one tensor

struct Tensor {
  ParamClass cls;
  double layer;  // 0-based; 0 outside the layer stack
  double fan_in, fan_out;
};

struct Expect {
  double std = 0.0;
  Distribution dist = Distribution::normal;
  double cutoff = 0.0;  // trunc_normal only
  double lr = 1.0;
};

struct Scales {
  double embedding = 1.0, attn = 0.0, logit = 1.0;  // attn 0 = the default 1/sqrt(head_dim)
};

struct PresetCase {
  std::string scope;  // "init-only" or "full"
  std::function<Expect(const Tensor&, const Model&)> rule;
  std::function<Scales(const Model&)> scales = [](const Model&) { return Scales{}; };
};

Expect normal(double std, double lr = 1.0) { return {std, Distribution::normal, 0.0, lr}; }
Expect trunc(double std, double cutoff, double lr = 1.0) { return {std, Distribution::trunc_normal, cutoff, lr}; }
Expect uniform(double std) { return {std, Distribution::uniform, 0.0, 1.0}; }

bool is(ParamClass c, std::initializer_list<ParamClass> set) {
  return std::find(set.begin(), set.end(), c) != set.end();
}

using C = ParamClass;

// Residual-branch output projections.
bool is_out(ParamClass c) { return is(c, {C::attn_o, C::mlp_down, C::expert_down, C::shared_down}); }

const std::map<std::string, PresetCase>& presets() {
  static const std::map<std::string, PresetCase> table = {
      // seed 000 §4.2: σ = d_in^-γ, γ = 1, for every matrix (embedding d_in = d_model).
      {"gamma", {"init-only", [](const Tensor& t, const Model&) { return normal(1.0 / t.fan_in); }}},

      // GPT-2: normal 0.02, c_proj (attn out, MLP down) 0.02/sqrt(2 n_layer).
      {"gpt2", {"init-only", [](const Tensor& t, const Model& m) {
                  return normal(is_out(t.cls) ? 0.02 / std::sqrt(2.0 * m.L) : 0.02);
                }}},

      // Megatron-LM default: 0.02; attention output and fc2 0.02/sqrt(2 n_layers).
      {"megatron", {"init-only", [](const Tensor& t, const Model& m) {
                      return normal(is_out(t.cls) ? 0.02 / std::sqrt(2.0 * m.L) : 0.02);
                    }}},

      // OLMo normal: all weights normal 0.02.
      {"olmo_normal", {"init-only", [](const Tensor&, const Model&) { return normal(0.02); }}},

      // OLMo mitchell: trunc 3σ; d^-1/2 everywhere but output projections (2 fan_in (l+1))^-1/2.
      {"olmo_mitchell", {"init-only", [](const Tensor& t, const Model& m) {
                           if (is_out(t.cls)) return trunc(1.0 / std::sqrt(2.0 * t.fan_in * (t.layer + 1.0)), 3.0);
                           return trunc(1.0 / std::sqrt(m.d), 3.0);
                         }}},

      // OLMo full_megatron: trunc 3σ 0.02; outputs 0.02/sqrt(2N); LM head d^-1/2.
      {"olmo_full_megatron", {"init-only", [](const Tensor& t, const Model& m) {
                                if (t.cls == C::lm_head) return trunc(1.0 / std::sqrt(m.d), 3.0);
                                return trunc(is_out(t.cls) ? 0.02 / std::sqrt(2.0 * m.L) : 0.02, 3.0);
                              }}},

      // torchtitan Llama3: embedding N(0,1); wq/wk/wv/w1 flat 0.02; wo, w2, w3, router
      // 0.02/sqrt(2(l+1)); LM head d^-1/2 cut at 3σ; others PyTorch's ±2 = 100σ at 0.02.
      {"torchtitan_llama3", {"init-only", [](const Tensor& t, const Model& m) {
                               if (t.cls == C::embedding) return normal(1.0);
                               if (t.cls == C::lm_head) return trunc(std::pow(m.d, -0.5), 3.0);
                               const bool scaled = is(t.cls, {C::attn_o, C::mlp_up, C::mlp_down, C::router, C::expert_up,
                                                              C::expert_down, C::shared_up, C::shared_down});
                               return trunc(scaled ? 0.02 / std::sqrt(2.0 * (t.layer + 1.0)) : 0.02, 2.0 / 0.02);
                             }}},

      // torchtitan GPT-OSS: embedding normal 0.02; every block weight 0.02/sqrt(2(l+1)).
      {"torchtitan_gpt_oss", {"init-only", [](const Tensor& t, const Model& m) {
                                if (t.cls == C::embedding) return normal(0.02);
                                if (t.cls == C::lm_head) return trunc(std::pow(m.d, -0.5), 3.0);
                                return trunc(0.02 / std::sqrt(2.0 * (t.layer + 1.0)), 100.0);
                              }}},

      // transformers default: normal(initializer_range = 0.02).
      {"hf_default", {"init-only", [](const Tensor&, const Model&) { return normal(0.02); }}},

      // T5: q (d_model d_kv)^-1/2; k, v, wi d_model^-1/2; o (H d_kv)^-1/2; wo d_ff^-1/2;
      // shared embedding and untied lm_head 1.0 (Mesh TF); attention logits unscaled.
      {"t5", {"full",
              [](const Tensor& t, const Model& m) {
                switch (t.cls) {
                  case C::embedding:
                  case C::lm_head: return normal(1.0);
                  case C::attn_q: return normal(1.0 / std::sqrt(m.d * m.hd));
                  case C::attn_o: return normal(1.0 / std::sqrt(m.H * m.hd));
                  case C::mlp_down: return normal(1.0 / std::sqrt(m.dff));
                  case C::expert_down: return normal(1.0 / std::sqrt(m.expert_dff));
                  case C::shared_down: return normal(1.0 / std::sqrt(m.n_shared * m.shared_dff));
                  default: return normal(1.0 / std::sqrt(m.d));  // k, v, wi_0, wi_1, gate, router
                }
              },
              [](const Model&) { return Scales{1.0, 1.0, 1.0}; }}},

      // MaxText: LeCun fan_in; q (d hd)^-1/2; MLP/MoE truncated at ±2 with σ/0.8796 (JAX
      // variance_scaling), so the samples' std is exactly fan_in^-1/2; no 1/sqrt(hd) in attention.
      {"maxtext", {"full",
                   [](const Tensor& t, const Model& m) {
                     constexpr double kJaxTrunc2 = 0.87962566103423978;  // scipy truncnorm(-2, 2).std()
                     if (t.cls == C::embedding || t.cls == C::lm_head) return normal(1.0 / std::sqrt(m.d));
                     if (t.cls == C::attn_q) return normal(1.0 / std::sqrt(m.d * m.hd));
                     if (is(t.cls, {C::attn_k, C::attn_v, C::attn_gate, C::attn_o})) return normal(1.0 / std::sqrt(t.fan_in));
                     return trunc(1.0 / std::sqrt(t.fan_in) / kJaxTrunc2, 2.0);
                   },
                   [](const Model&) { return Scales{1.0, 1.0, 1.0}; }}},

      // LLM Foundry small_init_: sqrt(2/(5d)); out_proj, down_proj / sqrt(2 n_layers).
      {"llm_foundry_small_init", {"init-only", [](const Tensor& t, const Model& m) {
                                    const double s = std::sqrt(2.0 / (5.0 * m.d));
                                    return normal(is_out(t.cls) ? s / std::sqrt(2.0 * m.L) : s);
                                  }}},

      // neox_init_: sqrt(2/(5d)); residual divisor n_layers/sqrt(10).
      {"neox", {"init-only", [](const Tensor& t, const Model& m) {
                  const double s = std::sqrt(2.0 / (5.0 * m.d));
                  return normal(is_out(t.cls) ? s / (m.L / std::sqrt(10.0)) : s);
                }}},

      // Cerebras default: trunc_normal 0.02 with a, b = ∓2·std; outputs 0.02/sqrt(2N);
      // untied lm_head normal_(0.02) (gpt2_model.py).
      {"cerebras", {"init-only", [](const Tensor& t, const Model& m) {
                      if (t.cls == C::lm_head) return normal(0.02);
                      return trunc(is_out(t.cls) ? 0.02 / std::sqrt(2.0 * m.L) : 0.02, 2.0);
                    }}},

      // Spectral μP (nanotron): σ = fan_in^-1/2 · min(1, sqrt(fan_out/fan_in)), lr × fan_out/fan_in
      // for linears (the LM head is a linear there); embedding 1.0 at the global lr; attention 1/hd.
      {"nanotron_spectral_mup",
       {"full",
        [](const Tensor& t, const Model&) {
          if (t.cls == C::embedding) return normal(1.0, 1.0);
          return normal((1.0 / std::sqrt(t.fan_in)) * std::min(1.0, std::sqrt(t.fan_out / t.fan_in)), t.fan_out / t.fan_in);
        },
        [](const Model& m) { return Scales{1.0, 1.0 / m.hd, 1.0}; }}},

      // μP (TP5, Adam, Table 3 form normalized to SP at base width n₀ = base_width):
      // embedding n^-1/2 at lr η; hidden fan_in^-1/2 at η/m; LM head and router (output-type)
      // sqrt(n₀)/n = fan_in^-1/2/sqrt(m) at η/m; attention 1/d_head; no logit multiplier.
      {"mup", {"full",
               [](const Tensor& t, const Model& m) {
                 const double wm = m.width_mult();
                 if (t.cls == C::embedding) return normal(1.0 / std::sqrt(m.d), 1.0);
                 if (t.cls == C::lm_head || t.cls == C::router) return normal(std::sqrt(m.base_width) / m.d, 1.0 / wm);
                 return normal(1.0 / std::sqrt(t.fan_in), 1.0 / wm);
               },
               [](const Model& m) { return Scales{1.0, 1.0 / m.hd, 1.0}; }}},

      // u-μP init: A_W = 1 (embedding), 1/sqrt(fan_in) (hidden), 1/fan_in (LM head, router).
      {"u_mup", {"init-only", [](const Tensor& t, const Model&) {
                   if (t.cls == C::embedding) return normal(1.0);
                   if (t.cls == C::lm_head || t.cls == C::router) return normal(1.0 / t.fan_in);
                   return normal(1.0 / std::sqrt(t.fan_in));
                 }}},

      // Spike No More: sqrt(2/(5d)); outputs sqrt(1/(5 d N)); embedding output × sqrt(d).
      {"spike_no_more", {"full",
                         [](const Tensor& t, const Model& m) {
                           if (is_out(t.cls)) return normal(std::sqrt(1.0 / (5.0 * m.d * m.L)));
                           return normal(std::sqrt(2.0 / (5.0 * m.d)));
                         },
                         [](const Model& m) { return Scales{std::sqrt(m.d), 0.0, 1.0}; }}},

      // Trinity: trunc_normal(0.5/sqrt(d), a, b = ∓1.5/sqrt(d)) for every matrix; embedding × sqrt(d).
      {"trinity", {"full",
                   [](const Tensor&, const Model& m) {
                     const double s = 0.5 / std::sqrt(m.d);
                     return trunc(s, (1.5 / std::sqrt(m.d)) / s);
                   },
                   [](const Model& m) { return Scales{std::sqrt(m.d), 0.0, 1.0}; }}},

      // DeepNet decoder: Xavier normal; V, attention output and FFN × β = (8M)^(-1/4).
      {"deepnet", {"init-only", [](const Tensor& t, const Model& m) {
                     const double xavier = std::sqrt(2.0 / (t.fan_in + t.fan_out));
                     const double beta = 1.0 / std::sqrt(std::sqrt(8.0 * m.L));
                     const bool scaled = is(t.cls, {C::attn_v, C::attn_o, C::mlp_gate, C::mlp_up, C::mlp_down, C::expert_gate,
                                                    C::expert_up, C::expert_down, C::shared_gate, C::shared_up,
                                                    C::shared_down});
                     return normal(scaled ? xavier * beta : xavier);
                   }}},

      // SmallInit: sqrt(2/(5 d_model)) throughout, no depth scaling.
      {"small_init", {"init-only", [](const Tensor&, const Model& m) { return normal(std::sqrt(2.0 / (5.0 * m.d))); }}},

      // DS-Init: U(±sqrt(6/(fan_in+fan_out))/sqrt(l)), l 1-indexed; std = bound/sqrt(3).
      {"ds_init", {"init-only", [](const Tensor& t, const Model&) {
                     const double bound = std::sqrt(6.0 / (t.fan_in + t.fan_out)) / std::sqrt(t.layer + 1.0);
                     return uniform(bound / std::sqrt(3.0));
                   }}},

      // DeepSeek-V3: all learnable parameters normal(0.006).
      {"deepseek_v3", {"init-only", [](const Tensor&, const Model&) { return normal(0.006); }}},
  };
  return table;
}

std::vector<std::string> preset_case_names() {
  std::vector<std::string> names;
  for (const auto& [name, _] : presets()) names.push_back(name);
  return names;
}

std::vector<std::string> preset_files() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(fs::path(GCOMPILE_SOURCE_DIR) / "specs" / "presets")) {
    if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Standard deviation of a standard normal truncated to [-c, c], by composite
// Simpson integration (independent of the planner's closed form).
double truncated_std_factor(double c) {
  static std::map<double, double> cache;
  auto it = cache.find(c);
  if (it != cache.end()) return it->second;
  const double lim = std::min(c, 40.0);  // φ is 0 in double precision beyond ~38
  const int n = 800000;                  // even
  const double h = 2.0 * lim / n;
  double mass = 0.0, second = 0.0;
  for (int i = 0; i <= n; ++i) {
    const double x = -lim + i * h;
    const double w = (i == 0 || i == n) ? 1.0 : (i % 2 ? 4.0 : 2.0);
    const double phi = std::exp(-0.5 * x * x);
    mass += w * phi;
    second += w * x * x * phi;
  }
  const double f = std::sqrt(second / mass);
  cache[c] = f;
  return f;
}

void expect_rel(double actual, double expected, double tol, const std::string& what) {
  EXPECT_NEAR(actual, expected, tol * std::abs(expected)) << what;
}

// ---------------------------------------------------------------------------
// Per-preset, per-model checks

class PresetTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PresetTest, StdsMatchSeedFormulas) {
  const std::string name = std::get<0>(GetParam());
  const Model model = models()[std::get<1>(GetParam())];
  const PresetCase& pc = presets().at(name);

  Diagnostics diags;
  auto spec = test::spec_from(spec_text(name, model), diags);
  ASSERT_TRUE(spec) << ::testing::PrintToString(test::messages(diags));
  auto plan = make_plan(*spec, diags);
  ASSERT_TRUE(plan) << ::testing::PrintToString(test::messages(diags));
  EXPECT_EQ(diags.error_count(), 0u);

  // The tensors are exactly the ones the model description implies.
  std::vector<ExpectedTensor> want = expected_tensors(model);
  std::vector<const ParamEntry*> weights;
  for (const auto& p : plan->params) {
    if (p.cls != ParamClass::norm) weights.push_back(&p);
  }
  using Key = std::tuple<int, int, std::vector<std::int64_t>>;  // class, layer, shape
  std::vector<Key> got_keys, want_keys;
  for (const ParamEntry* p : weights) got_keys.emplace_back(static_cast<int>(p->cls), p->layer, p->shape);
  for (const auto& w : want) want_keys.emplace_back(static_cast<int>(w.cls), w.layer, w.shape);
  std::sort(got_keys.begin(), got_keys.end());
  std::sort(want_keys.begin(), want_keys.end());
  ASSERT_EQ(got_keys, want_keys) << "the planner's weight tensors differ from the model description";

  const bool full = pc.scope == "full";
  std::set<ParamClass> seen;
  for (const ParamEntry* pp : weights) {
    const ParamEntry& p = *pp;
    SCOPED_TRACE(name + " / " + model.label + " / " + p.name);
    seen.insert(p.cls);
    // Fans from the shape: [out, in] or [experts, out, in].
    const double fan_in = static_cast<double>(p.shape.back());
    const double fan_out = static_cast<double>(p.shape[p.shape.size() - 2]);
    EXPECT_EQ(static_cast<double>(p.fan_in), fan_in);
    EXPECT_EQ(static_cast<double>(p.fan_out), fan_out);

    const Tensor t{p.cls, static_cast<double>(std::max(p.layer, 0)), fan_in, fan_out};
    const Expect e = pc.rule(t, model);
    expect_rel(p.std, e.std, 1e-12, "std");
    EXPECT_EQ(p.distribution, e.dist);
    if (e.dist == Distribution::trunc_normal) {
      expect_rel(p.cutoff, e.cutoff, 1e-12, "cutoff");
      expect_rel(p.effective_std, e.std * truncated_std_factor(e.cutoff), 1e-10, "effective_std");
    } else {
      expect_rel(p.effective_std, e.std, 1e-12, "effective_std");
    }
    expect_rel(p.lr_mult, full ? e.lr : 1.0, 1e-12, "lr_mult");
  }
  // Every class the model has was checked (the dense model has no MoE classes).
  std::set<ParamClass> want_classes;
  for (const auto& w : want) want_classes.insert(w.cls);
  EXPECT_EQ(seen, want_classes);

  // Norm gains start at 1 and keep the base learning rate in every preset.
  for (const auto& p : plan->params) {
    if (p.cls != ParamClass::norm) continue;
    EXPECT_EQ(p.init_value, 1.0) << p.name;
    EXPECT_EQ(p.lr_mult, 1.0) << p.name;
  }

  // Forward scales: defaults unless the preset is full-scope.
  const Scales s = full ? pc.scales(model) : Scales{};
  expect_rel(plan->embedding_scale, s.embedding, 1e-12, "embedding_scale");
  expect_rel(plan->attn_scale, s.attn > 0 ? s.attn : 1.0 / std::sqrt(model.hd), 1e-12, "attn_scale");
  expect_rel(plan->logit_scale, s.logit, 1e-12, "logit_scale");
  expect_rel(plan->width_mult, model.width_mult(), 1e-12, "width_mult");
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + models()[std::get<1>(info.param)].label;
}

INSTANTIATE_TEST_SUITE_P(Presets, PresetTest,
                         ::testing::Combine(::testing::ValuesIn(preset_case_names()), ::testing::Range(0, 3)),
                         case_name);

// ---------------------------------------------------------------------------
// The preset files themselves

TEST(PresetFiles, EveryPresetHasATestCase) {
  const std::vector<std::string> files = preset_files();
  const std::vector<std::string> cases = preset_case_names();
  ASSERT_FALSE(files.empty());
  for (const auto& f : files) {
    EXPECT_TRUE(presets().count(f)) << "specs/presets/" << f << ".toml has no entry in presets() in " << __FILE__;
  }
  for (const auto& c : cases) {
    EXPECT_TRUE(std::find(files.begin(), files.end(), c) != files.end())
        << "presets() has an entry for '" << c << "' but there is no specs/presets/" << c << ".toml";
  }
}

TEST(PresetFiles, EmbeddedPresetsMatchTheFiles) {
  // The compiler embeds specs/presets at configure time; a stale build would
  // test (and ship) old presets.
  EXPECT_EQ(preset_names(), preset_files());
  for (const auto& name : preset_files()) {
    const std::string* embedded = preset_source(name);
    ASSERT_NE(embedded, nullptr) << name;
    EXPECT_EQ(*embedded, read_text(fs::path(GCOMPILE_SOURCE_DIR) / "specs" / "presets" / (name + ".toml")))
        << "the embedded copy of specs/presets/" << name << ".toml is stale: re-run cmake";
  }
}

TEST(PresetFiles, HeaderMatchesFileAndScope) {
  for (const auto& name : preset_files()) {
    SCOPED_TRACE(name);
    const fs::path path = fs::path(GCOMPILE_SOURCE_DIR) / "specs" / "presets" / (name + ".toml");
    const std::string text = read_text(path);
    EXPECT_EQ(text.rfind("# ", 0), 0u) << "a preset starts with a comment header citing its source";
    toml::table t;
    try {
      t = toml::parse(text, path.string());
    } catch (const toml::parse_error& e) {
      FAIL() << e.description();
    }
    EXPECT_EQ(t["preset"]["name"].value_or(std::string()), name);
    EXPECT_FALSE(t["preset"]["description"].value_or(std::string()).empty());
    EXPECT_FALSE(t["preset"]["source"].value_or(std::string()).empty());
    const std::string scope = t["preset"]["scope"].value_or(std::string());
    // init-only presets set initialization only; full presets also set lr
    // multipliers or forward scales.
    const bool sets_more = t.contains("optim") || t.contains("model");
    EXPECT_EQ(scope, sets_more ? "full" : "init-only");
    auto it = presets().find(name);
    if (it != presets().end()) {
      EXPECT_EQ(scope, it->second.scope);
    }
  }
}

// A user's per-class key replaces the preset's rule for that class only.
TEST(PresetMerge, UserClassKeyOverridesPresetRule) {
  Model m = models()[0];
  Diagnostics diags;
  auto spec = test::spec_from(spec_text("olmo_mitchell", m, "\n[init.attn_q]\ngamma = 1.0\n"), diags);
  ASSERT_TRUE(spec) << ::testing::PrintToString(test::messages(diags));
  auto plan = make_plan(*spec, diags);
  ASSERT_TRUE(plan) << ::testing::PrintToString(test::messages(diags));
  for (const auto& p : plan->params) {
    if (p.cls == ParamClass::attn_q) {
      expect_rel(p.std, 1.0 / m.d, 1e-12, p.name);
      EXPECT_EQ(p.distribution, Distribution::trunc_normal) << p.name;  // the preset's default remains
    } else if (p.cls == ParamClass::attn_k) {
      expect_rel(p.std, 1.0 / std::sqrt(m.d), 1e-12, p.name);
    }
  }
}

}  // namespace
}  // namespace gc
