// The gcompile command line: exit codes, output streams, determinism, and the
// shipped specs and docs staying in step with the schema.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/wait.h>

#include "common/text.hpp"
#include "spec/schema.hpp"
#include "test_util.hpp"
#include "tree_test_util.hpp"

namespace gc {
namespace {

namespace fs = std::filesystem;

using Result = test::Streams;

// Runs gcompile with `args` (already shell-quoted) in `cwd` (default: the
// source directory), capturing both streams.
Result gcompile(const std::string& args, const std::string& cwd = GCOMPILE_SOURCE_DIR) {
  return test::run_gcompile(args, cwd);
}

TEST(Cli, HelpAndVersion) {
  auto help = gcompile("--help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("usage: gcompile SPEC [--no-build] [--cpu-only] [--cuda-arch LIST] [--quick-build]\n                    [--programs LIST] [-o DIR] [-j N]\n       gcompile <command> [options]"), std::string::npos);
  auto version = gcompile("--version");
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out.rfind("gcompile ", 0), 0u);
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(gcompile("").status, 2);
  auto unknown = gcompile("frobnicate specs/tiny.toml");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.err,
            "gcompile: error: unknown command 'frobnicate' (commands: check, explain, resolve, diff, sweep, report, export, schema, presets; or "
            "a SPEC.toml to generate and build)\n"
            "Run 'gcompile --help' for usage.\n");
  EXPECT_EQ(gcompile("check").status, 2);
  EXPECT_EQ(gcompile("check a.toml b.toml").status, 2);
  auto option = gcompile("explain --jsn specs/tiny.toml");
  EXPECT_EQ(option.status, 2);
  EXPECT_EQ(option.err, "gcompile: error: unknown option '--jsn'\nRun 'gcompile --help' for usage.\n");
  EXPECT_EQ(gcompile("check --json specs/tiny.toml").status, 2);
  EXPECT_EQ(gcompile("check --no-build specs/tiny.toml").status, 2);
  EXPECT_EQ(gcompile("check --cpu-only specs/tiny.toml").status, 2);
  EXPECT_EQ(gcompile("report run --cpu-only").status, 2);
  EXPECT_EQ(gcompile("specs/tiny.toml -j zero").status, 2);
  EXPECT_EQ(gcompile("specs/tiny.toml -o").status, 2);
  EXPECT_EQ(gcompile("specs/tiny.toml specs/tiny.toml").status, 2);
  // --cuda-arch: architectures of compute capability 8.0 or newer, for 'gcompile SPEC' only.
  for (const char* bad : {"75", "sm_90", "90b", "", "80,,90a", "8"}) {
    const auto r = gcompile(std::string("specs/tiny.toml --no-build --cuda-arch '") + bad + "'");
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find("option '--cuda-arch' needs CUDA architectures of compute capability 8.0 or newer"),
              std::string::npos) << r.err;
  }
  EXPECT_EQ(gcompile("check specs/tiny.toml --cuda-arch 90a").status, 2);
  EXPECT_EQ(gcompile("specs/tiny.toml --cpu-only --cuda-arch 90a").status, 2);
  const auto quick_unbuilt = gcompile("specs/tiny.toml --quick-build --no-build");
  EXPECT_EQ(quick_unbuilt.status, 2);
  EXPECT_NE(quick_unbuilt.err.find("--quick-build and --no-build contradict each other"), std::string::npos)
      << quick_unbuilt.err;
  EXPECT_EQ(gcompile("check --quick-build specs/tiny.toml").status, 2);
  for (const char* bad : {"specs/tiny.toml --programs", "specs/tiny.toml --programs train,trian",
                          "specs/tiny.toml --programs train,train", "specs/tiny.toml --programs ,"}) {
    const auto r = gcompile(bad);
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find("option '--programs' needs a comma-separated list of train, analyze"), std::string::npos)
        << bad << "\n" << r.err;
  }
  EXPECT_NE(gcompile("specs/tiny.toml --cpu-only --programs train,parity").err.find("--programs parity needs the CUDA"),
            std::string::npos);
  EXPECT_EQ(gcompile("specs/tiny.toml --programs train --no-build").status, 2);
  EXPECT_EQ(gcompile("report run --quick-build").status, 2);
}

TEST(Cli, SpecErrorsExitOneWithDiagnosticsOnStderr) {
  auto missing = gcompile("check does/not/exist.toml");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.err, "does/not/exist.toml: error: no such spec file\n1 error in does/not/exist.toml\n");
  EXPECT_TRUE(missing.out.empty());

  const fs::path dir = fs::temp_directory_path() / ("gcompile_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.toml") << test::minimal_spec_sections() << "\n[init]\ngama = 1\n";
  auto bad = gcompile("check " + (dir / "bad.toml").string());
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err, (dir / "bad.toml").string() + ":23:1: error: unknown key 'gama' in [init]; did you mean 'gamma'?\n" +
                         "1 error in " + (dir / "bad.toml").string() + "\n");
  fs::remove_all(dir);
}

TEST(Cli, CheckAndExplainTheEmbeddedDefault) {
  auto check = gcompile("check specs/tiny.toml");
  EXPECT_EQ(check.status, 0) << check.err;
  EXPECT_EQ(check.out, "specs/tiny.toml: ok (tiny)\n");
  auto text = gcompile("explain specs/tiny.toml");
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("Parameter table"), std::string::npos);
  EXPECT_NE(text.out.find("self_attn.gate_proj.weight"), std::string::npos);
}

// explain --world-size N: micro-batches per rank, the per-rank model state
// (moments 1/N under ZeRO-1), and the error train would give.
TEST(Cli, ExplainWorldSizeShowsThePerRankJob) {
  // tiny: global_batch 8 = one micro-batch of 8 per step.
  auto one = gcompile("explain specs/tiny.toml --world-size 1");
  EXPECT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find("1 of the step's 1 micro-batches per rank"), std::string::npos) << one.out;
  auto two = gcompile("explain specs/tiny.toml --world-size 2");
  EXPECT_NE(two.out.find("error: the 1 micro-batches of a step do not divide among 2 ranks"), std::string::npos)
      << two.out;
  // moe_3b: 1024 micro-batches per step, moments replicated (zero_stage 0).
  auto eight = gcompile("explain specs/moe_3b.toml --world-size 8");
  EXPECT_NE(eight.out.find("128 of the step's 1024 micro-batches per rank"), std::string::npos) << eight.out;
  EXPECT_NE(eight.out.find("AdamW moments 25.34 GiB (replicated"), std::string::npos) << eight.out;
  auto json = gcompile("explain specs/tiny.toml --json --world-size 2");
  EXPECT_EQ(json.status, 2);
  EXPECT_NE(json.err.find("'--world-size' applies only to 'explain' (text output)"), std::string::npos) << json.err;
  EXPECT_EQ(gcompile("explain specs/tiny.toml --world-size 0").status, 2);
}

TEST(Cli, ExplainJsonListsEveryTensorAndIsDeterministic) {
  auto first = gcompile("explain --json specs/paper/seed000/dense_0.1b_g1_eps1e-12_gated.toml");
  ASSERT_EQ(first.status, 0) << first.err;
  auto second = gcompile("explain --json specs/paper/seed000/dense_0.1b_g1_eps1e-12_gated.toml");
  EXPECT_EQ(first.out, second.out);
  const auto j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["params"].size(), 1u + 12u * 10u + 2u);  // embedding, 10 per layer, final norm, lm_head
  std::int64_t total = 0;
  for (const auto& p : j["params"]) total += p["numel"].get<std::int64_t>();
  EXPECT_EQ(total, j["counts"]["total"].get<std::int64_t>());
  EXPECT_EQ(j["params"][0]["init"]["std"].get<double>(), 1.0 / 768);
}

TEST(Cli, ResolvedSpecRoundTrips) {
  // `resolve` prints a complete spec; loading it again resolves to the same text.
  auto resolved = gcompile("resolve specs/paper/seed000/moe_1.5b_a250m_g1_adjusted.toml");
  ASSERT_EQ(resolved.status, 0) << resolved.err;
  Diagnostics diags;
  auto again = load_spec_text(resolved.out, "resolved.toml", ".", diags);
  ASSERT_TRUE(again) << ::testing::PrintToString(test::messages(diags));
  EXPECT_EQ(resolved_toml(*again), resolved.out);
}

TEST(Cli, EveryShippedSpecChecksClean) {
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(GCOMPILE_SOURCE_DIR) / "specs")) {
    const fs::path p = entry.path();
    if (p.extension() != ".toml" || p.parent_path().filename() == "presets") continue;
    const std::string stem = p.stem().string();
    if (stem == "common" || stem == "moe_common") continue;  // partial bases, not specs
    const std::string rel = fs::relative(p, GCOMPILE_SOURCE_DIR).string();
    auto r = gcompile("check " + rel);
    EXPECT_EQ(r.status, 0) << rel << "\n" << r.err;
    ++checked;
  }
  EXPECT_GE(checked, 50);
}

}  // namespace
}  // namespace gc

namespace gc {
namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Everything after the provenance banner (which names the spec file).
std::string without_banner(const std::string& text) {
  const auto end = text.find("\n\n");
  return end == std::string::npos ? text : text.substr(end);
}

TEST(Templates, DefaultPlanHeaderIsTheEmittersOutputForTheDefaultsSpec) {
  // templates/plan.hpp must agree with the knob defaults of templates/config.hpp
  // (the templates compile and are tested with it): regenerate and compare.
  const fs::path dir = fs::temp_directory_path() / ("gcompile_plan_hpp_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  fs::copy_file(fs::path(GCOMPILE_SOURCE_DIR) / "specs/template_defaults.toml", dir / "spec.toml",
                fs::copy_options::overwrite_existing);
  auto r = gcompile("spec.toml --no-build -o tree", dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(without_banner(read_text(dir / "tree/src/plan.hpp")),
            without_banner(read_text(fs::path(GCOMPILE_SOURCE_DIR) / "templates/plan.hpp")))
      << "templates/plan.hpp is stale: regenerate it from specs/template_defaults.toml";
  EXPECT_EQ(without_banner(read_text(dir / "tree/src/plan_init.cpp")),
            without_banner(read_text(fs::path(GCOMPILE_SOURCE_DIR) / "templates/plan_init.cpp")))
      << "templates/plan_init.cpp is stale: regenerate it from specs/template_defaults.toml";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gc

namespace gc {
namespace {

TEST(Templates, HostileStringsLandInGeneratedCodeAsInertLiterals) {
  // A data path full of C++ syntax must reach the program byte for byte, as
  // data: compile the generated experiment.cpp and print the literal back.
  const fs::path dir = fs::temp_directory_path() / ("gcompile_hostile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string hostile = R"(x"; system("rm -rf /"); /* ??= */ // \ )";
  std::string spec = test::minimal_spec_sections();
  spec.replace(spec.find("format = \"synthetic\""), 20,
               "format = \"llmc\"\ntrain = " + toml_string_literal(hostile) + "\nval = \"v.bin\"");
  std::ofstream(dir / "spec.toml") << spec;
  auto r = gcompile("spec.toml --no-build -o tree", dir.string());
  ASSERT_EQ(r.status, 0) << r.err;
  std::ofstream(dir / "print.cpp") << "#include <cstdio>\n#include \"config.hpp\"\n"
                                      "int main() { std::fputs(gc::tree::kTrainData, stdout); }\n";
  const std::string build = "cd " + dir.string() + " && c++ -std=c++17 -Itree/src print.cpp tree/src/experiment.cpp -o print 2>&1";
  ASSERT_EQ(std::system(build.c_str()), 0);
  FILE* p = ::popen((dir / "print").c_str(), "r");
  std::string printed;
  char buf[512];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) printed.append(buf, n);
  ::pclose(p);
  EXPECT_EQ(printed, (fs::weakly_canonical(dir) / hostile).lexically_normal().string());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gc
