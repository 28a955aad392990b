// Section "Token-level comparison": Δsym p between two checkpoints (seed 000 §2.5).
#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

constexpr std::size_t kContextBytes = 160;
constexpr const char* kABetter = "#c8553d";
constexpr const char* kBBetter = "#2f6fa8";

std::string cell(const std::string& text) { return "<td>" + html_escape(text) + "</td>"; }
std::string num_cell(double v) { return "<td class=\"num\">" + (std::isfinite(v) ? format_value(v) : "—") + "</td>"; }

std::string summary_table(const Comparison& c) {
  auto side_row = [](const char* which, const CompareSide& s) {
    return "<tr><th>" + std::string(which) + "</th>" + cell(s.label) + "<td><code>" + html_escape(s.checkpoint) +
           "</code></td>" + "<td class=\"num\">" + (s.step >= 0 ? std::to_string(s.step) : "—") + "</td>" +
           num_cell(s.mean_loss) + "</tr>\n";
  };
  std::string out =
      "<table class=\"data\"><tr><th></th><th>label</th><th>checkpoint</th><th>step</th>"
      "<th>mean loss (nats)</th></tr>\n";
  out += side_row("a", c.a) + side_row("b", c.b) + "</table>\n";
  out +=
      "<table class=\"data\"><tr><th>tokens</th><th>mean Δp</th><th>mean Δsym p</th><th>median Δsym p</th></tr>\n"
      "<tr><td class=\"num\">" +
      std::to_string(c.tokens) + "</td>" + num_cell(c.mean_delta_p) + num_cell(c.mean_delta_sym_p) +
      num_cell(c.median_delta_sym_p) + "</tr></table>\n";
  return out;
}

std::string histogram_figure(const Comparison& c, const std::string& suffix) {
  if (c.histogram_counts.empty()) return "";
  Histogram h;
  h.name = "delta_sym_p_histogram" + suffix;
  h.title = "Distribution of Δsym p over tokens";
  h.x_label = "Δsym p = 2(p_a − p_b)/(p_a + p_b)";
  h.y_label = "tokens (count)";
  h.edges = c.histogram_edges;
  h.counts = c.histogram_counts;
  for (std::size_t i = 0; i < h.counts.size(); ++i) {
    const double centre = (h.edges[i] + h.edges[i + 1]) / 2;
    h.colors.push_back(std::fabs(centre) < 1e-12 ? "#999999" : centre > 0 ? kABetter : kBBetter);
  }
  h.legend = {{c.a.label + " (a) better", kABetter, kSolid}, {c.b.label + " (b) better", kBBetter, kSolid}};
  if (std::isfinite(c.mean_delta_sym_p)) h.markers.push_back({c.mean_delta_sym_p, "mean", "#222222"});
  if (std::isfinite(c.median_delta_sym_p)) h.markers.push_back({c.median_delta_sym_p, "median", "#666666"});
  return figure(render_histogram(h),
                "Right of 0: model a (" + html_escape(c.a.label) + ") gives the token higher probability.");
}

std::string decile_figure(const Comparison& c, const std::string& suffix) {
  if (c.deciles.empty()) return "";
  BarChart chart;
  chart.name = "delta_sym_p_deciles" + suffix;
  chart.title = "Δsym p by token difficulty";
  chart.x_label = "difficulty decile (1 = easiest)";
  chart.y_label = "Δsym p";
  BarGroup mean{"mean", "#c8553d", {}}, median{"median", "#f2a65a", {}};
  for (const auto& d : c.deciles) {
    chart.categories.push_back(std::to_string(d.decile));
    mean.values.push_back(d.mean);
    median.values.push_back(d.median);
  }
  chart.groups = {mean, median};
  return figure(render_bar_chart(chart), "Positive: model a predicts the tokens of that decile better.");
}

std::string decile_table(const Comparison& c) {
  if (c.deciles.empty()) return "";
  std::string out =
      "<table class=\"data compact\"><tr><th>decile</th><th>difficulty</th><th>tokens</th>"
      "<th>mean Δsym p</th><th>median Δsym p</th></tr>\n";
  for (const auto& d : c.deciles) {
    out += "<tr><td class=\"num\">" + std::to_string(d.decile) + "</td><td class=\"num\">" +
           format_value(d.difficulty_min, 3) + " – " + format_value(d.difficulty_max, 3) + "</td><td class=\"num\">" +
           std::to_string(d.count) + "</td>" + num_cell(d.mean) + num_cell(d.median) + "</tr>\n";
  }
  return out + "</table>\n";
}

// The last `kContextBytes` of the context, cut at a character boundary, with
// newlines made visible.
std::string visible_context(const std::string& context) {
  std::size_t start = context.size() > kContextBytes ? context.size() - kContextBytes : 0;
  while (start < context.size() && (static_cast<unsigned char>(context[start]) & 0xC0) == 0x80) ++start;
  std::string out = start > 0 ? "…" : "";
  for (std::size_t i = start; i < context.size(); ++i) {
    out += context[i] == '\n' ? std::string("⏎ ") : std::string(1, context[i]);
  }
  return out;
}

std::string token_gain(const TokenGain& g) {
  const double t = std::isfinite(g.delta_sym_p) ? std::clamp(g.delta_sym_p / 2, -1.0, 1.0) : NAN;
  const std::string text_color = std::isfinite(t) && std::fabs(t) > 0.55 ? "#ffffff" : "#111111";
  const std::string token = g.token.empty() ? "∅" : g.token;
  return "<li><span class=\"delta\">" + format_value(g.delta_sym_p, 3) + "</span><span class=\"probs\">p_a " +
         format_value(g.p_a, 3) + ", p_b " + format_value(g.p_b, 3) + "</span><span class=\"context\">" +
         html_escape(visible_context(g.context)) + "<mark style=\"background:" + hex(diverging_rgb(t)) +
         ";color:" + text_color + "\">" + html_escape(token) + "</mark></span></li>\n";
}

std::string top_gains(const Comparison& c) {
  if (c.top_gains.empty()) return "";
  std::string out = "<h4>Tokens with the largest Δsym p, in context</h4>\n<ol class=\"tokens\">\n";
  for (const auto& g : c.top_gains) out += token_gain(g);
  return out + "</ol>\n" +
         note("Highlight colour: Δsym p from −2 (blue, b better) through 0 (white) to +2 (red, a better).");
}

}  // namespace

std::vector<Section> comparison_sections(const std::vector<Comparison>& comparisons) {
  if (comparisons.empty()) return {};
  std::string html = note(
      "Δsym p = 2(p_a − p_b)/(p_a + p_b) per token; a is the small-init model. Positive "
      "values: a assigns the observed token more probability.");
  for (std::size_t i = 0; i < comparisons.size(); ++i) {
    const Comparison& c = comparisons[i];
    const std::string suffix = comparisons.size() > 1 ? ":" + std::to_string(i + 1) : "";
    html += "<h3>" + html_escape(c.a.label) + " (a) vs " + html_escape(c.b.label) + " (b)</h3>\n";
    html += "<p class=\"source\">" + html_escape(c.path) + "</p>\n" + summary_table(c);
    std::vector<std::string> figures = {histogram_figure(c, suffix), decile_figure(c, suffix)};
    figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
    html += figure_grid(figures) + decile_table(c) + top_gains(c);
  }
  return {{"compare", "Token-level comparison", html}};
}

}  // namespace gc::report
