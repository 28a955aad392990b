// `experiment.extends`: key-by-key merging over chains of files, exclusive
// alternatives across files, and errors in bases, missing bases and cycles,
// reported with the right file name, line and column.
//
// Every test writes its files into a fresh directory and loads the root with
// gc::load_spec(path): the root's label is the path as given, a base's label
// is (directory of the file naming it) / (extends value), lexically
// normalized.
//
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

// The minimal spec with `extends = "<base>"` on line 3 (all other lines of
// the minimal spec move down by one: [model] is line 5, [train] line 15).
std::string complete_spec_extending(const std::string& base) {
  std::string s = gc::test::minimal_spec_sections();
  const std::string name_line = "name = \"t\"\n";
  s.insert(s.find(name_line) + name_line.size(), "extends = \"" + base + "\"\n");
  return s;
}

std::string err(const std::string& file, const std::string& where, const std::string& message) {
  return file + (where.empty() ? "" : ":" + where) + ": error: " + message;
}

class ExtendsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("gc_extends_" + std::string(info->name()) + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Writes `text` to dir/rel and returns the path (the label of a root file).
  std::string write(const std::string& rel, const std::string& text) {
    const fs::path p = dir_ / rel;
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    out << text;
    return p.string();
  }
  // The label of a base file at dir/rel.
  std::string label(const std::string& rel) const { return (dir_ / rel).lexically_normal().string(); }

  std::optional<gc::Spec> load(const std::string& path) { return gc::load_spec(path, diags_); }
  Strings messages() const { return gc::test::messages(diags_); }

  static const gc::ClassRule& rule(const gc::Spec& spec, gc::ParamClass c) {
    return spec.init.classes[static_cast<std::size_t>(c)];
  }

  fs::path dir_;
  gc::Diagnostics diags_;
};

// ---------------------------------------------------------------------------
// Merging

TEST_F(ExtendsTest, ChildOverridesBaseKeyByKey) {
  write("base.toml", gc::test::minimal_spec_sections());
  const std::string child = write("child.toml", R"([experiment]
name = "child"
extends = "base.toml"

[model]
d_model = 128
qk_norm = true
)");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(messages(), Strings{});
  EXPECT_EQ(spec->experiment.name, "child");
  EXPECT_EQ(spec->model.d_model, 128);     // overridden
  EXPECT_TRUE(spec->model.qk_norm);        // added
  EXPECT_EQ(spec->model.n_layers, 2);      // inherited from the same section
  EXPECT_EQ(spec->model.vocab_size, 512);  // inherited
  EXPECT_EQ(spec->model.d_ff, 128);
  EXPECT_EQ(spec->model.head_dim, 32);  // derived from the merged values: 128 / 4
  EXPECT_DOUBLE_EQ(spec->optim.lr, 1e-3);
  EXPECT_EQ(spec->train.steps, 10);
  EXPECT_EQ(spec->document.chain, (Strings{child, label("base.toml")}));
  EXPECT_EQ(spec->document.settings.count("experiment.extends"), 0u);
  // Every merged key remembers the file and position it came from.
  EXPECT_EQ(spec->where("model.d_model").file, child);
  EXPECT_EQ(spec->where("model.d_model").line, 6);
  EXPECT_EQ(spec->where("model.n_layers").file, label("base.toml"));
  EXPECT_EQ(spec->where("model.n_layers").line, 7);
  EXPECT_EQ(spec->where("model.n_layers").col, 12);
  EXPECT_EQ(spec->where_key("experiment.name").file, child);
}

TEST_F(ExtendsTest, ChainOfThreeFilesAcrossDirectories) {
  // c.toml is complete; b.toml (next to it) extends it; a.toml, in another
  // directory, extends b.toml. Each extends is relative to its own file.
  write("d2/c.toml", R"([experiment]
name = "from_c"
description = "c"

[model]
vocab_size = 512
d_model = 64
n_layers = 2
n_heads = 4
d_ff = 128

[optim]
lr = 1e-3

[train]
seq_len = 32
global_batch = 4
steps = 10

[data]
format = "synthetic"
)");
  write("d2/b.toml", R"([experiment]
extends = "c.toml"
name = "from_b"

[model]
d_model = 128
n_layers = 3
)");
  const std::string a = write("d1/a.toml", R"([experiment]
extends = "../d2/b.toml"

[model]
n_layers = 4
)");
  auto spec = load(a);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(spec->experiment.name, "from_b");       // b over c
  EXPECT_EQ(spec->experiment.description, "c");     // c only
  EXPECT_EQ(spec->model.d_model, 128);               // b over c
  EXPECT_EQ(spec->model.n_layers, 4);                // a over b over c
  EXPECT_EQ(spec->model.vocab_size, 512);            // c only
  EXPECT_EQ(spec->document.chain, (Strings{a, label("d2/b.toml"), label("d2/c.toml")}));
  EXPECT_EQ(spec->where("model.n_layers").file, a);
  EXPECT_EQ(spec->where("model.d_model").file, label("d2/b.toml"));
  EXPECT_EQ(spec->where("experiment.description").file, label("d2/c.toml"));
}

TEST_F(ExtendsTest, ChildTokensReplacesBaseSteps) {
  write("base.toml", gc::test::minimal_spec_sections());
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[train]\ntokens = 12800\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(messages(), Strings{});
  EXPECT_EQ(spec->train.tokens, 12800);
  EXPECT_FALSE(spec->train.steps.has_value());
  EXPECT_EQ(spec->document.settings.count("train.steps"), 0u);
}

TEST_F(ExtendsTest, ChildStepsReplacesBaseTokens) {
  std::string base = gc::test::minimal_spec_sections();
  base.replace(base.find("steps = 10"), 10, "tokens = 12800");
  write("base.toml", base);
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[train]\nsteps = 7\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(spec->train.steps, 7);
  EXPECT_FALSE(spec->train.tokens.has_value());
}

TEST_F(ExtendsTest, ChildGammaReplacesBaseStd) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[init.attn_q]\nstd = \"0.02 / sqrt(2 * n_layers)\"\n");
  const std::string child =
      write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[init.attn_q]\ngamma = 1.0\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(messages(), Strings{});
  const auto& q = rule(*spec, gc::ParamClass::attn_q);
  EXPECT_EQ(q.gamma, 1.0);
  EXPECT_FALSE(q.std.has_value());
  EXPECT_EQ(spec->document.settings.count("init.attn_q.std"), 0u);
}

TEST_F(ExtendsTest, ChildStdReplacesBaseGamma) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[init.attn_q]\ngamma = 1.0\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[init.attn_q]\nstd = 0.02\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  const auto& q = rule(*spec, gc::ParamClass::attn_q);
  EXPECT_FALSE(q.gamma.has_value());
  ASSERT_TRUE(q.std.has_value());
  EXPECT_EQ(q.std->expr.eval({}, nullptr), 0.02);
}

TEST_F(ExtendsTest, ReplacingOneClassRuleKeepsTheOtherClasses) {
  write("base.toml",
        gc::test::minimal_spec_sections() + "\n[init.attn_q]\nstd = 0.02\n\n[init.attn_k]\ngamma = 0.75\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[init.attn_q]\ngamma = 1.0\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(rule(*spec, gc::ParamClass::attn_q).gamma, 1.0);
  EXPECT_FALSE(rule(*spec, gc::ParamClass::attn_q).std.has_value());
  EXPECT_EQ(rule(*spec, gc::ParamClass::attn_k).gamma, 0.75);  // another class's rule group is untouched
}

TEST_F(ExtendsTest, ChildWarmupStepsReplacesBaseWarmupRatio) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[schedule]\nwarmup_ratio = 0.1\ndecay = \"linear\"\n");
  const std::string child =
      write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[schedule]\nwarmup_steps = 3\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(spec->schedule.warmup_steps, 3);
  EXPECT_FALSE(spec->schedule.warmup_ratio.has_value());
  EXPECT_EQ(spec->schedule.decay, gc::Decay::linear);  // the rest of the section is inherited
}

TEST_F(ExtendsTest, AlternativeChosenInTheMiddleOfAChainCanBeReplacedAgain) {
  write("c.toml", gc::test::minimal_spec_sections());                               // steps = 10
  write("b.toml", "[experiment]\nextends = \"c.toml\"\n\n[train]\ntokens = 12800\n");  // tokens replace steps
  const std::string a = write("a.toml", "[experiment]\nextends = \"b.toml\"\n\n[train]\nsteps = 5\n");
  auto spec = load(a);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(spec->train.steps, 5);
  EXPECT_FALSE(spec->train.tokens.has_value());
}

TEST_F(ExtendsTest, BothAlternativesInTheChildAreStillAnError) {
  write("base.toml", gc::test::minimal_spec_sections());
  const std::string child =
      write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[train]\nsteps = 5\ntokens = 12800\n");
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "6:1", "'train.tokens' and 'train.steps' are alternatives; set only one")}));
}

TEST_F(ExtendsTest, PresetNamedInBaseIsMergedUnderTheWholeChain) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[init]\npreset = \"gamma\"\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[init]\nfan = \"d_model\"\n");
  auto spec = load(child);
  ASSERT_TRUE(spec.has_value()) << ::testing::PrintToString(messages());
  EXPECT_EQ(spec->init.preset, "gamma");
  EXPECT_DOUBLE_EQ(spec->init.gamma, 1.0);            // from the preset
  EXPECT_EQ(spec->init.fan, gc::FanMode::d_model);    // the child overrides the preset
  EXPECT_EQ(spec->document.chain, (Strings{child, label("base.toml"), "specs/presets/gamma.toml"}));
}

TEST_F(ExtendsTest, BaseValueSurvivesAnInvalidOverrideInTheMiddle) {
  write("c.toml", gc::test::minimal_spec_sections());
  write("b.toml", "[experiment]\nextends = \"c.toml\"\n\n[model]\nd_model = \"wide\"\n");
  const std::string a = write("a.toml", "[experiment]\nextends = \"b.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  // Only the bad value is reported: c's d_model still satisfies "required".
  EXPECT_EQ(messages(), (Strings{err(label("b.toml"), "5:11", "'model.d_model' must be an integer, not string \"wide\"")}));
}

// ---------------------------------------------------------------------------
// Diagnostics in bases

TEST_F(ExtendsTest, ErrorsInsideABaseUseTheBaseFileNameAndLine) {
  write("badbase.toml", R"([experiment]
name = "bb"

[model]
vocab_size = 512
d_model = 64
n_layers = 2
n_heads = 4
d_ff = 128
norm_eps = 0

[init.attn_q]
std = "0.02 * foo"
)");
  const std::string kid = write("sub/kid.toml", R"([experiment]
extends = "../badbase.toml"

[optim]
lr = 1e-3

[train]
seq_len = 32
global_batch = 4
steps = 10

[data]
format = "synthetic"
)");
  EXPECT_FALSE(load(kid).has_value());
  const std::string base = label("badbase.toml");
  EXPECT_EQ(base, (dir_ / "badbase.toml").string());  // "sub/../badbase.toml", normalized
  EXPECT_EQ(messages(),
            (Strings{err(base, "10:12", "'model.norm_eps' must be > 0 (got 0)"),
                     err(base, "13:15",
                         "in 'init.attn_q.std': unknown variable 'foo' (variables: d_model, n_layers, d_ff, head_dim, "
                         "n_heads, n_kv_heads, vocab, width_mult, fan_in, fan_out, layer, gamma)")}));
}

TEST_F(ExtendsTest, ErrorsInTwoFilesAreGroupedByFile) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[init]\ngamma = 9\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[model]\ncolour = 1\n");
  EXPECT_FALSE(load(child).has_value());
  // The child is read first, so its diagnostics come first.
  EXPECT_EQ(messages(), (Strings{err(child, "5:1", "unknown key 'colour' in [model]"),
                                 err(label("base.toml"), "23:9", "'init.gamma' must be in [0, 4] (got 9)")}));
}

TEST_F(ExtendsTest, WarningInsideABaseUsesTheBaseFileName) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[init]\ngamma = 1.5\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n");
  EXPECT_TRUE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{label("base.toml") +
                                 ":23:9: warning: 'init.gamma' = 1.5 is above 1.25: seed 000 §2.4 finds the loss gets "
                                 "worse beyond γ = 1, where the network starts close to an identity map"}));
}

TEST_F(ExtendsTest, MissingKeyIsReportedAtTheBaseSectionHeader) {
  std::string base = gc::test::minimal_spec_sections();
  base.erase(base.find("vocab_size = 512\n"), 17);
  write("base.toml", base);
  const std::string child = write("child.toml", "[experiment]\nextends = \"base.toml\"\n");
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("base.toml"), "4:1", "missing required key 'vocab_size' in [model]")}));
}

TEST_F(ExtendsTest, MissingKeyIsReportedAtTheChildSectionHeaderWhenBothHaveIt) {
  std::string base = gc::test::minimal_spec_sections();
  base.erase(base.find("vocab_size = 512\n"), 17);
  write("base.toml", base);
  const std::string child =
      write("child.toml", "[experiment]\nextends = \"base.toml\"\n\n[model]\nqk_norm = true\n");
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "4:1", "missing required key 'vocab_size' in [model]")}));
}

TEST_F(ExtendsTest, SyntaxErrorInABase) {
  write("synbase.toml", "[model\n");
  const std::string child = write("child.toml", complete_spec_extending("synbase.toml"));
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("synbase.toml"), "1:7",
                                     "TOML syntax: Error while parsing table header: expected ']', saw '\\n'")}));
}

// Regression (was wrong before): when a base cannot be parsed, the child is validated on
// its own and every key the base would have provided is reported missing
// (11 more errors here). Only the syntax error should be reported.
TEST_F(ExtendsTest, SyntaxErrorInABaseIsNotFollowedByMissingKeys) {
  write("synbase.toml", "[model\n");
  const std::string child = write("child.toml", "[experiment]\nextends = \"synbase.toml\"\n");
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("synbase.toml"), "1:7",
                                     "TOML syntax: Error while parsing table header: expected ']', saw '\\n'")}));
}

TEST_F(ExtendsTest, RelativeBasePathIsNormalizedInLabels) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[distributed]\nzero_stage = 7\n");
  fs::create_directories(dir_ / "x");
  const std::string kid = write("sub/kid.toml", "[experiment]\nextends = \"../x/../base.toml\"\n");
  EXPECT_FALSE(load(kid).has_value());
  EXPECT_EQ(messages(),
            (Strings{err((dir_ / "base.toml").string(), "23:14", "'distributed.zero_stage' must be in [0, 3] (got 7)")}));
}

TEST_F(ExtendsTest, SpecFromTextResolvesBasesInTheGivenDirectory) {
  write("base.toml", gc::test::minimal_spec_sections() + "\n[distributed]\nzero_stage = 7\n");
  auto spec = gc::test::spec_from("[experiment]\nextends = \"base.toml\"\n", diags_, dir_.string());
  EXPECT_FALSE(spec.has_value());
  EXPECT_EQ(messages(), (Strings{err(label("base.toml"), "23:14", "'distributed.zero_stage' must be in [0, 3] (got 7)")}));
}

// ---------------------------------------------------------------------------
// Missing bases and cycles

TEST_F(ExtendsTest, MissingBaseFile) {
  const std::string child = write("child.toml", complete_spec_extending("nope.toml"));
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "3:11", "cannot read base spec '" + label("nope.toml") +
                                                        "' named by extends (no such file)")}));
}

// Regression (was wrong before): with an incomplete child (the usual case: the base holds
// the model), a missing base is followed by 11 "missing required key" errors.
TEST_F(ExtendsTest, MissingBaseFileIsNotFollowedByMissingKeys) {
  const std::string child = write("child.toml", "[experiment]\nname = \"m\"\nextends = \"nope.toml\"\n");
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "3:11", "cannot read base spec '" + label("nope.toml") +
                                                        "' named by extends (no such file)")}));
}

TEST_F(ExtendsTest, BaseThatIsADirectory) {
  fs::create_directories(dir_ / "sub");
  const std::string child = write("child.toml", complete_spec_extending("sub"));
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "3:11", "cannot read base spec '" + label("sub") +
                                                        "' named by extends (not a readable file)")}));
}

// Regression (was wrong before): `extends = ""` is reported as an unreadable base named by
// the directory itself ("cannot read base spec '<dir>/' ... (not a readable
// file)"); an empty extends should be rejected as such.
TEST_F(ExtendsTest, EmptyExtends) {
  const std::string child = write("child.toml", complete_spec_extending(""));
  EXPECT_FALSE(load(child).has_value());
  EXPECT_EQ(messages(), (Strings{err(child, "3:11", "'experiment.extends' must not be empty")}));
}

TEST_F(ExtendsTest, CycleOfTwoFiles) {
  const std::string a = write("a.toml", complete_spec_extending("b.toml"));
  write("b.toml", "[experiment]\nextends = \"a.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("b.toml"), "2:11",
                                     "extends cycle: " + a + " -> " + label("b.toml") + " -> " + label("a.toml"))}));
}

// Regression (was wrong before): with incomplete files in the cycle, 11 "missing required
// key" errors follow the cycle error; only the cycle should be reported.
TEST_F(ExtendsTest, CycleIsNotFollowedByMissingKeys) {
  const std::string a = write("a.toml", "[experiment]\nextends = \"b.toml\"\n");
  write("b.toml", "[experiment]\nextends = \"a.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("b.toml"), "2:11",
                                     "extends cycle: " + a + " -> " + label("b.toml") + " -> " + label("a.toml"))}));
}

TEST_F(ExtendsTest, CycleOfThreeFiles) {
  const std::string a = write("a.toml", complete_spec_extending("b.toml"));
  write("b.toml", "[experiment]\nextends = \"c.toml\"\n");
  write("c.toml", "[model]\nqk_norm = true\n\n[experiment]\nextends = \"a.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("c.toml"), "5:11",
                                     "extends cycle: " + a + " -> " + label("b.toml") + " -> " + label("c.toml") +
                                         " -> " + label("a.toml"))}));
}

TEST_F(ExtendsTest, CycleThatDoesNotPassThroughTheRoot) {
  const std::string a = write("a.toml", complete_spec_extending("b.toml"));
  write("b.toml", "[experiment]\nextends = \"c.toml\"\n");
  write("c.toml", "[experiment]\nextends = \"b.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(label("c.toml"), "2:11",
                                     "extends cycle: " + a + " -> " + label("b.toml") + " -> " + label("c.toml") +
                                         " -> " + label("b.toml"))}));
}

TEST_F(ExtendsTest, SelfExtends) {
  const std::string a = write("a.toml", complete_spec_extending("a.toml"));
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(a, "3:11", "extends cycle: " + a + " -> " + label("a.toml"))}));
}

TEST_F(ExtendsTest, SelfExtendsThroughADotPath) {
  const std::string a = write("sub/a.toml", complete_spec_extending("./../sub/a.toml"));
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(a, "3:11", "extends cycle: " + a + " -> " + label("sub/a.toml"))}));
}

// Regression (was wrong before): a file extending itself with nothing else in it gets the
// cycle error plus 11 "missing required key" errors.
TEST_F(ExtendsTest, SelfExtendsIsNotFollowedByMissingKeys) {
  const std::string a = write("a.toml", "[experiment]\nextends = \"a.toml\"\n");
  EXPECT_FALSE(load(a).has_value());
  EXPECT_EQ(messages(), (Strings{err(a, "2:11", "extends cycle: " + a + " -> " + label("a.toml"))}));
}

TEST_F(ExtendsTest, MissingRootFile) {
  const std::string path = (dir_ / "absent.toml").string();
  EXPECT_FALSE(load(path).has_value());
  EXPECT_EQ(messages(), (Strings{err(path, "", "no such spec file")}));
}

TEST_F(ExtendsTest, RootThatIsADirectory) {
  EXPECT_FALSE(load(dir_.string()).has_value());
  EXPECT_EQ(messages(), (Strings{err(dir_.string(), "", "not a regular file")}));
}

}  // namespace
