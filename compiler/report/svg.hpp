// A small SVG plotting library for the report: line plots (linear or log y),
// grouped bar charts, histograms, heatmaps and embedded PNG images, each with
// a title, axis labels, readable ticks and a legend outside the plot area.
//
// Every plot is one <svg class="plot" data-plot="NAME"> element meant to be
// inlined into HTML (no xmlns, no external resources). Output is a pure
// function of the input: the same data gives the same bytes. Non-finite
// values (and values <= 0 on a log axis) are never written as coordinates:
// a line has a gap there, a bar or cell is left out or drawn grey.
#pragma once

#include <string>
#include <vector>

#include "report/axis.hpp"

namespace gc::report {

// Stroke dash patterns (SVG stroke-dasharray); "" is a solid line.
inline constexpr const char* kSolid = "";
inline constexpr const char* kDashed = "6 4";
inline constexpr const char* kDotted = "1.5 3";
inline constexpr const char* kDashDot = "8 3 2 3";

struct LegendEntry {
  std::string label;
  std::string color;
  std::string dash;
};

// A vertical line across the plot at data x, labelled at the top (e.g. "non-finite loss").
struct Marker {
  double x = 0;
  std::string label;
  std::string color = "#b00020";
};

struct Curve {
  std::string label;  // legend text; "" keeps it out of the automatic legend
  std::string color = "#1f77b4";
  std::string dash;
  double width = 1.6;
  double opacity = 1.0;
  std::vector<Point> points;  // drawn in this order
  bool dots = true;           // dots on the points of short curves (off for reference lines)
};

struct LinePlot {
  std::string name;  // data-plot attribute
  std::string title, x_label, y_label;
  std::vector<Curve> curves;
  std::vector<LegendEntry> legend;  // empty: one entry per labelled series
  std::vector<Marker> markers;
  AxisScale y_scale = AxisScale::Linear;  // Log falls back to Linear without positive data
  bool y_includes_zero = false;
  std::vector<double> x_ticks;             // explicit x ticks (e.g. layer indices); empty: automatic
  std::vector<std::string> x_tick_labels;  // labels for x_ticks; empty: the numbers
};

struct BarGroup {
  std::string label;
  std::string color;
  std::vector<double> values;  // one per category; NaN: no bar
};

struct BarChart {
  std::string name;
  std::string title, x_label, y_label;
  std::vector<std::string> categories;
  std::vector<BarGroup> groups;  // side by side within each category
  AxisScale y_scale = AxisScale::Linear;
};

struct Histogram {
  std::string name;
  std::string title, x_label, y_label;
  std::vector<double> edges;  // counts.size() + 1 increasing bin edges
  std::vector<double> counts;
  std::vector<std::string> colors;  // one per bin; empty: all the first categorical colour
  std::vector<LegendEntry> legend;
  std::vector<Marker> markers;
};

// A matrix drawn as an embedded PNG (one pixel per cell, scaled without
// smoothing) with a colour bar. Row 0 is at the top.
struct Heatmap {
  std::string name;
  std::string title, x_label, y_label, value_label;
  int rows = 0, cols = 0;
  std::vector<double> values;  // rows × cols, row-major; NaN: grey
  double vmin = 0, vmax = 1;
  bool diverging = false;                           // blue-white-red around the middle of [vmin, vmax]
  std::vector<std::string> row_labels, col_labels;  // thinned to what fits
};

// An existing PNG (e.g. a row-cosine heatmap written by train) with axes over
// [0, x_extent] × [0, y_extent], y downward.
struct ImagePlot {
  std::string name;
  std::string title, x_label, y_label;
  std::string png;  // file bytes
  double x_extent = 1, y_extent = 1;
  double width = 300, height = 300;
};

std::string render_line_plot(const LinePlot& plot);
std::string render_bar_chart(const BarChart& chart);
std::string render_histogram(const Histogram& histogram);
std::string render_heatmap(const Heatmap& heatmap);
std::string render_image_plot(const ImagePlot& plot);

// The path data ("M x,y L x,y ...") of a polyline through the points the scales
// accept; a rejected point ends the current segment. "" when nothing is drawable.
std::string polyline_path(const std::vector<Point>& points, const Scale& xs, const Scale& ys);

// Estimated width in pixels of `text` in the plots' sans-serif font.
double text_width(const std::string& text, double font_px = 11);
// `text` cut to about `max_chars` characters with "…" (UTF-8 aware).
std::string shorten(const std::string& text, std::size_t max_chars);

}  // namespace gc::report
