// The report's plotting helpers: tick selection and labels, scales, paths
// with gaps, escaping, PNG/base64, and the plot renderers' structure.
#include "report/svg.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>

#include "report/axis.hpp"
#include "report/colors.hpp"
#include "report/png.hpp"

namespace gc::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// Every number in an attribute that holds coordinates must be finite text.
void expect_finite_coordinates(const std::string& svg) {
  EXPECT_EQ(svg.find("nan"), std::string::npos) << svg;
  EXPECT_EQ(svg.find("inf"), std::string::npos) << svg;
  const std::regex number_attr(R"re( (?:x|y|x1|x2|y1|y2|cx|cy|width|height)="([^"]*)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), number_attr); it != std::sregex_iterator(); ++it) {
    const std::string v = (*it)[1];
    EXPECT_TRUE(std::regex_match(v, std::regex(R"(-?[0-9]+(\.[0-9]+)?)"))) << v;
  }
}

TEST(ReportAxis, NiceStepsAreOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_DOUBLE_EQ(nice_step(10, 5), 2);
  EXPECT_DOUBLE_EQ(nice_step(250, 5), 50);
  EXPECT_DOUBLE_EQ(nice_step(4.2, 5), 1);
  EXPECT_DOUBLE_EQ(nice_step(0.03, 5), 0.005);
  EXPECT_DOUBLE_EQ(nice_step(68665, 5), 10000);
  EXPECT_DOUBLE_EQ(nice_step(0, 5), 1);
  EXPECT_DOUBLE_EQ(nice_step(kNaN, 5), 1);
}

TEST(ReportAxis, LinearAxisSnapsToTicksForValuesAndNotForSteps) {
  const Axis loss = linear_axis(3.4, 7.6, true);
  EXPECT_DOUBLE_EQ(loss.lo, 3);
  EXPECT_DOUBLE_EQ(loss.hi, 8);
  EXPECT_EQ(loss.labels, (std::vector<std::string>{"3", "4", "5", "6", "7", "8"}));
  const Axis steps = linear_axis(1, 250, false, 5);
  EXPECT_DOUBLE_EQ(steps.lo, 1);
  EXPECT_DOUBLE_EQ(steps.hi, 250);
  EXPECT_EQ(steps.labels, (std::vector<std::string>{"50", "100", "150", "200", "250"}));
  const Axis fractions = linear_axis(0, 0.25, true, 5);
  EXPECT_EQ(fractions.labels, (std::vector<std::string>{"0", "0.05", "0.10", "0.15", "0.20", "0.25"}));
}

TEST(ReportAxis, DegenerateAndEmptyRangesStillGiveADrawableAxis) {
  const Axis flat = linear_axis(2, 2, true);
  EXPECT_LT(flat.lo, 2);
  EXPECT_GT(flat.hi, 2);
  EXPECT_GE(flat.ticks.size(), 2u);
  const Axis zero = linear_axis(0, 0, true);
  EXPECT_LT(zero.lo, 0);
  EXPECT_GT(zero.hi, 0);
  const Axis none = linear_axis(kInf, -kInf, true);  // no data
  EXPECT_DOUBLE_EQ(none.lo, 0);
  EXPECT_DOUBLE_EQ(none.hi, 1);
}

TEST(ReportAxis, TickLabelsUseOneStyleAcrossTheAxis) {
  EXPECT_EQ(linear_tick_labels({0, 20000, 40000, 60000}, 20000), (std::vector<std::string>{"0", "20k", "40k", "60k"}));
  EXPECT_EQ(linear_tick_labels({0, 500000, 1000000, 1500000}, 500000),
            (std::vector<std::string>{"0", "0.5M", "1.0M", "1.5M"}));
  EXPECT_EQ(linear_tick_labels({2e-5, 4e-5, 6e-5}, 2e-5), (std::vector<std::string>{"2e-5", "4e-5", "6e-5"}));
  EXPECT_EQ(linear_tick_labels({-0.5, 0, 0.5}, 0.5), (std::vector<std::string>{"-0.5", "0", "0.5"}));
  EXPECT_EQ(linear_tick_labels({0.25, 0.5}, 0.25), (std::vector<std::string>{"0.25", "0.50"}));
}

TEST(ReportAxis, LogAxisUsesDecadesOrFinerStepsWhenNarrow) {
  const Axis wide = log_axis(1e-4, 10);
  EXPECT_EQ(wide.scale, AxisScale::Log);
  EXPECT_EQ(wide.labels, (std::vector<std::string>{"1e-4", "0.001", "0.01", "0.1", "1", "10"}));
  const Axis narrow = log_axis(1.5, 40);
  EXPECT_EQ(narrow.labels, (std::vector<std::string>{"2", "5", "10", "20"}));
  const Axis very_wide = log_axis(1e-12, 1e12, 8);
  EXPECT_LE(very_wide.ticks.size(), 8u);
  EXPECT_EQ(very_wide.labels.front(), "1e-12");
  const Axis thousands = log_axis(900, 2e6);
  EXPECT_NE(std::find(thousands.labels.begin(), thousands.labels.end(), "10k"), thousands.labels.end());
  EXPECT_NE(std::find(thousands.labels.begin(), thousands.labels.end(), "1M"), thousands.labels.end());
  const Axis tight = log_axis(3.0, 3.3);  // less than a factor 1.4: linear ticks on a log scale
  EXPECT_GE(tight.ticks.size(), 2u);
  for (double t : tight.ticks) EXPECT_GT(t, 0);
}

TEST(ReportAxis, ChooseScaleIsLogOnlyForWidePositiveRanges) {
  EXPECT_EQ(choose_scale(1e-3, 1, 50), AxisScale::Log);
  EXPECT_EQ(choose_scale(0.5, 1, 50), AxisScale::Linear);
  EXPECT_EQ(choose_scale(0, 1e6, 50), AxisScale::Linear);
  EXPECT_EQ(choose_scale(-1, 1e6, 50), AxisScale::Linear);
}

TEST(ReportAxis, ScalesMapDomainEndsToPixelEndsAndRejectUndrawableValues) {
  Axis a;
  a.lo = 0;
  a.hi = 10;
  const Scale s(a, 100, 300);
  EXPECT_DOUBLE_EQ(s.map(0), 100);
  EXPECT_DOUBLE_EQ(s.map(5), 200);
  EXPECT_DOUBLE_EQ(s.map(10), 300);
  EXPECT_TRUE(s.accepts(-3));
  EXPECT_FALSE(s.accepts(kNaN));
  EXPECT_FALSE(s.accepts(kInf));
  const Axis log = log_axis(1, 1000);
  const Scale ls(log, 0, 100);
  EXPECT_NEAR(ls.map(std::sqrt(log.lo * log.hi)), 50, 1e-9);  // geometric midpoint
  EXPECT_FALSE(ls.accepts(0));
  EXPECT_FALSE(ls.accepts(-1));
  const Scale flipped(a, 300, 100);  // y axes: up is smaller pixels
  EXPECT_DOUBLE_EQ(flipped.map(10), 100);
}

TEST(ReportAxis, NumberFormatting) {
  EXPECT_EQ(format_value(3.14159), "3.142");
  EXPECT_EQ(format_value(1.2e-5), "1.2e-5");
  EXPECT_EQ(format_value(12345.6), "1.235e4");
  EXPECT_EQ(format_value(kNaN), "NaN");
  EXPECT_EQ(format_value(-kInf), "-inf");
  EXPECT_EQ(format_coord(12.345), "12.3");
  EXPECT_EQ(format_coord(-0.01), "0.0");
  EXPECT_EQ(format_coord(kNaN), "0");
  EXPECT_EQ(integer_ticks(0, 11, 12), (std::vector<double>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(integer_ticks(0, 23, 12), (std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22}));
}

TEST(ReportSvg, PolylineBreaksAtNonFiniteAndNonPositiveLogValues) {
  Axis a;
  a.lo = 0;
  a.hi = 4;
  const Scale xs(a, 0, 40), ys(a, 40, 0);
  const std::vector<Point> pts = {{0, 1}, {1, 2}, {2, kNaN}, {3, 3}, {4, kInf}};
  EXPECT_EQ(polyline_path(pts, xs, ys), "M0.0,30.0 L10.0,20.0 M30.0,10.0");
  EXPECT_EQ(polyline_path({{0, kNaN}}, xs, ys), "");
  const Axis log = log_axis(1, 100);
  const Scale logs(log, 40, 0);
  EXPECT_EQ(count(polyline_path({{0, 1}, {1, 0}, {2, 10}, {3, -5}, {4, 100}}, xs, logs), "M"), 3u);
}

TEST(ReportSvg, LinePlotHasTitleAxesLegendAndNamedSvg) {
  LinePlot plot;
  plot.name = "loss";
  plot.title = "Training <loss> & \"val\"";
  plot.x_label = "step";
  plot.y_label = "loss (nats)";
  plot.curves = {{"run a", "#1f77b4", kSolid, 1.5, 1.0, {{0, 7.6}, {100, 4.1}, {200, kNaN}, {300, 3.2}}},
                 {"run <b>", "#d62728", kDashed, 1.5, 1.0, {{0, 7.5}, {300, 3.5}}}};
  plot.markers = {{250, "non-finite", "#b00020"}};
  const std::string svg = render_line_plot(plot);
  EXPECT_EQ(svg.rfind("<svg class=\"plot\" data-plot=\"loss\"", 0), 0u);
  EXPECT_NE(svg.find("Training &lt;loss&gt; &amp; &quot;val&quot;"), std::string::npos);
  EXPECT_EQ(svg.find("<loss>"), std::string::npos);
  EXPECT_EQ(svg.find("run <b>"), std::string::npos);
  EXPECT_NE(svg.find("run &lt;b&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">loss (nats)</text>"), std::string::npos);
  EXPECT_NE(svg.find(">step</text>"), std::string::npos);
  EXPECT_NE(svg.find("stroke-dasharray=\"6 4\""), std::string::npos);
  EXPECT_NE(svg.find(">non-finite</text>"), std::string::npos);
  EXPECT_EQ(count(svg, "<path class=\"series\""), 2u);
  EXPECT_EQ(svg.find("xmlns"), std::string::npos);
  expect_finite_coordinates(svg);
  EXPECT_EQ(svg, render_line_plot(plot));  // deterministic
}

TEST(ReportSvg, AllNaNDataGivesAnEmptyButValidPlot) {
  LinePlot plot;
  plot.name = "empty";
  plot.title = "nothing";
  plot.y_scale = AxisScale::Log;
  plot.curves = {{"a", "#000000", kSolid, 1, 1, {{0, kNaN}, {kNaN, 1}, {2, kInf}}}};
  const std::string svg = render_line_plot(plot);
  EXPECT_EQ(count(svg, "<path class=\"series\""), 0u);
  EXPECT_EQ(count(svg, "<circle"), 0u);
  expect_finite_coordinates(svg);
  // A log plot without positive values falls back to a linear axis.
  plot.curves[0].points = {{0, -1}, {1, -2}};
  const std::string fallback = render_line_plot(plot);
  EXPECT_EQ(count(fallback, "<path class=\"series\""), 1u);
  expect_finite_coordinates(fallback);
}

TEST(ReportSvg, BarChartRotatesLongCategoryLabelsAndSkipsNaN) {
  BarChart chart;
  chart.name = "bars";
  chart.title = "t";
  chart.x_label = "norm";
  chart.y_label = "ratio";
  for (int l = 0; l < 12; ++l) chart.categories.push_back(std::to_string(l) + ".post_attention");
  chart.groups = {{"a", "#111111", std::vector<double>(12, 0.5)}, {"b", "#222222", std::vector<double>(12, kNaN)}};
  chart.groups[0].values[3] = kInf;
  const std::string svg = render_bar_chart(chart);
  EXPECT_EQ(count(svg, "<rect"), 11u);
  EXPECT_NE(svg.find("rotate(-90"), std::string::npos);
  expect_finite_coordinates(svg);
  chart.y_scale = AxisScale::Log;  // log bars start at the bottom of the axis
  chart.groups[1].values[0] = 1e-3;
  expect_finite_coordinates(render_bar_chart(chart));
}

TEST(ReportSvg, HistogramColoursBinsAndSkipsBadOnes) {
  Histogram h;
  h.name = "hist";
  h.edges = {-1, -0.5, 0, 0.5, 1};
  h.counts = {1, kNaN, 3, 4};
  h.colors = {"#0000ff", "#0000ff", "#ff0000", "#ff0000"};
  const std::string svg = render_histogram(h);
  EXPECT_EQ(count(svg, "<rect"), 3u);
  EXPECT_EQ(count(svg, "fill=\"#ff0000\""), 2u);
  expect_finite_coordinates(svg);
}

TEST(ReportSvg, HeatmapEmbedsAPngWithOnePixelPerCellAndAColourBar) {
  Heatmap h;
  h.name = "heat";
  h.rows = 3;
  h.cols = 5;
  h.values.assign(15, 0.5);
  h.values[7] = kNaN;
  const std::string svg = render_heatmap(h);
  EXPECT_EQ(count(svg, "<image"), 2u);  // cells and colour bar
  const auto at = svg.find("data:image/png;base64,");
  ASSERT_NE(at, std::string::npos);
  EXPECT_NE(svg.find("image-rendering:pixelated"), std::string::npos);
  expect_finite_coordinates(svg.substr(0, at));
}

TEST(ReportSvg, ImagePlotSaysSoWhenTheBytesAreNotAPng) {
  ImagePlot p;
  p.name = "img";
  p.png = "not a png";
  const std::string svg = render_image_plot(p);
  EXPECT_NE(svg.find("image unavailable"), std::string::npos);
  EXPECT_EQ(svg.find("<image"), std::string::npos);
}

TEST(ReportSvg, TextHelpers) {
  EXPECT_EQ(shorten("abcdef", 4), "abc…");
  EXPECT_EQ(shorten("ααααα", 3), "αα…");
  EXPECT_EQ(shorten("abc", 3), "abc");
  EXPECT_DOUBLE_EQ(text_width("αβ"), text_width("ab"));
}

TEST(ReportPng, EncodesAValidPngAndReadsItsSize) {
  RgbImage image;
  image.width = 300;
  image.height = 300;  // > 64 KiB of raw data: several stored blocks
  image.pixels.assign(300 * 300 * 3, 7);
  const std::string png = encode_png(image);
  int w = 0, h = 0;
  ASSERT_TRUE(png_dimensions(png, w, h));
  EXPECT_EQ(w, 300);
  EXPECT_EQ(h, 300);
  EXPECT_EQ(png.substr(png.size() - 8, 4), "IEND");
  EXPECT_FALSE(png_dimensions("GIF89a", w, h));
  image.pixels.pop_back();
  EXPECT_THROW(encode_png(image), std::invalid_argument);
}

TEST(ReportPng, Base64MatchesKnownValues) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("foobar"), "Zm9vYmFy");
}

TEST(ReportColors, RampsAreClampedAndGreyForNaN) {
  EXPECT_EQ(hex(sequential_rgb(-1)), hex(sequential_rgb(0)));
  EXPECT_EQ(hex(sequential_rgb(2)), hex(sequential_rgb(1)));
  EXPECT_EQ(hex(diverging_rgb(0)), "#f7f7f7");
  EXPECT_EQ(hex(diverging_rgb(kNaN)), "#a0a0a0");
  EXPECT_NE(categorical_color(0), categorical_color(1));
  EXPECT_EQ(categorical_color(0), categorical_color(10));
}

}  // namespace
}  // namespace gc::report
