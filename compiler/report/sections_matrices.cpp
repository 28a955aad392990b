// Sections "Stable rank" and "Row cosine similarity": per-matrix metrics
// grouped by matrix type (q_proj, k_proj, ...), one line per layer.
#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

constexpr std::size_t kMaxLayerLegend = 8;
constexpr std::size_t kMaxThumbnailsPerRun = 60;

struct MatrixMetric {
  std::string metric;  // key in RunData::keyed
  std::string plot_prefix, title, y_label;
};

// Every group of the metric over all runs, in model order (values unused).
std::vector<MatrixGroup> all_groups(const std::vector<RunData>& runs, const std::string& metric) {
  KeyedSeries names;
  for (const auto& run : runs) {
    const auto it = run.keyed.find(metric);
    if (it == run.keyed.end()) continue;
    for (const auto& [name, series] : it->second) names[name];
  }
  return group_by_matrix(names);
}

const MatrixGroup* find_group(const std::vector<MatrixGroup>& groups, const std::string& group) {
  for (const auto& g : groups) {
    if (g.group == group) return &g;
  }
  return nullptr;
}

// Escaped, with line-break opportunities after the dots of a tensor name.
std::string breakable(const std::string& name) {
  std::string out;
  for (char c : html_escape(name)) out += c == '.' ? std::string(".<wbr>") : std::string(1, c);
  return out;
}

std::string layer_name(int layer) { return layer < 0 ? "" : "layer " + std::to_string(layer); }

// One run: a colour per layer (dark = shallow, light = deep).
void add_single_run_lines(LinePlot& plot, const MatrixGroup& g) {
  std::size_t i = 0;
  for (const auto& [layer, series] : g.layers) {
    plot.curves.push_back({layer_name(layer), sequential_line_color(i++, g.layers.size()), kSolid, 1.5, 1.0, series});
  }
  std::vector<LegendEntry> legend;
  for (const auto& c : plot.curves) {
    if (!c.label.empty()) legend.push_back({c.label, c.color, c.dash});
  }
  plot.legend = thin_legend(legend, kMaxLayerLegend);
}

// Several runs: a colour per run, deeper layers more opaque.
void add_run_lines(LinePlot& plot, const MatrixGroup& g, std::size_t run_index, const std::string& label) {
  std::size_t i = 0;
  for (const auto& [layer, series] : g.layers) {
    const double depth = g.layers.size() > 1 ? double(i++) / double(g.layers.size() - 1) : 1.0;
    plot.curves.push_back({"", run_color(run_index), kSolid, 1.3, 0.3 + 0.7 * depth, series});
  }
  plot.legend.push_back({label, run_color(run_index), kSolid});
}

std::string group_figure(const std::vector<RunData>& runs, const MatrixMetric& m, const MatrixGroup& group) {
  LinePlot plot = steps_plot(m.plot_prefix + ":" + group.short_name, m.title + ": " + group.short_name, m.y_label);
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto it = runs[r].keyed.find(m.metric);
    if (it == runs[r].keyed.end()) continue;
    const std::vector<MatrixGroup> groups = group_by_matrix(it->second);
    const MatrixGroup* g = find_group(groups, group.group);
    if (!g) continue;
    if (runs.size() == 1) {
      add_single_run_lines(plot, *g);
    } else {
      add_run_lines(plot, *g, r, runs[r].label);
    }
  }
  plot.y_scale = auto_scale(plot.curves);
  return figure(render_line_plot(plot));
}

std::string grouping_note(const std::vector<RunData>& runs, const std::string& what) {
  if (runs.size() == 1)
    return note(what + " One plot per matrix type, one line per layer (dark = first layer, light = last).");
  return note(what + " One plot per matrix type; colour = run, one line per layer (fainter = shallower).");
}

std::vector<std::string> group_figures(const std::vector<RunData>& runs, const MatrixMetric& m) {
  std::vector<std::string> out;
  for (const auto& group : all_groups(runs, m.metric)) out.push_back(group_figure(runs, m, group));
  return out;
}

// σ_max of every matrix at the last step, by layer: one line per matrix type.
std::string sigma_max_figure(const std::vector<RunData>& runs) {
  LinePlot plot;
  plot.name = "sigma_max_by_layer";
  plot.title = "Largest singular value by layer (last step)";
  plot.x_label = "layer";
  plot.y_label = "σ_max(W) = ‖W‖₂";
  std::vector<std::string> group_order;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto it = runs[r].keyed.find("stable_rank.sigma_max");
    if (it == runs[r].keyed.end()) continue;
    for (const MatrixGroup& g : group_by_matrix(it->second)) {
      if (g.layers.begin()->first < 0) continue;
      auto pos = std::find(group_order.begin(), group_order.end(), g.short_name);
      if (pos == group_order.end()) pos = group_order.insert(group_order.end(), g.short_name);
      Curve c{g.short_name, categorical_color(std::size_t(pos - group_order.begin())), run_dash(r), 1.6, 1.0, {}};
      for (const auto& [layer, series] : g.layers) {
        if (auto v = last_finite(series)) c.points.push_back({double(layer), *v});
      }
      plot.curves.push_back(std::move(c));
    }
  }
  if (plot.curves.empty()) return "";
  for (std::size_t i = 0; i < group_order.size(); ++i)
    plot.legend.push_back({group_order[i], categorical_color(i), kSolid});
  if (runs.size() > 1) {
    for (std::size_t r = 0; r < runs.size(); ++r) plot.legend.push_back({runs[r].label, "#555555", run_dash(r)});
  }
  double top = 0;
  for (const auto& c : plot.curves) {
    for (const auto& p : c.points) top = std::max(top, p.x);
  }
  plot.x_ticks = integer_ticks(0, top, 12);
  plot.y_scale = auto_scale(plot.curves);
  return figure(render_line_plot(plot), runs.size() > 1 ? "Line style = run." : "");
}

std::string thumbnail(const RunData& run, const CosineImage& image, bool several_runs) {
  const TensorName t = split_tensor_name(image.tensor);
  ImagePlot plot;
  plot.name = "cosine_image:" + (several_runs ? run.label + ":" : "") + image.tensor + "@" + std::to_string(image.step);
  plot.title = (t.layer >= 0 ? "L" + std::to_string(t.layer) + " " : "") + t.group + " @ " + std::to_string(image.step);
  plot.x_label = "row j";
  plot.y_label = "row i";
  plot.png = image.png;
  plot.x_extent = plot.y_extent = double(std::max<std::int64_t>(1, image.rows));
  return figure(render_image_plot(plot), "<code>" + breakable(image.tensor) + "</code>, step " +
                                             std::to_string(image.step) + ", " + std::to_string(image.rows) + " rows");
}

std::string thumbnails(const std::vector<RunData>& runs) {
  std::string out;
  for (const auto& run : runs) {
    std::vector<const CosineImage*> usable;
    std::string problems;
    for (const auto& image : run.images) {
      if (image.problem.empty()) {
        usable.push_back(&image);
      } else {
        problems += "<li>" + html_escape(image.problem) + "</li>";
      }
    }
    std::stable_sort(usable.begin(), usable.end(), [](const CosineImage* a, const CosineImage* b) {
      if (a->tensor != b->tensor) return NaturalLess()(a->tensor, b->tensor);
      return a->step < b->step;
    });
    if (usable.empty() && problems.empty()) continue;
    if (runs.size() > 1) out += "<h3>" + html_escape(run.label) + "</h3>\n";
    std::vector<std::string> figures;
    for (std::size_t i = 0; i < usable.size() && i < kMaxThumbnailsPerRun; ++i) {
      figures.push_back(thumbnail(run, *usable[i], runs.size() > 1));
    }
    out += "<div class=\"figures thumbs\">\n" + join(figures, "") + "</div>\n";
    if (usable.size() > kMaxThumbnailsPerRun) {
      out += note(std::to_string(usable.size() - kMaxThumbnailsPerRun) + " more images not shown.");
    }
    if (!problems.empty()) out += "<p class=\"note\">Images left out:</p><ul class=\"note\">" + problems + "</ul>\n";
  }
  return out;
}

bool has_metric(const std::vector<RunData>& runs, const std::string& metric) {
  return std::any_of(runs.begin(), runs.end(), [&](const RunData& r) { return r.keyed.count(metric) > 0; });
}

}  // namespace

std::vector<Section> matrix_sections(const std::vector<RunData>& runs) {
  std::vector<Section> out;
  if (has_metric(runs, "stable_rank") || has_metric(runs, "stable_rank.sigma_max")) {
    const MatrixMetric m{"stable_rank", "stable_rank", "Stable rank", "stable rank ‖W‖²_F / ‖W‖²₂"};
    std::vector<std::string> figures = group_figures(runs, m);
    const std::string sigma = sigma_max_figure(runs);
    if (!sigma.empty()) figures.push_back(sigma);
    out.push_back({"stable-rank", "Stable rank",
                   grouping_note(runs,
                                 "Stable rank ‖W‖_F² / ‖W‖₂² of each weight matrix: the effective number of "
                                 "directions it uses (1 = rank one).") +
                       figure_grid(figures)});
  }
  const bool images = std::any_of(runs.begin(), runs.end(), [](const RunData& r) { return !r.images.empty(); });
  if (has_metric(runs, "cosine_similarity") || images) {
    const MatrixMetric m{"cosine_similarity", "cosine_similarity", "Row cosine", "mean |cos(row i, row j)|, i ≠ j"};
    std::string html = grouping_note(runs,
                                     "Mean absolute cosine similarity between the rows of each weight matrix "
                                     "(seed 000 eq. 6): 0 = orthogonal rows, 1 = all rows parallel.");
    html += figure_grid(group_figures(runs, m));
    if (images) html += "<h3>Row-cosine heatmaps</h3>\n" + thumbnails(runs);
    out.push_back({"row-cosine", "Row cosine similarity", html});
  }
  return out;
}

}  // namespace gc::report
