// The report's anchor-task section (data.format = "anchor"), from the `anchor` records
// (docs/metrics.md): the four accuracies over training, and, across the runs of a sweep,
// the final accuracy on the held-out pair against init.gamma (Zhang et al.'s figure:
// small initialization composes the anchors, large initialization copies the mirror).
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

const Series* anchor_series(const RunData& run, const std::string& measure) {
  const auto it = run.keyed.find("anchor");
  if (it == run.keyed.end()) return nullptr;
  const auto m = it->second.find(measure);
  return m == it->second.end() || m->second.empty() ? nullptr : &m->second;
}

std::string over_training(const std::vector<RunData>& runs, const std::string& measure, const std::string& title,
                          const std::string& caption) {
  LinePlot plot = steps_plot("anchor_" + measure, title, "accuracy");
  plot.y_includes_zero = true;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (const Series* s = anchor_series(runs[r], measure)) {
      plot.curves.push_back({runs[r].label, run_color(r), kSolid, 1.4, 0.9, *s});
    }
  }
  if (plot.curves.empty()) return "";
  if (runs.size() == 1) plot.curves[0].label.clear();
  return figure(render_line_plot(plot), caption);
}

std::optional<double> spec_number(const RunData& run, const std::string& key) {
  for (const auto& [k, v] : run.spec) {
    if (k == key) {
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end != v.c_str()) return x;
    }
  }
  return std::nullopt;
}

// Mean final held-out accuracies per γ (over the runs, e.g. seeds, that share it).
std::string against_gamma(const std::vector<RunData>& runs) {
  std::map<double, std::vector<std::pair<double, double>>> by_gamma;  // γ -> (inferential, symmetric) per run
  for (const auto& run : runs) {
    const Series* inf = anchor_series(run, "inferential");
    const Series* sym = anchor_series(run, "symmetric");
    const auto gamma = spec_number(run, "init.gamma");
    if (inf && sym && gamma) by_gamma[*gamma].push_back({inf->back().y, sym->back().y});
  }
  if (by_gamma.size() < 2) return "";
  LinePlot plot;
  plot.name = "anchor_vs_gamma";
  plot.title = "Held-out pair at the end of training, against γ";
  plot.x_label = "init.gamma (σ = d_in^−γ)";
  plot.y_label = "accuracy (mean over runs)";
  plot.y_includes_zero = true;
  Curve inferential{"inferential (composes the anchors)", run_color(0), kSolid, 1.8, 1.0, {}};
  Curve symmetric{"symmetric (copies the mirror pair)", run_color(1), kDashed, 1.8, 1.0, {}};
  Curve inf_runs{"", run_color(0), kSolid, 0.0, 0.35, {}};
  Curve sym_runs{"", run_color(1), kSolid, 0.0, 0.35, {}};
  for (const auto& [gamma, values] : by_gamma) {
    double i = 0.0, s = 0.0;
    for (const auto& [vi, vs] : values) {
      i += vi / double(values.size());
      s += vs / double(values.size());
      inf_runs.points.push_back({gamma, vi});
      sym_runs.points.push_back({gamma, vs});
    }
    inferential.points.push_back({gamma, i});
    symmetric.points.push_back({gamma, s});
  }
  plot.curves = {inf_runs, sym_runs, inferential, symmetric};
  return figure(render_line_plot(plot),
                "Lines: the mean over the runs at each γ; faint dots: the runs (seeds). Zhang et al. find the "
                "symmetric (memorizing) solution at large initialization and the inferential one at small.");
}

std::string final_table(const std::vector<RunData>& runs) {
  std::string rows;
  for (const auto& run : runs) {
    const Series* parts[4] = {anchor_series(run, "train"), anchor_series(run, "test"),
                              anchor_series(run, "inferential"), anchor_series(run, "symmetric")};
    if (!parts[0]) continue;
    rows += "<tr><td>" + html_escape(run.label) + "</td><td>" +
            std::to_string(std::int64_t(parts[0]->back().x)) + "</td>";
    for (const Series* s : parts) {
      char cell[32];
      std::snprintf(cell, sizeof cell, "%.3f", s ? s->back().y : 0.0);
      rows += std::string("<td>") + (s ? cell : "–") + "</td>";
    }
    rows += "</tr>\n";
  }
  if (rows.empty()) return "";
  return "<table class=\"data\"><thead><tr><th>run</th><th>step</th><th>train</th><th>test</th>"
         "<th>inferential</th><th>symmetric</th></tr></thead><tbody>\n" +
         rows + "</tbody></table>\n";
}

}  // namespace

std::optional<Section> anchor_section(const std::vector<RunData>& runs) {
  const bool has = std::any_of(runs.begin(), runs.end(), [](const RunData& r) { return r.keyed.count("anchor") > 0; });
  if (!has) return std::nullopt;
  std::vector<std::string> figures = {
      against_gamma(runs),
      over_training(runs, "inferential", "Held-out pair: inferential accuracy",
                    "The held-out pair (default (4,3)) answered with the composite of the two anchors (x−10)."),
      over_training(runs, "symmetric", "Held-out pair: symmetric accuracy",
                    "The held-out pair answered with its mirror's trained target (x−6 for (3,4))."),
      over_training(runs, "test", "Seen pairs, test keys", "Keys with x mod 9 = p, never in training."),
      over_training(runs, "train", "Seen pairs, training keys", "The first sequences of the training data."),
  };
  figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
  return Section{"anchor", "Anchor-function task",
                 figure_grid(figures) + final_table(runs) +
                     note("Accuracy = the argmax at the last position equals the target, over data.anchor."
                          "eval_sequences sequences per set (docs/reproductions.md).")};
}

}  // namespace gc::report
