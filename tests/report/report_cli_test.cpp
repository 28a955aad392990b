// `gcompile report` end to end: exit codes and messages, the written page's
// plots and sections, self-containment, escaping and determinism.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "report/page.hpp"
#include "report_test_util.hpp"
#include "tree_test_util.hpp"

namespace gc::report {
namespace {

namespace fs = std::filesystem;

using Result = gc::test::Streams;

Result gcompile(const std::string& args, const std::string& cwd) { return gc::test::run_gcompile(args, cwd); }

std::vector<std::string> plot_names(const std::string& html) {
  std::vector<std::string> out;
  const std::regex plot(R"re(<svg class="plot" data-plot="([^"]*)")re");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), plot); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// The page without its embedded images (base64 can contain any letters).
std::string without_data_uris(const std::string& html) {
  return std::regex_replace(html, std::regex("data:image/png;base64,[A-Za-z0-9+/=]*"), "DATA");
}

TEST(ReportCli, UsageErrorsExitTwo) {
  rt::test::TempDir tmp;
  EXPECT_EQ(gcompile("report", tmp.str()).status, 2);
  const Result unknown = gcompile("report run --frobnicate", tmp.str());
  EXPECT_EQ(unknown.status, 2);
  EXPECT_EQ(unknown.err, "gcompile: error: unknown option '--frobnicate'\nRun 'gcompile --help' for usage.\n");
  EXPECT_EQ(gcompile("report run -j 2", tmp.str()).status, 2);
  EXPECT_EQ(gcompile("report run --json", tmp.str()).status, 2);
  EXPECT_EQ(gcompile("report run --compare", tmp.str()).status, 2);
  const Result misplaced = gcompile("check x.toml --compare c.json", tmp.str());
  EXPECT_EQ(misplaced.status, 2);
  EXPECT_NE(misplaced.err.find("'--compare' applies only to 'gcompile report'"), std::string::npos);
  const Result help = gcompile("--help", tmp.str());
  EXPECT_NE(help.out.find("report RUN_DIR... [-o FILE] [--compare FILE.json]..."), std::string::npos);
}

TEST(ReportCli, MissingRunDirectoryExitsOneNamingIt) {
  rt::test::TempDir tmp;
  const Result r = gcompile("report does/not/exist", tmp.str());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "gcompile: error: does/not/exist: no such run directory\n");
  EXPECT_TRUE(r.out.empty());
  EXPECT_FALSE(fs::exists(tmp / "report.html"));
}

TEST(ReportCli, MissingOrMalformedInputsExitOneWithTheirPaths) {
  rt::test::TempDir tmp;
  fs::create_directories(tmp / "empty");
  const Result no_log = gcompile("report empty", tmp.str());
  EXPECT_EQ(no_log.status, 1);
  EXPECT_NE(no_log.err.find("empty/metrics.jsonl: no metrics log"), std::string::npos) << no_log.err;

  fs::create_directories(tmp / "bad");
  test::write_text(tmp / "bad/metrics.jsonl", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":2}\nnot json\n");
  const Result bad = gcompile("report bad", tmp.str());
  EXPECT_EQ(bad.status, 1);
  EXPECT_EQ(bad.err.rfind("gcompile: error: bad/metrics.jsonl: line 3 (byte 40): not valid JSON", 0), 0u) << bad.err;

  const std::vector<std::string> runs = test::write_sample_runs(tmp.str());
  test::write_text(tmp / "broken.json", "{\"a\": {\"label\": \"x\"}, \"b\": 3}");
  const Result compare = gcompile("report run_g1 --compare broken.json", tmp.str());
  EXPECT_EQ(compare.status, 1);
  EXPECT_EQ(compare.err, "gcompile: error: broken.json: /b: expected an object\n");
  const Result missing = gcompile("report run_g1 --compare absent.json", tmp.str());
  EXPECT_EQ(missing.err, "gcompile: error: absent.json: no such comparison file\n");
  const Result no_dir = gcompile("report run_g1 -o nowhere/r.html", tmp.str());
  EXPECT_EQ(no_dir.status, 1);
  EXPECT_EQ(no_dir.err, "gcompile: error: nowhere/r.html: cannot write the report: directory nowhere does not exist\n");
}

TEST(ReportCli, WritesReportHtmlByDefaultAndIsDeterministic) {
  rt::test::TempDir tmp;
  test::write_sample_runs(tmp.str());
  const Result first = gcompile("report run_g1 run_g05", tmp.str());
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_TRUE(first.err.empty()) << first.err;
  const std::string html = rt::test::read_bytes(tmp / "report.html");
  EXPECT_EQ(first.out, "report.html: 2 runs, " + std::to_string(plot_names(html).size()) + " plots\n");
  const Result second = gcompile("report run_g1 run_g05 -o again.html", tmp.str());
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_EQ(rt::test::read_bytes(tmp / "again.html"), html);
  for (const auto& entry : fs::directory_iterator(tmp.str())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
  }
}

TEST(ReportPage, HasEveryPlotForTheSampleRuns) {
  rt::test::TempDir tmp;
  const std::vector<RunData> runs = load_runs(test::write_sample_runs(tmp.str()));
  const std::string html = render_report(runs, {load_comparison(runs[0].compare_files[0])});
  const std::vector<std::string> names = plot_names(html);
  for (const char* expected : {"loss",
                               "learning_rate",
                               "train_grad_norm",
                               "sink_score_by_layer",
                               "sink_score_over_steps",
                               "sink_score_heatmap:g1_small_init",
                               "sink_score_heatmap:g05_standard",
                               "stable_rank:q_proj",
                               "stable_rank:k_proj",
                               "stable_rank:v_proj",
                               "stable_rank:o_proj",
                               "stable_rank:self_attn.gate_proj",
                               "stable_rank:mlp.gate_proj",
                               "stable_rank:up_proj",
                               "stable_rank:down_proj",
                               "stable_rank:embed_tokens",
                               "stable_rank:lm_head",
                               "sigma_max_by_layer",
                               "cosine_similarity:q_proj",
                               "cosine_similarity:down_proj",
                               "cosine_image:g1_small_init:model.layers.0.self_attn.q_proj.weight@0",
                               "cosine_image:g1_small_init:model.layers.0.mlp.down_proj.weight@400",
                               "residual_flow",
                               "rmsnorm_ratio",
                               "activation_rms_by_layer",
                               "attention_entropy_by_layer",
                               "logit_std",
                               "embedding_cosine",
                               "param_norm",
                               "grad_norm",
                               "update_ratio",
                               "metric:my_custom_scalar",
                               "metric:my_custom_keyed",
                               "delta_sym_p_histogram",
                               "delta_sym_p_deciles"}) {
    EXPECT_TRUE(contains(names, expected)) << expected;
  }
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size()) << "plot names must be unique";
  for (const char* section : {"id=\"runs\"", "id=\"spec\"", "id=\"loss\"", "id=\"sinks\"", "id=\"stable-rank\"",
                              "id=\"row-cosine\"", "id=\"signal\"", "id=\"norms\"", "id=\"other\"", "id=\"compare\""}) {
    EXPECT_NE(html.find(section), std::string::npos) << section;
  }
  // The spec table shows only what differs: γ, ε, the gate and the name, not d_model.
  EXPECT_NE(html.find("<code>init.gamma</code>"), std::string::npos);
  EXPECT_NE(html.find("<code>model.norm_eps</code>"), std::string::npos);
  EXPECT_EQ(html.find("<code>model.d_model</code>"), std::string::npos);
  EXPECT_NE(html.find("non-finite loss at step 401"), std::string::npos);
  // Token contexts are escaped, and newlines made visible.
  EXPECT_NE(html.find("The function returns &lt;b&gt;None&lt;/b&gt; &amp; the"), std::string::npos);
  EXPECT_NE(html.find("def main():⏎ "), std::string::npos);
}

TEST(ReportPage, IsSelfContainedAndHasNoNonFiniteCoordinates) {
  rt::test::TempDir tmp;
  const std::vector<RunData> runs = load_runs(test::write_sample_runs(tmp.str()));
  const std::string html = render_report(runs, {});
  EXPECT_EQ(html, render_report(runs, {}));
  const std::string text = without_data_uris(html);
  for (const char* forbidden : {"http:", "https:", "src=", "<link", "@import", "url(", "<script"}) {
    EXPECT_EQ(text.find(forbidden), std::string::npos) << forbidden;
  }
  const std::regex coordinate(R"re( (?:x|y|x1|x2|y1|y2|cx|cy|width|height|d)="([^"]*)")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), coordinate); it != std::sregex_iterator(); ++it) {
    const std::string v = (*it)[1];
    EXPECT_EQ(v.find("nan"), std::string::npos) << (*it)[0];
    EXPECT_EQ(v.find("inf"), std::string::npos) << (*it)[0];
  }
}

TEST(ReportPage, SectionsAppearOnlyWithData) {
  rt::test::TempDir tmp;
  fs::create_directories(tmp / "r");
  test::write_text(tmp / "r/metrics.jsonl", "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n");
  test::write_text(tmp / "r/spec.resolved.toml",
                   "[experiment]\nname = \"<script>alert(1)</script>\"\n[model]\n"
                   "d_model = 64\n[init]\ngamma = 1.0\n");
  const std::string html = render_report(load_runs({tmp / "r"}), {});
  EXPECT_EQ(plot_names(html), (std::vector<std::string>{"loss"}));
  for (const char* absent : {"id=\"sinks\"", "id=\"stable-rank\"", "id=\"signal\"", "id=\"norms\"", "id=\"other\"",
                             "id=\"compare\"", "id=\"row-cosine\""}) {
    EXPECT_EQ(html.find(absent), std::string::npos) << absent;
  }
  EXPECT_EQ(html.find("<script>"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("<h2>Spec</h2>"), std::string::npos);  // one run: headline settings
  EXPECT_NE(html.find("<code>model.d_model</code>"), std::string::npos);
}

}  // namespace
}  // namespace gc::report
