// Sections "Signal propagation", "Parameter and update norms" and "Other metrics".
#include <algorithm>
#include <cmath>
#include <set>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/sections.hpp"

namespace gc::report {

namespace {

constexpr std::size_t kMaxKeyLegend = 12;

const KeyedSeries* keyed(const RunData& run, const std::string& name) {
  const auto it = run.keyed.find(name);
  return it == run.keyed.end() ? nullptr : &it->second;
}

const Series* scalar(const RunData& run, const std::string& name) {
  const auto it = run.scalars.find(name);
  return it == run.scalars.end() ? nullptr : &it->second;
}

// One line per run of a scalar metric; "" when no run has it.
std::string scalar_figure(const std::vector<RunData>& runs, const std::string& metric, LinePlot plot,
                          const std::string& caption) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (const Series* s = scalar(runs[r], metric))
      plot.curves.push_back({runs[r].label, run_color(r), kSolid, 1.8, 1.0, *s});
  }
  if (plot.curves.empty()) return "";
  plot.y_scale = auto_scale(plot.curves, 20);
  return figure(render_line_plot(plot), caption);
}

// "3.post_attention" → {3, "post_attention"}; "final" → {-1, "final"}.
std::pair<int, std::string> split_norm_name(const std::string& key) {
  const auto dot = key.find('.');
  const int layer = dot == std::string::npos ? -1 : layer_index(key.substr(0, dot));
  return layer < 0 ? std::pair{-1, key} : std::pair{layer, key.substr(dot + 1)};
}

// The ratio (or, without ε-free values, the factor itself) at the last step.
std::optional<Snapshot> rmsnorm_snapshot(const RunData& run, bool& ratios) {
  const KeyedSeries* factor = keyed(run, "rmsnorm_factor");
  const KeyedSeries* eps_free = keyed(run, "rmsnorm_factor.eps_free");
  if (!factor) return std::nullopt;
  if (!eps_free) ratios = false;
  return last_snapshot(eps_free ? ratio(*factor, *eps_free) : *factor);
}

// Per-layer norms as lines over the layer (one per position: input,
// post_attention, ...); the embedding norm left of layer 0 and the final norm
// (and any other) right of the last layer, as dots.
std::string rmsnorm_figure(const std::vector<RunData>& runs) {
  bool ratios = true;
  std::vector<std::optional<Snapshot>> snaps;
  std::set<std::string, NaturalLess> positions, others;
  int top = -1;
  for (const auto& run : runs) {
    snaps.push_back(rmsnorm_snapshot(run, ratios));
    if (!snaps.back()) continue;
    for (const auto& [key, v] : snaps.back()->values) {
      const auto [layer, name] = split_norm_name(key);
      (layer >= 0 ? positions : others).insert(name);
      top = std::max(top, layer);
    }
  }
  if (positions.empty() && others.empty()) return "";
  const std::vector<std::string> position_list(positions.begin(), positions.end());
  std::vector<std::string> before, after;
  for (const auto& name : others) (name == "embedding" ? before : after).push_back(name);
  LinePlot plot;
  plot.name = "rmsnorm_ratio";
  plot.title = ratios ? "RMSNorm: ε-limited ÷ ε-free factor (last step)" : "RMSNorm effective factor (last step)";
  plot.x_label = "layer";
  plot.y_label = ratios ? "(σ²+ε)^-½ ÷ σ^-1 (ratio)" : "(σ²+ε)^-½";
  const bool several = runs.size() > 1;
  for (std::size_t r = 0; r < runs.size(); ++r) {
    if (!snaps[r]) continue;
    std::vector<Curve> lines(position_list.size());
    for (std::size_t p = 0; p < lines.size(); ++p) {
      lines[p] = {(several ? runs[r].label + " " : "") + position_list[p],
                  several ? run_color(r) : categorical_color(p),
                  several ? run_dash(p) : kSolid,
                  1.8,
                  1.0,
                  {}};
    }
    for (const auto& [key, v] : snaps[r]->values) {
      const auto [layer, name] = split_norm_name(key);
      if (layer >= 0) {
        lines[std::size_t(std::find(position_list.begin(), position_list.end(), name) - position_list.begin())]
            .points.push_back({double(layer), v});
        continue;
      }
      const bool is_before = name == "embedding";
      const auto& list = is_before ? before : after;
      const auto index = int(std::find(list.begin(), list.end(), name) - list.begin());
      const double x = extra_tick_x(std::max(top, 0), is_before ? -1 - index : index);
      plot.curves.push_back({"", several ? run_color(r) : "#444444", kSolid, 1.8, 1.0, {{x, v}}});
    }
    for (auto& line : lines) {
      std::sort(line.points.begin(), line.points.end(), [](const Point& a, const Point& b) { return a.x < b.x; });
      if (!line.points.empty()) plot.curves.push_back(std::move(line));
    }
  }
  std::vector<std::string> before_labels = before;
  for (auto& label : before_labels) label = label == "embedding" ? "emb" : label;
  set_layer_ticks(plot, std::max(top, 0), before_labels, after);
  plot.y_scale = auto_scale(plot.curves, 20);
  const std::string caption =
      ratios ? "1 = ε is negligible against the variance; below 1 = ε dominates (the norm "
               "saturates and stops normalizing). Dots: the embedding norm (emb) and the final norm."
             : "No ε-free factors were logged, so the ratio cannot be shown.";
  return figure(render_line_plot(plot), caption);
}

std::string embedding_cosine_figure(const std::vector<RunData>& runs) {
  LinePlot plot = steps_plot("embedding_cosine", "Embedding cosine among frequent tokens", "cosine (dimensionless)");
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const std::string who = runs.size() > 1 ? runs[r].label + " " : "";
    if (const Series* s = scalar(runs[r], "embedding_cosine"))
      plot.curves.push_back({who + "mean |cos|", run_color(r), kSolid, 1.8, 1.0, *s});
    if (const Series* s = scalar(runs[r], "embedding_cosine.mean"))
      plot.curves.push_back({who + "mean cos", run_color(r), kDashed, 1.5, 1.0, *s});
  }
  if (plot.curves.empty()) return "";
  return figure(render_line_plot(plot), "Pairwise cosine between the embeddings of the most frequent tokens.");
}

std::string initial_loss_table(const std::vector<RunData>& runs) {
  std::string rows;
  for (const auto& run : runs) {
    const Series* loss = scalar(run, "initial_loss");
    const Series* log_v = scalar(run, "initial_loss.log_vocab");
    if (!loss || loss->empty()) continue;
    const double l = loss->front().y, v = log_v && !log_v->empty() ? log_v->front().y : NAN;
    rows += "<tr><td>" + html_escape(run.label) + "</td><td class=\"num\">" + format_value(l) +
            "</td><td class=\"num\">" + format_value(v) + "</td><td class=\"num\">" +
            (std::isfinite(v) ? format_value(l - v, 3) : "—") + "</td></tr>\n";
  }
  if (rows.empty()) return "";
  return "<h3>Initial loss</h3>\n<table class=\"data\"><tr><th>run</th><th>loss at step 0 (nats)</th><th>ln V "
         "(nats)</th><th>difference</th></tr>\n" +
         rows + "</table>\n" + note("A well-scaled init starts near ln V, the loss of a uniform prediction.");
}

int class_rank(const std::string& name) {
  static const char* const kOrder[] = {"embedding", "attn_q", "attn_k",   "attn_v",  "attn_gate", "attn_o",
                                       "mlp_gate",  "mlp_up", "mlp_down", "lm_head", "norm"};
  for (int i = 0; i < int(sizeof kOrder / sizeof kOrder[0]); ++i) {
    if (name == kOrder[i]) return i;
  }
  return 100;
}

// One line per (key, run): colour = key, line style = run.
std::string keyed_steps_figure(const std::vector<RunData>& runs, const std::string& metric, LinePlot plot,
                               bool class_order, const std::string& caption) {
  std::vector<std::string> keys;
  for (const auto& run : runs) {
    if (const KeyedSeries* m = keyed(run, metric)) {
      for (const auto& [key, s] : *m) {
        if (std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
      }
    }
  }
  if (keys.empty()) return "";
  if (class_order) {
    std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
      return class_rank(a) != class_rank(b) ? class_rank(a) < class_rank(b) : NaturalLess()(a, b);
    });
  } else {
    std::stable_sort(keys.begin(), keys.end(), NaturalLess());
  }
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const KeyedSeries* m = keyed(runs[r], metric);
    if (!m) continue;
    for (const auto& [key, s] : *m) {
      const auto k = std::size_t(std::find(keys.begin(), keys.end(), key) - keys.begin());
      plot.curves.push_back({key, categorical_color(k), run_dash(r), 1.5, 1.0, s});
    }
  }
  std::vector<LegendEntry> legend;
  for (std::size_t k = 0; k < keys.size(); ++k) legend.push_back({keys[k], categorical_color(k), kSolid});
  legend = thin_legend(legend, kMaxKeyLegend);
  if (runs.size() > 1) {
    for (std::size_t r = 0; r < runs.size(); ++r) legend.push_back({runs[r].label, "#555555", run_dash(r)});
  }
  plot.legend = legend;
  plot.y_scale = auto_scale(plot.curves, 20);
  return figure(render_line_plot(plot), caption + (runs.size() > 1 ? " Line style = run." : ""));
}

std::vector<std::string> drop_empty(std::vector<std::string> figures) {
  figures.erase(std::remove(figures.begin(), figures.end(), ""), figures.end());
  return figures;
}

Section signal_section(const std::vector<RunData>& runs) {
  std::vector<std::string> figures;
  figures.push_back(scalar_figure(runs, "residual_flow",
                                  steps_plot("residual_flow", "Residual flow", "‖h_L − e‖₂ / ‖e‖₂ (ratio)"),
                                  "How far the last hidden state moved from the embedding (seed 000 §2.4)."));
  figures.push_back(rmsnorm_figure(runs));
  figures.push_back(layer_profile_figure(
      runs, {"activation_rms", "activation_rms_by_layer", "Activation RMS by layer", "RMS of residual stream", true},
      "RMS of the residual stream entering each layer (final = h_L); solid at the last step, dashed at the first."));
  figures.push_back(layer_profile_figure(
      runs, {"attention_entropy", "attention_entropy_by_layer", "Attention entropy by layer", "entropy (nats)", false},
      "Mean entropy of the attention distributions; solid at the last step, dashed at the first."));
  figures.push_back(scalar_figure(runs, "logit_std",
                                  steps_plot("logit_std", "Logit standard deviation", "std of logits (nats)"),
                                  "Standard deviation of the output logits."));
  figures.push_back(embedding_cosine_figure(runs));
  return {"signal", "Signal propagation", figure_grid(drop_empty(figures)) + initial_loss_table(runs)};
}

Section norms_section(const std::vector<RunData>& runs) {
  std::vector<std::string> figures;
  figures.push_back(keyed_steps_figure(runs, "param_norm", steps_plot("param_norm", "Parameter norm by class", "‖W‖_F"),
                                       true, "Frobenius norm over all tensors of each parameter class."));
  figures.push_back(keyed_steps_figure(runs, "grad_norm", steps_plot("grad_norm", "Gradient norm by class", "‖∇W‖_F"),
                                       true, "Gradient norm of each parameter class."));
  figures.push_back(keyed_steps_figure(runs, "update_ratio",
                                       steps_plot("update_ratio", "Update ratio by class", "‖ΔW‖ / ‖W‖ (ratio)"), true,
                                       "Size of one optimizer update relative to the weights."));
  return {"norms", "Parameter and update norms", figure_grid(drop_empty(figures))};
}

}  // namespace

bool is_known_metric(const std::string& name) {
  static const std::set<std::string> kKnown = {"sink_score",
                                               "anchor",
                                               "anchor.sequences",
                                               "attention_entropy",
                                               "activation_rms",
                                               "rmsnorm_factor",
                                               "rmsnorm_factor.eps_free",
                                               "residual_flow",
                                               "logit_std",
                                               "initial_loss",
                                               "initial_loss.log_vocab",
                                               "embedding_cosine",
                                               "embedding_cosine.mean",
                                               "embedding_cosine.top_tokens",
                                               "stable_rank",
                                               "stable_rank.sigma_max",
                                               "cosine_similarity",
                                               "cosine_similarity.mean",
                                               "param_norm",
                                               "grad_norm",
                                               "update_ratio",
                                               "cosine_image",
                                               "moe_routing.imbalance",
                                               "moe_routing.router_entropy",
                                               "moe_routing.aux_loss"};
  return kKnown.count(name) > 0;
}

std::vector<Section> diagnostic_sections(const std::vector<RunData>& runs) {
  std::vector<Section> out;
  for (Section s : {signal_section(runs), norms_section(runs)}) {
    if (s.html.find("<figure") != std::string::npos || s.html.find("<table") != std::string::npos) out.push_back(s);
  }
  return out;
}

std::vector<Section> other_metric_sections(const std::vector<RunData>& runs) {
  std::set<std::string> scalars, keyed_names;
  for (const auto& run : runs) {
    for (const auto& [name, s] : run.scalars) {
      if (!is_known_metric(name)) scalars.insert(name);
    }
    for (const auto& [name, m] : run.keyed) {
      if (!is_known_metric(name)) keyed_names.insert(name);
    }
  }
  std::vector<std::string> figures;
  for (const auto& name : scalars) {
    figures.push_back(scalar_figure(runs, name, steps_plot("metric:" + name, name, name + " (as logged)"), ""));
  }
  for (const auto& name : keyed_names) {
    figures.push_back(keyed_steps_figure(runs, name, steps_plot("metric:" + name, name, name + " (as logged)"), false,
                                         "One line per key."));
  }
  figures = drop_empty(figures);
  if (figures.empty()) return {};
  return {{"other", "Other metrics",
           note("Metrics this report has no dedicated plot for, as logged.") + figure_grid(figures)}};
}

}  // namespace gc::report
