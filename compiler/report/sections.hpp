// The report's sections: each function turns collected run data into HTML
// fragments (figures with inline SVG, tables). A section with no data is left
// out. Shared figure helpers live in sections_common.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "report/compare.hpp"
#include "report/report.hpp"
#include "report/svg.hpp"

namespace gc::report {

struct Section {
  std::string id;     // HTML id, for the table of contents
  std::string title;  // heading
  std::string html;   // body
};

// Data sections in page order (the header and spec table are built by page.cpp).
std::vector<Section> training_sections(const std::vector<RunData>& runs);
// Mixture of experts: expert load (layer × expert heatmap), imbalance, router
// entropy and balancing loss over training (sections_moe.cpp).
std::optional<Section> moe_section(const std::vector<RunData>& runs);
// The anchor task (data.format = "anchor"): its accuracies over training and, across a
// sweep, the held-out pair's final accuracies against init.gamma (sections_anchor.cpp).
std::optional<Section> anchor_section(const std::vector<RunData>& runs);
std::vector<Section> matrix_sections(const std::vector<RunData>& runs);
std::vector<Section> diagnostic_sections(const std::vector<RunData>& runs);
std::vector<Section> other_metric_sections(const std::vector<RunData>& runs);
std::vector<Section> comparison_sections(const std::vector<Comparison>& comparisons);

// Metric names (and NAME.FIELD extras) the dedicated sections show; everything
// else goes to "Other metrics".
bool is_known_metric(const std::string& name);

// ---- helpers shared by the section files ----

std::string run_color(std::size_t run_index);
// The dash pattern that tells runs apart when colour encodes something else.
std::string run_dash(std::size_t run_index);

// <figure> around an SVG, with an optional caption (HTML).
std::string figure(const std::string& svg, const std::string& caption_html = "");
// A responsive grid of figures.
std::string figure_grid(const std::vector<std::string>& figures);
// <p class="note">.
std::string note(const std::string& html);

// Log when positive values span a wide range (see choose_scale), else linear.
AxisScale auto_scale(const std::vector<Curve>& curves, double ratio = 50);

// A line plot over training steps with one labelled line per run.
LinePlot steps_plot(const std::string& name, const std::string& title, const std::string& y_label);
// Vertical "non-finite" markers for runs that stopped.
std::vector<Marker> nonfinite_markers(const std::vector<RunData>& runs);

// A per-layer profile: the keyed metric's layer keys (and "final", drawn one
// past the last layer) at the last step (solid) and the first step (dashed)
// of every run. Returns "" when no run has the metric.
struct LayerProfile {
  std::string metric;  // key in RunData::keyed
  std::string name, title, y_label;
  bool include_final = false;
};
std::string layer_profile_figure(const std::vector<RunData>& runs, const LayerProfile& profile,
                                 const std::string& caption_html);

// x ticks for a per-layer plot over layers 0..top_layer: thinned integer
// ticks, `before` names left of layer 0 and `after` names right of the last
// layer (e.g. "emb", "final"), at extra_tick_x(top_layer, -1, -2, ...) and
// extra_tick_x(top_layer, 0, 1, ...).
double extra_tick_x(int top_layer, int index);
void set_layer_ticks(LinePlot& plot, int top_layer, const std::vector<std::string>& before,
                     const std::vector<std::string>& after);

// Evenly spaced legend entries (first and last kept) when there are too many.
std::vector<LegendEntry> thin_legend(const std::vector<LegendEntry>& entries, std::size_t max_entries);

}  // namespace gc::report
