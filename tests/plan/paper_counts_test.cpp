// The paper specs reproduce the parameter counts the seeds report.
// Seed 000 Table 2 (non-embedding; gated-attention parameters) and Table 3
// (total and active, untied embeddings counted in both).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "plan/plan.hpp"
#include "spec/spec.hpp"

namespace gc {
namespace {

Plan plan_of(const std::string& relative) {
  Diagnostics diags;
  auto spec = load_spec(std::string(GCOMPILE_SOURCE_DIR) + "/" + relative, diags);
  EXPECT_TRUE(spec) << relative;
  auto plan = make_plan(*spec, diags);
  EXPECT_TRUE(plan) << relative;
  EXPECT_FALSE(diags.has_errors());
  return *plan;
}

double relative_error(double got, double want) { return std::fabs(got - want) / want; }

struct DenseRow {
  const char* size;
  double non_embedding;  // paper
  double gate;           // paper
};

class SeedZeroTableTwo : public ::testing::TestWithParam<DenseRow> {};

TEST_P(SeedZeroTableTwo, NonEmbeddingAndGateCounts) {
  const DenseRow row = GetParam();
  const std::string base = std::string("specs/paper/seed000/dense_") + row.size;
  const Plan ungated = plan_of(base + "_g1_eps1e-12.toml");
  const Plan gated = plan_of(base + "_g1_eps1e-12_gated.toml");
  const std::string size = row.size;
  if (size == "1.5b") {
    // Table 2's 1.5B architecture (d 2048, 24 layers, 24 heads × 128, d_ff
    // 5460) has 1.409B non-embedding parameters; its "~1.5B" is the model's
    // nominal size (docs/paper_specs.md). Pin the exact count.
    EXPECT_EQ(ungated.counts.non_embedding, 1409189888);
  } else {
    EXPECT_LT(relative_error(double(ungated.counts.non_embedding), row.non_embedding), 0.02) << size;
  }
  EXPECT_EQ(ungated.counts.attn_gate, 0);
  EXPECT_LT(relative_error(double(gated.counts.attn_gate), row.gate), 0.05) << size;
  EXPECT_EQ(gated.counts.non_embedding - ungated.counts.non_embedding, gated.counts.attn_gate);
}

INSTANTIATE_TEST_SUITE_P(Sizes, SeedZeroTableTwo,
                         ::testing::Values(DenseRow{"0.1b", 92e6, 7e6}, DenseRow{"0.3b", 327e6, 25e6},
                                           DenseRow{"0.7b", 680e6, 56e6}, DenseRow{"1.5b", 1.5e9, 150e6}),
                         [](const auto& info) {
                           std::string s = info.param.size;
                           s.erase(std::remove(s.begin(), s.end(), '.'), s.end());
                           return "dense_" + s;
                         });

TEST(SeedZeroTableThree, TotalAndActiveWithinTenPercent) {
  struct Row {
    const char* spec;
    double total, active;
  };
  for (const Row& row : {Row{"specs/paper/seed000/moe_1.5b_a250m.toml", 1.4e9, 260e6},
                         Row{"specs/paper/seed000/moe_3.2b_a0.5b.toml", 3.2e9, 470e6}}) {
    const Plan plan = plan_of(row.spec);
    EXPECT_LT(relative_error(double(plan.counts.total), row.total), 0.10) << row.spec << " " << plan.counts.total;
    EXPECT_LT(relative_error(double(plan.counts.active), row.active), 0.10) << row.spec << " " << plan.counts.active;
  }
}

TEST(SeedZeroTableThree, LayerLayoutIsOneDenseThenMoe) {
  const Plan plan = plan_of("specs/paper/seed000/moe_1.5b_a250m.toml");
  ASSERT_EQ(plan.layers.size(), 12u);
  EXPECT_EQ(plan.layers[0].kind, LayerKind::dense);
  EXPECT_EQ(plan.layers[0].d_ff, 10944);
  for (std::size_t l = 1; l < plan.layers.size(); ++l) EXPECT_EQ(plan.layers[l].kind, LayerKind::moe) << l;
}

TEST(SeedThree, ComplexityConfigurations) {
  struct Row {
    const char* spec;
    double gamma, weight_decay;
  };
  for (const Row& row : {Row{"specs/paper/seed003/dense_0.9b_large.toml", 0.5, 0.1},
                         Row{"specs/paper/seed003/dense_0.9b_small.toml", 1.0, 1.0},
                         Row{"specs/paper/seed003/dense_2.4b_large.toml", 0.5, 0.1},
                         Row{"specs/paper/seed003/dense_2.4b_small.toml", 0.58, 1.0}}) {
    const Plan plan = plan_of(row.spec);
    EXPECT_EQ(plan.spec.init.gamma, row.gamma) << row.spec;
    EXPECT_EQ(plan.spec.optim.weight_decay, row.weight_decay) << row.spec;
    const ParamEntry& q = plan.params[1 + (plan.spec.model.embedding_norm ? 1 : 0) + 1];
    ASSERT_EQ(q.cls, ParamClass::attn_q) << q.name;
    EXPECT_DOUBLE_EQ(q.std, std::pow(double(q.fan_in), -row.gamma));
  }
  EXPECT_NEAR(double(plan_of("specs/paper/seed003/dense_0.9b.toml").counts.total), 0.9e9, 0.1 * 0.9e9);
  EXPECT_NEAR(double(plan_of("specs/paper/seed003/dense_2.4b.toml").counts.total), 2.4e9, 0.1 * 2.4e9);
}

}  // namespace
}  // namespace gc
