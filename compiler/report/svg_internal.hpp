// Pieces shared by the SVG plot renderers (svg.cpp, svg_image.cpp): the frame
// (plot area inside margins), axes, title, legend. Not part of the public API.
#pragma once

#include <string>
#include <vector>

#include "report/svg.hpp"

namespace gc::report::detail {

constexpr double kFontPx = 11;
constexpr double kTitleFontPx = 13;
constexpr double kLegendRowPx = 16;
constexpr double kLegendSamplePx = 20;

// The SVG canvas and the plot area inside its margins.
struct Frame {
  double width = 560, height = 330;
  double left = 60, right = 16, top = 34, bottom = 46;
  double x0() const { return left; }
  double x1() const { return width - right; }
  double y0() const { return top; }
  double y1() const { return height - bottom; }
  double plot_width() const { return x1() - x0(); }
  double plot_height() const { return y1() - y0(); }
};

// Margins for y tick labels, the y label and an optional legend on the right.
Frame make_frame(double width, double height, const std::vector<std::string>& y_labels,
                 const std::vector<LegendEntry>& legend);
double legend_width(const std::vector<LegendEntry>& legend);

std::string open_svg(const std::string& name, const std::string& title, const Frame& frame);
std::string close_svg();

void draw_title(std::string& out, const Frame& frame, const std::string& title);
// Horizontal grid lines and labels for the y axis's ticks.
void draw_y_ticks(std::string& out, const Frame& frame, const Axis& axis, const Scale& ys);
// Tick marks and labels under the plot at data positions `ticks`.
void draw_x_ticks(std::string& out, const Frame& frame, const std::vector<double>& ticks,
                  const std::vector<std::string>& labels, const Scale& xs, bool grid);
// The left and bottom axis lines and the axis titles.
void draw_axes_and_labels(std::string& out, const Frame& frame, const std::string& x_label, const std::string& y_label);
void draw_legend(std::string& out, const Frame& frame, const std::vector<LegendEntry>& legend);
void draw_markers(std::string& out, const Frame& frame, const std::vector<Marker>& markers, const Scale& xs);

// <text> at (x, y) with the given anchor ("start", "middle", "end") and extra attributes.
std::string text_element(double x, double y, const std::string& anchor, const std::string& text,
                         const std::string& extra = "");

}  // namespace gc::report::detail
