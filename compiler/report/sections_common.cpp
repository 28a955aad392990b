// Figure helpers shared by the section builders.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

constexpr std::size_t kMaxProfileLegend = 12;

// Layer keys as x positions; "final" one past the last layer when asked for.
std::vector<Point> profile_points(const Snapshot& snap, bool include_final, double final_x) {
  std::vector<Point> out;
  for (const auto& [key, value] : snap.values) {
    const int layer = layer_index(key);
    if (layer >= 0) out.push_back({double(layer), value});
  }
  std::sort(out.begin(), out.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
  if (include_final) {
    for (const auto& [key, value] : snap.values) {
      if (key == "final") out.push_back({final_x, value});
    }
  }
  return out;
}

int max_layer(const std::vector<RunData>& runs, const std::string& metric) {
  int top = -1;
  for (const auto& run : runs) {
    const auto it = run.keyed.find(metric);
    if (it == run.keyed.end()) continue;
    for (const auto& [key, series] : it->second) top = std::max(top, layer_index(key));
  }
  return top;
}

}  // namespace

std::string run_color(std::size_t run_index) { return categorical_color(run_index); }

std::string run_dash(std::size_t run_index) {
  static const char* const kDashes[] = {kSolid, kDashed, kDotted, kDashDot};
  return kDashes[run_index % 4];
}

std::string figure(const std::string& svg, const std::string& caption_html) {
  std::string out = "<figure>\n" + svg;
  if (!caption_html.empty()) out += "<figcaption>" + caption_html + "</figcaption>\n";
  return out + "</figure>\n";
}

std::string figure_grid(const std::vector<std::string>& figures) {
  std::string out = "<div class=\"figures\">\n";
  for (const auto& f : figures) out += f;
  return out + "</div>\n";
}

std::string note(const std::string& html) { return "<p class=\"note\">" + html + "</p>\n"; }

AxisScale auto_scale(const std::vector<Curve>& curves, double ratio) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& c : curves) {
    for (const auto& p : c.points) {
      if (!std::isfinite(p.y) || !std::isfinite(p.x)) continue;
      if (p.y <= 0) return AxisScale::Linear;
      lo = std::min(lo, p.y);
      hi = std::max(hi, p.y);
    }
  }
  return lo <= hi ? choose_scale(lo, hi, ratio) : AxisScale::Linear;
}

LinePlot steps_plot(const std::string& name, const std::string& title, const std::string& y_label) {
  LinePlot plot;
  plot.name = name;
  plot.title = title;
  plot.x_label = "step";
  plot.y_label = y_label;
  return plot;
}

std::vector<Marker> nonfinite_markers(const std::vector<RunData>& runs) {
  std::vector<Marker> out;
  for (const auto& run : runs) {
    if (run.nonfinite_step) {
      out.push_back({double(*run.nonfinite_step), (runs.size() > 1 ? run.label + ": " : "") + "non-finite", "#b00020"});
    }
  }
  return out;
}

namespace {

std::vector<double> layer_ticks(int top_layer) { return integer_ticks(0, std::max(0, top_layer), 10); }

// Distance between the extra ticks, and from them to the layers: one layer,
// or 3/4 of the tick step when layer ticks are thinned (room for "final").
double extra_tick_gap(int top_layer) {
  const std::vector<double> layers = layer_ticks(top_layer);
  return layers.size() > 1 ? std::max(1.0, 0.75 * (layers[1] - layers[0])) : 1.0;
}

}  // namespace

double extra_tick_x(int top_layer, int index) {
  const double gap = extra_tick_gap(top_layer);
  return index >= 0 ? top_layer + gap * (index + 1) : gap * index;
}

void set_layer_ticks(LinePlot& plot, int top_layer, const std::vector<std::string>& before,
                     const std::vector<std::string>& after) {
  const std::vector<double> layers = layer_ticks(top_layer);
  plot.x_ticks.clear();
  plot.x_tick_labels.clear();
  for (std::size_t i = before.size(); i-- > 0;) {
    plot.x_ticks.push_back(extra_tick_x(top_layer, -int(i) - 1));
    plot.x_tick_labels.push_back(before[i]);
  }
  for (double t : layers) {
    plot.x_ticks.push_back(t);
    plot.x_tick_labels.push_back(format_value(t, 6));
  }
  for (std::size_t i = 0; i < after.size(); ++i) {
    plot.x_ticks.push_back(extra_tick_x(top_layer, int(i)));
    plot.x_tick_labels.push_back(after[i]);
  }
}

std::vector<LegendEntry> thin_legend(const std::vector<LegendEntry>& entries, std::size_t max_entries) {
  if (entries.size() <= max_entries || max_entries < 2) return entries;
  std::vector<LegendEntry> out;
  std::set<std::size_t> picked;
  for (std::size_t i = 0; i < max_entries; ++i) {
    picked.insert(i * (entries.size() - 1) / (max_entries - 1));
  }
  for (std::size_t i : picked) out.push_back(entries[i]);
  return out;
}

std::string layer_profile_figure(const std::vector<RunData>& runs, const LayerProfile& profile,
                                 const std::string& caption_html) {
  const int top = max_layer(runs, profile.metric);
  LinePlot plot;
  plot.name = profile.name;
  plot.title = profile.title;
  plot.x_label = "layer";
  plot.y_label = profile.y_label;
  bool has_final = false;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto it = runs[r].keyed.find(profile.metric);
    if (it == runs[r].keyed.end()) continue;
    const auto last = last_snapshot(it->second), first = first_snapshot(it->second);
    if (!last) continue;
    const std::string who = runs.size() > 1 ? runs[r].label + " " : "";
    if (first && first->step != last->step) {
      plot.curves.push_back({who + "@ step " + std::to_string(first->step), run_color(r), kDashed, 1.4, 0.7,
                             profile_points(*first, profile.include_final, extra_tick_x(top, 0))});
    }
    plot.curves.push_back({who + "@ step " + std::to_string(last->step), run_color(r), kSolid, 1.8, 1.0,
                           profile_points(*last, profile.include_final, extra_tick_x(top, 0))});
    for (const auto& [key, value] : last->values) has_final = has_final || key == "final";
  }
  if (plot.curves.empty()) return "";
  set_layer_ticks(plot, top, {},
                  profile.include_final && has_final ? std::vector<std::string>{"final"} : std::vector<std::string>{});
  plot.y_scale = auto_scale(plot.curves);
  std::vector<LegendEntry> legend;
  for (const auto& c : plot.curves) legend.push_back({c.label, c.color, c.dash});
  plot.legend = thin_legend(legend, kMaxProfileLegend);
  return figure(render_line_plot(plot), caption_html);
}

}  // namespace gc::report
