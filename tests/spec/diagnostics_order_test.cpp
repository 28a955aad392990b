// Several errors in one spec: all reported in one run, in source order (whatever the schema's or
// toml++'s order). The table-driven cases of single errors are in diagnostics_test.cpp.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "spec/load.hpp"
#include "test_util.hpp"

namespace {

using Strings = std::vector<std::string>;


// A spec with five independent errors, written in an order that differs from
// both the schema's and toml++'s (alphabetical) order, reports all five in
// one run, in source order.
TEST(DiagnosticsOrderTest, ReportsEveryErrorInSourceOrder) {
  const std::string text = R"([experiment]
name = "Bad Name"

[model]
vocab_size = 512
d_model = 64
n_layers = 2
n_heads = 4
d_ff = 128
norm_eps = 0
colour = "blue"

[optim]
lr = "fast"

[train]
seq_len = 32
global_batch = 4
steps = 10
precision = "fp16"

[data]
format = "synthetic"
)";
  gc::Diagnostics diags;
  auto spec = gc::test::spec_from(text, diags);
  EXPECT_FALSE(spec.has_value());
  EXPECT_EQ(diags.error_count(), 5u);
  EXPECT_EQ(gc::test::messages(diags),
            (Strings{gc::test::spec_error("2:8", "'experiment.name' may contain only a-z, 0-9, '_', '.' and '-' (found 'B' at position 1)"),
                     gc::test::spec_error("10:12", "'model.norm_eps' must be > 0 (got 0)"),
                     gc::test::spec_error("11:1", "unknown key 'colour' in [model]"),
                     gc::test::spec_error("14:6", "'optim.lr' must be a number, not string \"fast\""),
                     gc::test::spec_error("20:13", "'train.precision' has no option \"fp16\"; did you mean \"bf16\"? (options: bf16, fp32)")}));
}

}  // namespace
