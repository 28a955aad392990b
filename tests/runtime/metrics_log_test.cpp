#include "runtime/metrics_log.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

using nlohmann::json;
using test::entries;
using test::error_of;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

TEST(RuntimeMetricsLog, WritesOneFlushedLinePerRecord) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  MetricsWriter log(path, MetricsWriter::Mode::Truncate);
  log.write({{"step", 1}, {"loss", 2.5}});
  EXPECT_EQ(read_bytes(path), "{\"loss\":2.5,\"step\":1}\n");  // visible before close
  log.write({{"step", 2}, {"event", "eval"}});
  EXPECT_EQ(read_bytes(path), "{\"loss\":2.5,\"step\":1}\n{\"event\":\"eval\",\"step\":2}\n");
  EXPECT_EQ(error_of([&] { log.write(json::array({1})); }), "metrics record is not a JSON object: [1]");
}

TEST(RuntimeMetricsLog, NumbersRoundTripExactly) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  const double values[] = {0.1, 1.0 / 3.0, 2.220446049250313e-16, 1e300, -123456.789012345678, 5e-324};
  {
    MetricsWriter log(path, MetricsWriter::Mode::Truncate);
    for (double v : values) log.write({{"v", v}, {"f", double(float(v))}});
  }
  const auto records = read_metrics_log(path);
  ASSERT_EQ(records.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(records[i]["v"].get<double>(), values[i]);
    EXPECT_EQ(records[i]["f"].get<float>(), float(values[i]));
  }
}

TEST(RuntimeMetricsLog, NonFiniteNumbersBecomeNullAndComeBack) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  {
    MetricsWriter log(path, MetricsWriter::Mode::Truncate);
    log.write({{"step", 7}, {"loss", nan}, {"grad", {{"attn_q", inf}, {"mlp", 1.0}}}, {"rms", {1.0, -inf}}});
  }
  EXPECT_EQ(read_bytes(path),
            "{\"grad\":{\"attn_q\":null,\"mlp\":1.0},\"loss\":null,"
            "\"nonfinite\":{\"/grad/attn_q\":\"inf\",\"/loss\":\"nan\",\"/rms/1\":\"-inf\"},"
            "\"rms\":[1.0,null],\"step\":7}\n");
  const auto r = read_metrics_log(path).at(0);
  EXPECT_TRUE(std::isnan(r["loss"].get<double>()));
  EXPECT_EQ(r["grad"]["attn_q"].get<double>(), inf);
  EXPECT_EQ(r["rms"][1].get<double>(), -inf);
  EXPECT_FALSE(r.contains("nonfinite"));
}

TEST(RuntimeMetricsLog, ReaderErrorsNameLineAndByte) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_bytes(path, "{\"step\":1}\n[2]\n");
  EXPECT_EQ(error_of([&] { read_metrics_log(path); }), path + ": line 2 (byte 11): not a JSON object");
  write_bytes(path, "{\"step\":1}\n{\"step\":2,\"lo");
  EXPECT_EQ(error_of([&] { read_metrics_log(path); }),
            path + ": line 2 (byte 11): incomplete last line (no newline): torn write?");
  write_bytes(path, "{\"step\":1}\n{\"loss\":null,\"nonfinite\":{\"/x\":\"nan\"}}\n");
  EXPECT_EQ(error_of([&] { read_metrics_log(path); }),
            path + ": line 2 (byte 11): bad \"nonfinite\" entry {\"/x\":\"nan\"}");
  write_bytes(path, "{oops}\n");
  EXPECT_EQ(error_of([&] { read_metrics_log(path); }),
            path +
                ": line 1 (byte 0): not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
                "column 2: syntax error while parsing object key - invalid literal; last read: '{o'; "
                "expected string literal");
}

TEST(RuntimeMetricsLog, TruncateForResumeKeepsStepsUpToTheCheckpoint) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  {
    MetricsWriter log(path, MetricsWriter::Mode::Truncate);
    log.write({{"event", "start"}});
    for (int step = 1; step <= 5; ++step) log.write({{"step", step}, {"loss", 5.0 - step}});
  }
  std::string torn = read_bytes(path) + "{\"step\":6,\"lo";
  write_bytes(path, torn);
  EXPECT_EQ(truncate_metrics_log(path, 3), 3u);  // steps 4, 5 and the torn line
  const auto records = read_metrics_log(path);
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records.back()["step"], 3);
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"metrics.jsonl"});
  EXPECT_EQ(truncate_metrics_log(path, 3), 0u);
  EXPECT_EQ(truncate_metrics_log(dir / "missing.jsonl", 3), 0u);

  MetricsWriter resumed(path, MetricsWriter::Mode::Append);
  resumed.write({{"step", 4}, {"loss", 0.5}});
  EXPECT_EQ(read_metrics_log(path).back()["step"], 4);
}

TEST(RuntimeMetricsLog, TruncateRefusesToDropCorruptLines) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  const std::string text = "{\"step\":1}\nnot json\n{\"step\":9}\n";
  write_bytes(path, text);
  EXPECT_EQ(error_of([&] { truncate_metrics_log(path, 3); }),
            path +
                ": line 2 (byte 11): not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
                "column 2: syntax error while parsing value - invalid literal; last read: 'no'");
  EXPECT_EQ(read_bytes(path), text);
  write_bytes(path, "{\"step\":\"x\"}\n");
  EXPECT_EQ(error_of([&] { truncate_metrics_log(path, 3); }),
            path + ": line 1 (byte 0): \"step\" is not an integer: \"x\"");
  EXPECT_EQ(read_bytes(path), "{\"step\":\"x\"}\n");
}

TEST(RuntimeMetricsLog, AppendRefusesATornLog) {
  TempDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_bytes(path, "{\"step\":1}\n{\"st");
  EXPECT_EQ(error_of([&] { MetricsWriter(path, MetricsWriter::Mode::Append); }),
            path + ": byte 11: the log ends with an incomplete line; truncate it before appending");
  MetricsWriter fresh(path, MetricsWriter::Mode::Truncate);
  EXPECT_EQ(read_bytes(path), "");
}

}  // namespace
}  // namespace gc::rt
