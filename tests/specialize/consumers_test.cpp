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
