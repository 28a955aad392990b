// The report's mixture-of-experts section, from the moe_routing records
// (docs/metrics.md): where the tokens went (a layer × expert heatmap of the
// last record's load over its mean), the max/mean imbalance, the router
// entropy and the balancing loss over training.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/text.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

// Layer keys in numeric order.
std::vector<std::string> sorted_layers(const std::map<std::string, std::vector<double>>& load) {
  std::vector<std::string> keys;
  for (const auto& [key, row] : load) keys.push_back(key);
  std::sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  return keys;
}

std::string load_heatmap(const RunData& run) {
  if (run.expert_load.empty()) return "";
  const auto layers = sorted_layers(run.expert_load);
  std::size_t experts = 0;
  for (const auto& key : layers) experts = std::max(experts, run.expert_load.at(key).size());
  if (experts == 0) return "";
  Heatmap h;
  h.name = "expert_load_heatmap:" + run.label;
  h.title = "Expert load at step " + std::to_string(run.expert_load_step) + ": " + run.label;
  h.x_label = "expert";
  h.y_label = "layer";
  h.value_label = "assignments / mean";
  h.rows = int(layers.size());
  h.cols = int(experts);
  h.values.assign(std::size_t(h.rows) * experts, NAN);
  double top = 1.0;
  for (std::size_t row = 0; row < layers.size(); ++row) {
    const auto& counts = run.expert_load.at(layers[row]);
    double total = 0.0;
    for (double c : counts) total += std::isfinite(c) ? c : 0.0;
    const double mean = total / double(counts.size());
    h.row_labels.push_back(layers[row]);
    for (std::size_t e = 0; e < counts.size() && mean > 0.0; ++e) {
      h.values[row * experts + e] = counts[e] / mean;
      if (std::isfinite(counts[e])) top = std::max(top, counts[e] / mean);
    }
  }
  for (std::size_t e = 0; e < experts; ++e) h.col_labels.push_back(std::to_string(e));
  h.vmin = 0.0;
  h.vmax = std::max(2.0, std::ceil(top * 2.0) / 2.0);
  h.diverging = true;  // white at 1 (the mean) when vmax = 2
  return figure(render_heatmap(h),
                "Each cell: the (token, rank) assignments one expert received since the previous routing record, "
                "over the layer's mean (1 = balanced).");
}

// One curve per run: the metric's mean over MoE layers (keyed) or its value (scalar).
std::string over_steps(const std::vector<RunData>& runs, const std::string& metric, bool keyed, LinePlot plot,
                       const std::string& caption) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    Series s;
    if (keyed) {
      const auto it = runs[r].keyed.find(metric);
      if (it != runs[r].keyed.end()) s = mean_over_keys(it->second);
    } else {
      const auto it = runs[r].scalars.find(metric);
      if (it != runs[r].scalars.end()) s = it->second;
    }
    if (!s.empty()) plot.curves.push_back({runs[r].label, run_color(r), kSolid, 1.6, 1.0, s});
  }
  if (plot.curves.empty()) return "";
  if (runs.size() == 1) plot.curves[0].label.clear();
  return figure(render_line_plot(plot), caption);
}

}  // namespace

std::optional<Section> moe_section(const std::vector<RunData>& runs) {
  const bool has = std::any_of(runs.begin(), runs.end(), [](const RunData& r) {
    return !r.expert_load.empty() || r.keyed.count("moe_routing.imbalance") > 0;
  });
  if (!has) return std::nullopt;
  std::vector<std::string> figures;
  LinePlot imbalance = steps_plot("moe_imbalance", "Expert load imbalance (mean over MoE layers)", "max / mean load");
  figures.push_back(over_steps(runs, "moe_routing.imbalance", true, imbalance,
                               "The busiest expert's assignments over the mean, per routing window; 1 = balanced."));
  LinePlot entropy = steps_plot("moe_router_entropy", "Router entropy (mean over MoE layers)", "nats");
  figures.push_back(over_steps(runs, "moe_routing.router_entropy", true, entropy,
                               "Mean over tokens of −Σ p ln p of the router's probabilities; ln E is uniform."));
  LinePlot aux = steps_plot("moe_aux_loss", "Balancing loss", "L_aux (sum over MoE layers)");
  figures.push_back(
      over_steps(runs, "moe_routing.aux_loss", false, aux, "coef · E · Σ f·P per layer; coef × layers when balanced."));
  for (const auto& run : runs) figures.push_back(load_heatmap(run));
  figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
  return Section{"moe", "Mixture of experts", figure_grid(figures)};
}

}  // namespace gc::report
