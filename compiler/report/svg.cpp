// Line plots, grouped bar charts and histograms (see svg.hpp).
#include "report/svg.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/svg_internal.hpp"

namespace gc::report {

using detail::Frame;

namespace {

constexpr double kWidth = 560;
constexpr double kHeight = 330;
constexpr std::size_t kMaxPointMarkers = 40;
constexpr std::size_t kMaxCategoryChars = 18;

// The smallest interval holding every value added.
struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool empty() const { return lo > hi; }
};

bool drawable(double v, AxisScale scale) { return std::isfinite(v) && (scale == AxisScale::Linear || v > 0); }

Range y_range(const std::vector<Curve>& series, AxisScale scale) {
  Range r;
  for (const auto& s : series) {
    for (const auto& p : s.points) {
      if (std::isfinite(p.x) && drawable(p.y, scale)) r.add(p.y);
    }
  }
  return r;
}

Range x_range(const LinePlot& plot) {
  Range r;
  for (const auto& s : plot.curves) {
    for (const auto& p : s.points) {
      if (std::isfinite(p.y)) r.add(p.x);
    }
  }
  for (const auto& m : plot.markers) r.add(m.x);
  for (double t : plot.x_ticks) r.add(t);
  return r;
}

Axis value_axis(Range r, AxisScale scale, bool include_zero) {
  if (scale == AxisScale::Log) return log_axis(r.lo, r.hi);
  if (r.empty()) r.lo = r.hi = 0;
  if (include_zero) {
    r.lo = std::min(r.lo, 0.0);
    r.hi = std::max(r.hi, 0.0);
  }
  return linear_axis(r.lo, r.hi, true);
}

Axis step_axis(const LinePlot& plot, const Frame& frame) {
  const Range r = x_range(plot);
  const int target = std::max(2, int(frame.plot_width() / 80));
  if (plot.x_ticks.empty()) return linear_axis(r.lo, r.hi, false, target);
  Axis axis;
  const double pad = std::max(0.25, (r.hi - r.lo) * 0.02);
  axis.lo = r.lo - pad;
  axis.hi = r.hi + pad;
  axis.ticks = plot.x_ticks;
  axis.labels = plot.x_tick_labels;
  if (axis.labels.size() != axis.ticks.size()) {
    axis.labels.clear();
    for (double t : axis.ticks) axis.labels.push_back(format_value(t, 6));
  }
  return axis;
}

std::vector<LegendEntry> automatic_legend(const std::vector<Curve>& series) {
  std::vector<LegendEntry> out;
  for (const auto& s : series) {
    if (s.label.empty()) continue;
    const bool seen = std::any_of(out.begin(), out.end(), [&](const LegendEntry& e) {
      return e.label == s.label && e.color == s.color && e.dash == s.dash;
    });
    if (!seen) out.push_back({s.label, s.color, s.dash});
  }
  return out;
}

std::string series_path(const Curve& s, const Scale& xs, const Scale& ys) {
  const std::string d = polyline_path(s.points, xs, ys);
  if (d.empty()) return "";
  std::string out = "<path class=\"series\" d=\"" + d + "\" fill=\"none\" stroke=\"" + html_escape(s.color) +
                    "\" stroke-width=\"" + format_coord(s.width) + "\" stroke-linejoin=\"round\"";
  if (!s.dash.empty()) out += " stroke-dasharray=\"" + html_escape(s.dash) + "\"";
  if (s.opacity < 1) out += " stroke-opacity=\"" + format_value(s.opacity, 2) + "\"";
  out += ">";
  if (!s.label.empty()) out += "<title>" + html_escape(s.label) + "</title>";
  return out + "</path>\n";
}

// Dots on the points of short series, and on isolated points of long ones
// (which a line alone would not show).
std::string point_markers(const Curve& s, const Scale& xs, const Scale& ys) {
  auto ok = [&](std::size_t i) { return xs.accepts(s.points[i].x) && ys.accepts(s.points[i].y); };
  std::size_t valid = 0;
  for (std::size_t i = 0; i < s.points.size(); ++i) valid += ok(i) ? 1 : 0;
  std::string out;
  for (std::size_t i = 0; i < s.points.size(); ++i) {
    if (!ok(i)) continue;
    const bool isolated = (i == 0 || !ok(i - 1)) && (i + 1 == s.points.size() || !ok(i + 1));
    if ((valid > kMaxPointMarkers || !s.dots) && !isolated) continue;
    out += "<circle cx=\"" + format_coord(xs.map(s.points[i].x)) + "\" cy=\"" + format_coord(ys.map(s.points[i].y)) +
           "\" r=\"2.4\" fill=\"" + html_escape(s.color) + "\"" +
           (s.opacity < 1 ? " fill-opacity=\"" + format_value(s.opacity, 2) + "\"" : "") + "/>";
  }
  return out.empty() ? out : out + "\n";
}

// Category labels under bars: every k-th when crowded, vertical when long
// (vertical rather than slanted, so labels never overlap their neighbours).
struct CategoryLabels {
  bool rotated = false;
  std::size_t every = 1;
  double height = 0;  // vertical space they take below the plot
};

CategoryLabels layout_categories(const std::vector<std::string>& categories, double band) {
  CategoryLabels out;
  double widest = 0;
  for (const auto& c : categories) widest = std::max(widest, text_width(shorten(c, kMaxCategoryChars)));
  out.rotated = widest > band * 0.9;
  const double needed = out.rotated ? 14 : widest + 6;
  out.every = std::size_t(std::max(1.0, std::ceil(needed / std::max(band, 1e-9))));
  out.height = out.rotated ? widest + 14 : 18;
  return out;
}

void draw_categories(std::string& out, const Frame& f, const std::vector<std::string>& categories,
                     const CategoryLabels& layout) {
  const double band = f.plot_width() / double(categories.size());
  out += "<g class=\"x-ticks\" fill=\"#444\">\n";
  for (std::size_t i = 0; i < categories.size(); i += layout.every) {
    const double x = f.x0() + band * (double(i) + 0.5);
    const std::string label = shorten(categories[i], kMaxCategoryChars);
    if (layout.rotated) {
      const double y = f.y1() + 8;
      out += detail::text_element(
                 x, y, "end", label,
                 "dy=\"0.35em\" transform=\"rotate(-90 " + format_coord(x) + " " + format_coord(y) + ")\"") +
             "\n";
    } else {
      out += detail::text_element(x, f.y1() + 16, "middle", label) + "\n";
    }
  }
  out += "</g>\n";
}

std::string bar_rect(double x, double width, double y_value, double y_base, const std::string& color,
                     const std::string& tooltip) {
  const double top = std::min(y_value, y_base), height = std::fabs(y_value - y_base);
  return "<rect x=\"" + format_coord(x) + "\" y=\"" + format_coord(top) + "\" width=\"" + format_coord(width) +
         "\" height=\"" + format_coord(height) + "\" fill=\"" + html_escape(color) + "\"><title>" +
         html_escape(tooltip) + "</title></rect>";
}

}  // namespace

std::string polyline_path(const std::vector<Point>& points, const Scale& xs, const Scale& ys) {
  std::string d;
  bool pen_down = false;
  for (const Point& p : points) {
    if (!xs.accepts(p.x) || !ys.accepts(p.y)) {
      pen_down = false;
      continue;
    }
    if (!d.empty()) d += ' ';
    d += (pen_down ? "L" : "M") + format_coord(xs.map(p.x)) + "," + format_coord(ys.map(p.y));
    pen_down = true;
  }
  return d;
}

std::string render_line_plot(const LinePlot& plot) {
  AxisScale scale = plot.y_scale;
  if (scale == AxisScale::Log && y_range(plot.curves, scale).empty()) scale = AxisScale::Linear;
  const Axis y_axis = value_axis(y_range(plot.curves, scale), scale, plot.y_includes_zero);
  const std::vector<LegendEntry> legend = plot.legend.empty() ? automatic_legend(plot.curves) : plot.legend;
  const Frame f = detail::make_frame(kWidth, kHeight, y_axis.labels, legend);
  const Axis x_axis = step_axis(plot, f);
  const Scale xs(x_axis, f.x0(), f.x1()), ys(y_axis, f.y1(), f.y0());

  std::string out = detail::open_svg(plot.name, plot.title, f);
  detail::draw_y_ticks(out, f, y_axis, ys);
  detail::draw_x_ticks(out, f, x_axis.ticks, x_axis.labels, xs, true);
  detail::draw_axes_and_labels(out, f, plot.x_label, plot.y_label);
  out += "<g class=\"data\">\n";
  for (const Curve& s : plot.curves) out += series_path(s, xs, ys) + point_markers(s, xs, ys);
  out += "</g>\n";
  detail::draw_markers(out, f, plot.markers, xs);
  detail::draw_legend(out, f, legend);
  detail::draw_title(out, f, plot.title);
  return out + detail::close_svg();
}

std::string render_bar_chart(const BarChart& chart) {
  Range r;
  for (const auto& g : chart.groups) {
    for (double v : g.values) {
      if (drawable(v, chart.y_scale)) r.add(v);
    }
  }
  const AxisScale scale = chart.y_scale == AxisScale::Log && r.empty() ? AxisScale::Linear : chart.y_scale;
  const Axis y_axis = value_axis(r, scale, true);
  std::vector<LegendEntry> legend;
  for (const auto& g : chart.groups) {
    if (!g.label.empty() && chart.groups.size() > 1) legend.push_back({g.label, g.color, kSolid});
  }
  Frame f = detail::make_frame(kWidth, kHeight, y_axis.labels, legend);
  const std::size_t n = std::max<std::size_t>(1, chart.categories.size());
  const double band = f.plot_width() / double(n);
  const CategoryLabels labels = layout_categories(chart.categories, band);
  f.bottom = labels.height + 28;
  f.height = kHeight - 46 + f.bottom;
  const Scale ys(y_axis, f.y1(), f.y0());
  const double base = ys.map(scale == AxisScale::Log ? y_axis.lo : 0.0);
  const double bar_width = band * 0.8 / double(std::max<std::size_t>(1, chart.groups.size()));

  std::string out = detail::open_svg(chart.name, chart.title, f);
  detail::draw_y_ticks(out, f, y_axis, ys);
  out += "<g class=\"data\">\n";
  for (std::size_t g = 0; g < chart.groups.size(); ++g) {
    const BarGroup& group = chart.groups[g];
    for (std::size_t i = 0; i < chart.categories.size() && i < group.values.size(); ++i) {
      const double v = group.values[i];
      if (!ys.accepts(v)) continue;
      const double x = f.x0() + band * double(i) + band * 0.1 + bar_width * double(g);
      const std::string who = group.label.empty() ? "" : group.label + ", ";
      out += bar_rect(x, bar_width, ys.map(v), base, group.color, who + chart.categories[i] + ": " + format_value(v)) +
             "\n";
    }
  }
  out += "</g>\n";
  draw_categories(out, f, chart.categories, labels);
  detail::draw_axes_and_labels(out, f, chart.x_label, chart.y_label);
  detail::draw_legend(out, f, legend);
  detail::draw_title(out, f, chart.title);
  return out + detail::close_svg();
}

std::string render_histogram(const Histogram& h) {
  Range xr, yr;
  const std::size_t bins = h.edges.size() > 1 ? std::min(h.counts.size(), h.edges.size() - 1) : 0;
  for (std::size_t i = 0; i < bins; ++i) {
    if (!std::isfinite(h.edges[i]) || !std::isfinite(h.edges[i + 1]) || !std::isfinite(h.counts[i])) continue;
    xr.add(h.edges[i]);
    xr.add(h.edges[i + 1]);
    yr.add(h.counts[i]);
  }
  if (xr.empty()) xr.lo = xr.hi = 0;
  const Axis y_axis = value_axis(yr, AxisScale::Linear, true);
  const Frame f = detail::make_frame(kWidth, kHeight, y_axis.labels, h.legend);
  const Axis x_axis = linear_axis(xr.lo, xr.hi, false, std::max(2, int(f.plot_width() / 70)));
  const Scale xs(x_axis, f.x0(), f.x1()), ys(y_axis, f.y1(), f.y0());

  std::string out = detail::open_svg(h.name, h.title, f);
  detail::draw_y_ticks(out, f, y_axis, ys);
  detail::draw_x_ticks(out, f, x_axis.ticks, x_axis.labels, xs, false);
  out += "<g class=\"data\">\n";
  for (std::size_t i = 0; i < bins; ++i) {
    const double a = h.edges[i], b = h.edges[i + 1], count = h.counts[i];
    if (!xs.accepts(a) || !xs.accepts(b) || !ys.accepts(count) || !(b > a)) continue;
    const double left = xs.map(a), width = xs.map(b) - left;
    const double gap = width > 3 ? 0.5 : 0;
    const std::string color = i < h.colors.size() ? h.colors[i] : categorical_color(0);
    out += bar_rect(left + gap, width - 2 * gap, ys.map(count), ys.map(0), color,
                    "[" + format_value(a) + ", " + format_value(b) + "): " + format_value(count, 6)) +
           "\n";
  }
  out += "</g>\n";
  detail::draw_axes_and_labels(out, f, h.x_label, h.y_label);
  detail::draw_markers(out, f, h.markers, xs);
  detail::draw_legend(out, f, h.legend);
  detail::draw_title(out, f, h.title);
  return out + detail::close_svg();
}

}  // namespace gc::report
