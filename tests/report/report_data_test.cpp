// Data collection for the report: reading run directories and comparison
// files, grouping tensors, the spec difference table, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "report/compare.hpp"
#include "report/report.hpp"
#include "report/sections.hpp"
#include "report_test_util.hpp"

namespace gc::report {
namespace {

using test::write_text;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ReportError& e) {
    return e.what();
  }
  return "";
}

std::string make_run(const rt::test::TempDir& tmp, const std::string& name, const std::string& log,
                     const std::string& spec = "") {
  const std::string dir = tmp / name;
  std::filesystem::create_directories(dir);
  write_text(dir + "/metrics.jsonl", log);
  if (!spec.empty()) write_text(dir + "/spec.resolved.toml", spec);
  return dir;
}

TEST(ReportData, ReadsEveryRecordKind) {
  rt::test::TempDir tmp;
  const std::string dir = make_run(tmp, "r",
                                   R"({"step":1,"loss":7.5,"lr":0.001,"grad_norm":1.5,"tokens_per_s":3000,"elapsed_s":1}
{"step":10,"loss":null,"nonfinite":{"/loss":"nan"}}
{"step":10,"val_loss":7.1}
{"step":0,"metric":"sink_score","values":{"0":0.1,"1":0.2,"10":0.9,"2":0.3}}
{"step":0,"metric":"rmsnorm_factor","values":{"0.input":2.0,"final":1.0},"eps_free":{"0.input":4.0,"final":1.0}}
{"step":0,"metric":"residual_flow","value":1.25}
{"step":0,"metric":"initial_loss","value":7.6,"log_vocab":7.62}
{"step":0,"metric":"embedding_cosine","value":0.1,"mean":0.02,"top_tokens":[1,2,3]}
{"step":0,"metric":"cosine_image","tensor":"model.layers.0.mlp.up_proj.weight","path":"images/x.png","rows":8}
{"step":0,"metric":"brand_new","values":{"k":1},"note":"text","weird":{"a":"b"}}
{"step":12,"event":"nonfinite","loss":null,"nonfinite":{"/loss":"inf"}}
)");
  const RunData run = load_run(dir);
  EXPECT_EQ(run.label, "r");  // no spec: the directory name
  ASSERT_EQ(run.loss.size(), 2u);
  EXPECT_TRUE(std::isnan(run.loss[1].y));
  EXPECT_EQ(run.val_loss.size(), 1u);
  EXPECT_EQ(run.lr.size(), 1u);
  EXPECT_EQ(run.nonfinite_step, 12);
  EXPECT_EQ(run.last_step, 12);
  EXPECT_EQ(run.records, 11u);
  const KeyedSeries& sink = run.keyed.at("sink_score");
  std::vector<std::string> keys;
  for (const auto& [k, s] : sink) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"0", "1", "2", "10"}));  // natural order
  EXPECT_EQ(run.keyed.at("rmsnorm_factor.eps_free").at("0.input")[0].y, 4.0);
  EXPECT_EQ(run.scalars.at("residual_flow")[0].y, 1.25);
  EXPECT_EQ(run.scalars.at("initial_loss.log_vocab")[0].y, 7.62);
  EXPECT_EQ(run.scalars.at("embedding_cosine.mean")[0].y, 0.02);
  EXPECT_EQ(run.scalars.count("embedding_cosine.top_tokens"), 0u);  // an array: not a series
  EXPECT_EQ(run.keyed.at("brand_new").at("k")[0].y, 1.0);
  EXPECT_EQ(run.keyed.count("brand_new.weird"), 0u);  // non-numeric values are ignored
  ASSERT_EQ(run.images.size(), 1u);
  EXPECT_EQ(run.images[0].rows, 8);
  EXPECT_EQ(run.images[0].problem, "missing file images/x.png");
}

TEST(ReportData, ImagesMustBePngsInsideTheRunDirectory) {
  rt::test::TempDir tmp;
  const std::string log =
      R"({"step":0,"metric":"cosine_image","tensor":"t","path":"../escape.png","rows":4}
{"step":0,"metric":"cosine_image","tensor":"t","path":"/etc/passwd","rows":4}
{"step":0,"metric":"cosine_image","tensor":"t","path":"images/fake.png","rows":4}
{"step":0,"metric":"cosine_image","tensor":"t","path":"images/ok.png"}
)";
  const std::string dir = make_run(tmp, "r", log);
  std::filesystem::create_directories(dir + "/images");
  write_text(dir + "/images/fake.png", "GIF89a not a png at all, just text");
  write_text(dir + "/images/ok.png", test::sample_cosine_png(6, 0.5));
  const RunData run = load_run(dir);
  ASSERT_EQ(run.images.size(), 4u);
  EXPECT_EQ(run.images[0].problem, "path '../escape.png' is not inside the run directory");
  EXPECT_EQ(run.images[1].problem, "path '/etc/passwd' is not inside the run directory");
  EXPECT_EQ(run.images[2].problem, "images/fake.png is not a PNG file");
  EXPECT_EQ(run.images[3].problem, "");
  EXPECT_EQ(run.images[3].rows, 6);  // from the PNG when the record has none
}

TEST(ReportData, ErrorsNameThePath) {
  rt::test::TempDir tmp;
  EXPECT_EQ(error_of([&] { load_run(tmp / "absent"); }), tmp / "absent" + ": no such run directory");
  write_text(tmp / "file", "x");
  EXPECT_EQ(error_of([&] { load_run(tmp / "file"); }), tmp / "file" + ": not a directory (expected a run directory)");
  std::filesystem::create_directories(tmp / "empty");
  EXPECT_EQ(error_of([&] { load_run(tmp / "empty"); }), tmp / "empty/metrics.jsonl" + ": no metrics log (is " +
                                                            tmp / "empty" + " a run directory written by train?)");
  const std::string bad = make_run(tmp, "bad", "{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":\n");
  EXPECT_NE(error_of([&] { load_run(bad); }).find(bad + "/metrics.jsonl: line 2 (byte 20): not valid JSON"),
            std::string::npos);
  const std::string torn = make_run(tmp, "torn", "{\"step\":1,\"loss\":2}\n{\"step\":2");
  EXPECT_NE(error_of([&] { load_run(torn); }).find("line 2 (byte 20): incomplete last line"), std::string::npos);
  const std::string no_step = make_run(tmp, "nostep", "{\"step\":1,\"loss\":2}\n{\"loss\":3}\n");
  EXPECT_EQ(error_of([&] { load_run(no_step); }),
            no_step + "/metrics.jsonl: line 2: record has no integer \"step\": '{\"loss\":3}'");
  const std::string bad_spec = make_run(tmp, "badspec", "{\"step\":1,\"loss\":2}\n", "[model]\nd_model = = 3\n");
  EXPECT_NE(error_of([&] { load_run(bad_spec); }).find(bad_spec + "/spec.resolved.toml:2:"), std::string::npos);
}

TEST(ReportData, EmptyLogIsARunWithoutData) {
  rt::test::TempDir tmp;
  const RunData run = load_run(make_run(tmp, "r", ""));
  EXPECT_EQ(run.records, 0u);
  EXPECT_TRUE(run.loss.empty());
}

TEST(ReportData, LabelsComeFromTheSpecAndAreMadeUnique) {
  rt::test::TempDir tmp;
  const std::string spec = "[experiment]\nname = \"same\"\n";
  const std::string a = make_run(tmp, "a", "", spec), b = make_run(tmp, "b", "", spec);
  const std::string c = make_run(tmp, "c", "", "[experiment]\nname = \"other\"\n");
  const std::vector<RunData> runs = load_runs({a, b, c, a});
  EXPECT_EQ(runs[0].label, "same (a) #1");
  EXPECT_EQ(runs[1].label, "same (b)");
  EXPECT_EQ(runs[2].label, "other");
  EXPECT_EQ(runs[3].label, "same (a) #4");
  EXPECT_EQ(load_runs({tmp / "a/"})[0].label, "same");
}

TEST(ReportData, FlattensTomlInFileOrder) {
  const auto flat = flatten_toml(
      "[model]\nd_model = 128\nnorm_eps = 1e-12\n[init]\ngamma = 1.0\nfan = \"fan_in\"\n[optim]\nbetas = [0.9, "
      "0.95]\nno_decay = [\"norm\"]\n[optim.lr_mult]\nembedding = 2.5\n[metrics]\nflag = true\n",
      "spec.toml");
  const std::vector<std::pair<std::string, std::string>> expected = {{"model.d_model", "128"},
                                                                     {"model.norm_eps", "1e-12"},
                                                                     {"init.gamma", "1"},
                                                                     {"init.fan", "fan_in"},
                                                                     {"optim.betas", "[0.9, 0.95]"},
                                                                     {"optim.no_decay", "[\"norm\"]"},
                                                                     {"optim.lr_mult.embedding", "2.5"},
                                                                     {"metrics.flag", "true"}};
  EXPECT_EQ(flat, expected);
  EXPECT_EQ(error_of([] { flatten_toml("a = [1,\n", "x.toml"); }).rfind("x.toml:", 0), 0u);
}

TEST(ReportData, SpecTableShowsOnlyDifferencesAcrossRuns) {
  RunData a, b;
  a.spec = {{"experiment.name", "a"}, {"model.d_model", "128"}, {"init.gamma", "1"}, {"only.a", "x"}};
  b.spec = {{"experiment.name", "b"}, {"model.d_model", "128"}, {"init.gamma", "0.5"}};
  const SpecTable diff = spec_table({a, b});
  EXPECT_TRUE(diff.differences);
  EXPECT_EQ(diff.keys, (std::vector<std::string>{"experiment.name", "init.gamma", "only.a"}));
  EXPECT_EQ(diff.values[2], (std::vector<std::string>{"x", "—"}));
  const SpecTable single = spec_table({a});
  EXPECT_FALSE(single.differences);
  EXPECT_EQ(single.keys, (std::vector<std::string>{"model.d_model", "init.gamma"}));
  EXPECT_TRUE(spec_table({RunData{}, RunData{}}).keys.empty());
}

TEST(ReportData, TensorNamesSplitIntoLayerAndMatrixType) {
  EXPECT_EQ(split_tensor_name("model.layers.3.self_attn.q_proj.weight").layer, 3);
  EXPECT_EQ(split_tensor_name("model.layers.3.self_attn.q_proj.weight").group, "self_attn.q_proj");
  EXPECT_EQ(split_tensor_name("model.layers.12.mlp.down_proj.weight").group, "mlp.down_proj");
  EXPECT_EQ(split_tensor_name("model.embed_tokens.weight").layer, -1);
  EXPECT_EQ(split_tensor_name("model.embed_tokens.weight").group, "embed_tokens");
  EXPECT_EQ(split_tensor_name("lm_head.weight").group, "lm_head");
  EXPECT_EQ(split_tensor_name("weird").group, "weird");
  EXPECT_EQ(split_tensor_name("").group, "");
}

TEST(ReportData, GroupsByMatrixTypeInModelOrder) {
  KeyedSeries m;
  for (const auto& name : test::matrix_names(3)) m[name] = {{0, 1.0}};
  const std::vector<MatrixGroup> groups = group_by_matrix(m);
  std::vector<std::string> names;
  for (const auto& g : groups) names.push_back(g.short_name);
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj", "k_proj", "v_proj", "o_proj", "self_attn.gate_proj",
                                             "mlp.gate_proj", "up_proj", "down_proj", "embed_tokens", "lm_head"}));
  EXPECT_EQ(groups[0].layers.size(), 3u);
  EXPECT_EQ(groups[0].layers.begin()->first, 0);
  EXPECT_EQ(groups.back().layers.begin()->first, -1);
}

TEST(ReportData, NaturalOrder) {
  NaturalLess less;
  EXPECT_TRUE(less("2", "10"));
  EXPECT_FALSE(less("10", "2"));
  EXPECT_TRUE(less("layers.2.x", "layers.10.x"));
  EXPECT_TRUE(less("9.post_attention", "10.input"));
  EXPECT_TRUE(less("10.input", "final"));
  EXPECT_TRUE(less("01", "1") != less("1", "01"));  // still a strict order
  EXPECT_FALSE(less("a", "a"));
}

TEST(ReportData, SnapshotsRatiosAndMeans) {
  KeyedSeries values = {{"0", {{0, 2}, {100, 4}}}, {"1", {{0, 6}, {100, NAN}}}, {"final", {{100, 8}}}};
  const auto last = last_snapshot(values);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->step, 100);
  ASSERT_EQ(last->values.size(), 3u);
  EXPECT_EQ(last->values[0], (std::pair<std::string, double>{"0", 4}));
  EXPECT_TRUE(std::isnan(last->values[1].second));
  EXPECT_EQ(first_snapshot(values)->step, 0);
  EXPECT_FALSE(last_snapshot(KeyedSeries{{"0", {{0, NAN}}}}));
  const Series mean = mean_over_keys(values);
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_DOUBLE_EQ(mean[0].y, 4);
  EXPECT_DOUBLE_EQ(mean[1].y, 6);  // NaN left out
  const KeyedSeries r = ratio(values, KeyedSeries{{"0", {{100, 8}}}, {"1", {{0, 3}}}});
  EXPECT_EQ(r.at("0"), (Series{{100, 0.5}}));
  EXPECT_EQ(r.at("1"), (Series{{0, 2}}));
  EXPECT_EQ(r.count("final"), 0u);
  EXPECT_EQ(last_finite({{0, 1}, {1, NAN}}), 1.0);
  EXPECT_EQ(layer_index("12"), 12);
  EXPECT_EQ(layer_index("final"), -1);
  EXPECT_EQ(layer_index("1a"), -1);
}

TEST(ReportData, ComparisonFileIsParsedAndChecked) {
  const Comparison c = parse_comparison(test::sample_comparison().dump(), "c.json");
  EXPECT_EQ(c.a.label, "g1_small_init");
  EXPECT_EQ(c.b.step, 400);
  EXPECT_EQ(c.histogram_edges.size(), 41u);
  EXPECT_EQ(c.deciles.size(), 10u);
  EXPECT_EQ(c.top_gains[1].context, "def main():\n    print(");

  auto error = [](const std::string& text) { return error_of([&] { parse_comparison(text, "c.json"); }); };
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"}").rfind("c.json: not valid JSON", 0), 0u);
  EXPECT_EQ(error("[]"), "c.json: /: expected an object");
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"}}"), "c.json: /b: missing (expected an object)");
  EXPECT_EQ(error("{\"a\":{},\"b\":{\"label\":\"y\"}}"), "c.json: /a/label: missing (expected a string)");
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"},\"b\":{\"label\":\"y\"},\"tokens\":\"many\"}"),
            "c.json: /tokens: expected an integer, got string");
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"},\"b\":{\"label\":\"y\"},\"histogram\":{\"edges\":[0,1],\"counts\":[1,2]}}"),
            "c.json: /histogram/edges: expected one more edge than counts (2 edges, 2 counts)");
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"},\"b\":{\"label\":\"y\"},\"top_gains\":[{\"p_a\":\"high\"}]}"),
            "c.json: /top_gains/0/p_a: expected a number, got string");
  EXPECT_EQ(error("{\"a\":{\"label\":\"x\"},\"b\":{\"label\":\"y\"},\"deciles\":[3]}"),
            "c.json: /deciles/0: expected an object");
  EXPECT_EQ(error_of([] { load_comparison("/nonexistent/c.json"); }), "/nonexistent/c.json: no such comparison file");
  const Comparison minimal = parse_comparison("{\"a\":{\"label\":\"x\"},\"b\":{\"label\":\"y\"}}", "m.json");
  EXPECT_TRUE(std::isnan(minimal.mean_delta_sym_p));
  EXPECT_TRUE(minimal.top_gains.empty());
}

TEST(ReportData, FindsComparisonFilesInRunDirectories) {
  rt::test::TempDir tmp;
  const std::vector<std::string> dirs = test::write_sample_runs(tmp.str());
  const RunData run = load_run(dirs[0]);
  ASSERT_EQ(run.compare_files.size(), 1u);
  EXPECT_EQ(std::filesystem::path(run.compare_files[0]).filename(), "g1_vs_g05.compare.json");
  EXPECT_EQ(run.label, "g1_small_init");
  EXPECT_EQ(run.images.size(), 4u);
  for (const auto& image : run.images) EXPECT_EQ(image.problem, "") << image.path;
  const RunData b = load_run(dirs[1]);
  EXPECT_EQ(b.nonfinite_step, 401);
}

}  // namespace
}  // namespace gc::report

namespace gc::report {
namespace {

// moe_routing records: the last record's loads per layer, imbalance and
// entropy per layer as keyed series, the balancing loss as a scalar; the
// report gets a Mixture-of-experts section with the load heatmap.
TEST(ReportData, ReadsMoeRoutingRecordsAndDrawsTheLoad) {
  rt::test::TempDir tmp;
  const std::string dir = make_run(
      tmp, "moe",
      "{\"step\":1,\"metric\":\"moe_routing\",\"load\":{\"1\":[8,0,4,4],\"2\":[4,4,4,4]},"
      "\"imbalance\":{\"1\":2.0,\"2\":1.0},\"router_entropy\":{\"1\":1.3,\"2\":1.38},\"aux_loss\":0.021}\n"
      "{\"step\":10,\"metric\":\"moe_routing\",\"load\":{\"1\":[5,3,4,4],\"2\":[4,4,4,4]},"
      "\"imbalance\":{\"1\":1.25,\"2\":1.0},\"router_entropy\":{\"1\":1.35,\"2\":1.38},\"aux_loss\":0.020}\n");
  const std::vector<RunData> runs = load_runs({dir});
  ASSERT_EQ(runs.size(), 1u);
  const RunData& run = runs[0];
  EXPECT_EQ(run.expert_load_step, 10);
  EXPECT_EQ(run.expert_load.at("1"), (std::vector<double>{5, 3, 4, 4}));
  ASSERT_EQ(run.keyed.at("moe_routing.imbalance").at("1").size(), 2u);
  EXPECT_EQ(run.keyed.at("moe_routing.imbalance").at("1").back().y, 1.25);
  EXPECT_EQ(run.scalars.at("moe_routing.aux_loss").back().y, 0.020);
  const auto section = moe_section(runs);
  ASSERT_TRUE(section.has_value());
  EXPECT_EQ(section->id, "moe");
  EXPECT_NE(section->html.find("Expert load at step 10"), std::string::npos);
  EXPECT_NE(section->html.find("Expert load imbalance"), std::string::npos);
  EXPECT_FALSE(moe_section(load_runs({make_run(tmp, "dense", "{\"step\":1,\"loss\":2.0}\n")})).has_value());
}

}  // namespace
}  // namespace gc::report
