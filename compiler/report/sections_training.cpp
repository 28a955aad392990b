// Sections "Loss and optimization" and "Attention sinks".
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "common/text.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

bool any_run(const std::vector<RunData>& runs, bool (*has)(const RunData&)) {
  return std::any_of(runs.begin(), runs.end(), has);
}

// The x extent of every training record of every run.
std::pair<double, double> step_extent(const std::vector<RunData>& runs) {
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& run : runs) {
    for (const Series* s : {&run.loss, &run.val_loss}) {
      for (const Point& p : *s) {
        lo = std::min(lo, p.x);
        hi = std::max(hi, p.x);
      }
    }
  }
  return {lo, hi};
}

// Validation loss, starting from the step-0 `initial_loss` metric when the log
// has no step-0 validation record.
Series validation_curve(const RunData& run) {
  Series out = run.val_loss;
  const auto init = run.scalars.find("initial_loss");
  const bool has_step0 = !out.empty() && out.front().x == 0;
  if (init != run.scalars.end() && !init->second.empty() && !has_step0) {
    out.insert(out.begin(), init->second.front());
  }
  return out;
}

std::optional<double> log_vocab(const std::vector<RunData>& runs) {
  for (const auto& run : runs) {
    const auto it = run.scalars.find("initial_loss.log_vocab");
    if (it != run.scalars.end()) {
      if (auto v = last_finite(it->second)) return v;
    }
  }
  return std::nullopt;
}

std::string loss_figure(const std::vector<RunData>& runs) {
  LinePlot plot = steps_plot("loss", "Training and validation loss", "loss (nats)");
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const std::string who = runs.size() > 1 ? runs[r].label + " " : "";
    if (!runs[r].loss.empty()) plot.curves.push_back({who + "train", run_color(r), kSolid, 1.5, 1.0, runs[r].loss});
    const Series val = validation_curve(runs[r]);
    if (!val.empty()) plot.curves.push_back({who + "val", run_color(r), kDashed, 1.8, 1.0, val});
  }
  std::string caption = "Solid: training loss; dashed: validation loss (from the step-0 initial loss where recorded).";
  if (const auto ln_v = log_vocab(runs)) {
    const auto [lo, hi] = step_extent(runs);
    plot.curves.push_back(
        {"ln V = " + format_value(*ln_v, 4), "#888888", kDotted, 1.4, 1.0, {{lo, *ln_v}, {hi, *ln_v}}, false});
    caption += " Dotted: ln V, the loss of a uniform prediction.";
  }
  plot.markers = nonfinite_markers(runs);
  return figure(render_line_plot(plot), caption);
}

std::string per_run_figure(const std::vector<RunData>& runs, Series RunData::* field, LinePlot plot,
                           const std::string& caption) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (!(runs[r].*field).empty())
      plot.curves.push_back({runs[r].label, run_color(r), kSolid, 1.5, 1.0, runs[r].*field});
  }
  if (plot.curves.empty()) return "";
  if (runs.size() == 1) plot.curves[0].label.clear();
  plot.y_scale = plot.y_scale == AxisScale::Log ? auto_scale(plot.curves, 20) : plot.y_scale;
  plot.markers = nonfinite_markers(runs);
  return figure(render_line_plot(plot), caption);
}

std::optional<Section> loss_section(const std::vector<RunData>& runs) {
  const bool has_loss = any_run(runs, [](const RunData& r) { return !r.loss.empty() || !r.val_loss.empty(); });
  if (!has_loss) return std::nullopt;
  std::vector<std::string> figures = {loss_figure(runs)};
  LinePlot lr = steps_plot("learning_rate", "Learning-rate schedule", "learning rate");
  figures.push_back(per_run_figure(runs, &RunData::lr, lr, ""));
  LinePlot grad = steps_plot("train_grad_norm", "Global gradient norm", "‖g‖₂ (gradient L2 norm)");
  grad.y_scale = AxisScale::Log;  // log only if the values span a wide range
  figures.push_back(per_run_figure(runs, &RunData::grad_norm, grad, "All parameters, as logged by train."));
  figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
  return Section{"loss", "Loss and optimization", figure_grid(figures)};
}

// Layer × step matrix of one run's sink scores.
std::string sink_heatmap(const RunData& run) {
  const auto it = run.keyed.find("sink_score");
  if (it == run.keyed.end()) return "";
  std::set<double> steps;
  std::vector<std::pair<int, const Series*>> layers;
  for (const auto& [key, series] : it->second) {
    if (layer_index(key) < 0) continue;
    layers.emplace_back(layer_index(key), &series);
    for (const Point& p : series) steps.insert(p.x);
  }
  if (steps.size() < 2 || layers.empty()) return "";
  const std::vector<double> step_list(steps.begin(), steps.end());
  Heatmap h;
  h.name = "sink_score_heatmap:" + run.label;
  h.title = "Sink score by layer and step: " + run.label;
  h.x_label = "step";
  h.y_label = "layer";
  h.value_label = "sink score (fraction)";
  h.rows = int(layers.size());
  h.cols = int(step_list.size());
  h.values.assign(std::size_t(h.rows) * std::size_t(h.cols), NAN);
  double top = 0;
  for (std::size_t row = 0; row < layers.size(); ++row) {
    h.row_labels.push_back(std::to_string(layers[row].first));
    for (const Point& p : *layers[row].second) {
      const auto col = std::size_t(std::lower_bound(step_list.begin(), step_list.end(), p.x) - step_list.begin());
      h.values[row * step_list.size() + col] = p.y;
      if (std::isfinite(p.y)) top = std::max(top, p.y);
    }
  }
  for (double s : step_list) h.col_labels.push_back(format_value(s, 7));
  h.vmin = 0;
  h.vmax = std::min(1.0, std::max(0.05, std::ceil(top * 10) / 10));
  return figure(render_heatmap(h), "Each cell: mean attention mass that layer's queries put on the first token.");
}

std::optional<Section> sink_section(const std::vector<RunData>& runs) {
  const bool has = any_run(runs, [](const RunData& r) { return r.keyed.count("sink_score") > 0; });
  if (!has) return std::nullopt;
  std::vector<std::string> figures;
  figures.push_back(layer_profile_figure(
      runs, {"sink_score", "sink_score_by_layer", "Sink score by layer", "attention on token 0 (fraction)", false},
      "Mean attention mass on the first token (seed 000 eq. 5), solid at the last recorded step, dashed at the "
      "first."));
  LinePlot over = steps_plot("sink_score_over_steps", "Sink score over training (mean over layers)",
                             "attention on token 0 (fraction)");
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const auto it = runs[r].keyed.find("sink_score");
    if (it != runs[r].keyed.end()) {
      over.curves.push_back({runs[r].label, run_color(r), kSolid, 1.8, 1.0, mean_over_keys(it->second)});
    }
  }
  over.y_includes_zero = true;
  figures.push_back(figure(render_line_plot(over)));
  for (const auto& run : runs) figures.push_back(sink_heatmap(run));
  figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
  return Section{"sinks", "Attention sinks", figure_grid(figures)};
}

}  // namespace

std::vector<Section> training_sections(const std::vector<RunData>& runs) {
  std::vector<Section> out;
  if (auto s = loss_section(runs)) out.push_back(std::move(*s));
  if (auto s = sink_section(runs)) out.push_back(std::move(*s));
  if (auto s = moe_section(runs)) out.push_back(std::move(*s));
  if (auto s = anchor_section(runs)) out.push_back(std::move(*s));
  return out;
}

}  // namespace gc::report
