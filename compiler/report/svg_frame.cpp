// Frame, axes, title and legend drawing shared by every plot type.
#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "report/svg_internal.hpp"

namespace gc::report {

namespace {

bool is_utf8_lead(char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }

std::size_t utf8_length(const std::string& s) { return std::size_t(std::count_if(s.begin(), s.end(), is_utf8_lead)); }

}  // namespace

double text_width(const std::string& text, double font_px) { return double(utf8_length(text)) * 0.62 * font_px; }

std::string shorten(const std::string& text, std::size_t max_chars) {
  if (utf8_length(text) <= max_chars || max_chars < 2) return text;
  std::size_t chars = 0, i = 0;
  for (; i < text.size(); ++i) {
    if (is_utf8_lead(text[i]) && chars++ == max_chars - 1) break;
  }
  return text.substr(0, i) + "…";
}

namespace detail {

namespace {

constexpr std::size_t kMaxLegendChars = 26;
constexpr double kTickLabelGap = 6;
constexpr double kYLabelSpace = 22;

}  // namespace

double legend_width(const std::vector<LegendEntry>& legend) {
  double widest = 0;
  for (const auto& e : legend) widest = std::max(widest, text_width(shorten(e.label, kMaxLegendChars)));
  return kLegendSamplePx + 6 + widest;
}

Frame make_frame(double width, double height, const std::vector<std::string>& y_labels,
                 const std::vector<LegendEntry>& legend) {
  Frame f;
  f.width = width;
  f.height = height;
  double widest = 0;
  for (const auto& label : y_labels) widest = std::max(widest, text_width(label));
  f.left = std::ceil(kYLabelSpace + widest + kTickLabelGap + 4);
  f.right = legend.empty() ? 16 : std::ceil(legend_width(legend) + 24);
  return f;
}

std::string text_element(double x, double y, const std::string& anchor, const std::string& text,
                         const std::string& extra) {
  std::string out = "<text x=\"" + format_coord(x) + "\" y=\"" + format_coord(y) + "\"";
  if (anchor != "start") out += " text-anchor=\"" + anchor + "\"";
  if (!extra.empty()) out += " " + extra;
  return out + ">" + html_escape(text) + "</text>";
}

std::string open_svg(const std::string& name, const std::string& title, const Frame& frame) {
  const std::string w = format_coord(frame.width), h = format_coord(frame.height);
  return "<svg class=\"plot\" data-plot=\"" + html_escape(name) + "\" viewBox=\"0 0 " + w + " " + h + "\" width=\"" +
         w + "\" height=\"" + h + "\" role=\"img\" aria-label=\"" + html_escape(title) +
         "\" font-family=\"DejaVu Sans, Verdana, sans-serif\" font-size=\"11\">\n<title>" + html_escape(title) +
         "</title>\n";
}

std::string close_svg() { return "</svg>\n"; }

void draw_title(std::string& out, const Frame& frame, const std::string& title) {
  const double center = (frame.x0() + frame.x1()) / 2;
  const std::size_t max_chars = std::size_t(std::max(8.0, frame.width / (0.62 * kTitleFontPx) - 2));
  out += text_element(center, 20, "middle", shorten(title, max_chars),
                      "class=\"title\" font-size=\"13\" font-weight=\"bold\" fill=\"#222\"") +
         "\n";
}

void draw_y_ticks(std::string& out, const Frame& frame, const Axis& axis, const Scale& ys) {
  out += "<g class=\"y-ticks\" fill=\"#444\">\n";
  for (std::size_t i = 0; i < axis.ticks.size(); ++i) {
    const std::string y = format_coord(ys.map(axis.ticks[i]));
    out += "<line x1=\"" + format_coord(frame.x0()) + "\" x2=\"" + format_coord(frame.x1()) + "\" y1=\"" + y +
           "\" y2=\"" + y + "\" stroke=\"#e4e4e4\"/>";
    out +=
        text_element(frame.x0() - kTickLabelGap, ys.map(axis.ticks[i]), "end", axis.labels[i], "dy=\"0.35em\"") + "\n";
  }
  out += "</g>\n";
}

void draw_x_ticks(std::string& out, const Frame& frame, const std::vector<double>& ticks,
                  const std::vector<std::string>& labels, const Scale& xs, bool grid) {
  out += "<g class=\"x-ticks\" fill=\"#444\">\n";
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const std::string x = format_coord(xs.map(ticks[i]));
    if (grid) {
      out += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + format_coord(frame.y0()) + "\" y2=\"" +
             format_coord(frame.y1()) + "\" stroke=\"#f0f0f0\"/>";
    }
    out += "<line x1=\"" + x + "\" x2=\"" + x + "\" y1=\"" + format_coord(frame.y1()) + "\" y2=\"" +
           format_coord(frame.y1() + 4) + "\" stroke=\"#666\"/>";
    out += text_element(xs.map(ticks[i]), frame.y1() + 16, "middle", i < labels.size() ? labels[i] : "") + "\n";
  }
  out += "</g>\n";
}

void draw_axes_and_labels(std::string& out, const Frame& frame, const std::string& x_label,
                          const std::string& y_label) {
  const std::string x0 = format_coord(frame.x0()), x1 = format_coord(frame.x1());
  const std::string y0 = format_coord(frame.y0()), y1 = format_coord(frame.y1());
  out += "<path class=\"axes\" d=\"M" + x0 + "," + y0 + " L" + x0 + "," + y1 + " L" + x1 + "," + y1 +
         "\" fill=\"none\" stroke=\"#666\"/>\n";
  out += text_element((frame.x0() + frame.x1()) / 2, frame.height - 8, "middle", x_label,
                      "class=\"x-label\" fill=\"#222\"") +
         "\n";
  const double cy = (frame.y0() + frame.y1()) / 2;
  const std::size_t max_chars = std::size_t(std::max(6.0, frame.plot_height() / (0.62 * kFontPx)));
  out += text_element(14, cy, "middle", shorten(y_label, max_chars),
                      "class=\"y-label\" fill=\"#222\" transform=\"rotate(-90 14 " + format_coord(cy) + ")\"") +
         "\n";
}

void draw_legend(std::string& out, const Frame& frame, const std::vector<LegendEntry>& legend) {
  if (legend.empty()) return;
  const double x = frame.x1() + 14;
  const std::size_t fits = std::size_t(std::max(1.0, std::floor(frame.plot_height() / kLegendRowPx)));
  const bool overflow = legend.size() > fits;
  const std::size_t shown = overflow ? fits - 1 : legend.size();
  out += "<g class=\"legend\">\n";
  for (std::size_t i = 0; i < shown; ++i) {
    const LegendEntry& e = legend[i];
    const double y = frame.y0() + 6 + kLegendRowPx * double(i);
    out += "<line x1=\"" + format_coord(x) + "\" x2=\"" + format_coord(x + kLegendSamplePx) + "\" y1=\"" +
           format_coord(y) + "\" y2=\"" + format_coord(y) + "\" stroke=\"" + html_escape(e.color) +
           "\" stroke-width=\"2.5\"" + (e.dash.empty() ? "" : " stroke-dasharray=\"" + html_escape(e.dash) + "\"") +
           "/>";
    out += text_element(x + kLegendSamplePx + 6, y, "start", shorten(e.label, kMaxLegendChars),
                        "dy=\"0.35em\" fill=\"#222\"") +
           "\n";
  }
  if (overflow) {
    const double y = frame.y0() + 6 + kLegendRowPx * double(shown);
    out += text_element(x, y, "start", "+" + std::to_string(legend.size() - shown) + " more",
                        "dy=\"0.35em\" fill=\"#666\"") +
           "\n";
  }
  out += "</g>\n";
}

void draw_markers(std::string& out, const Frame& frame, const std::vector<Marker>& markers, const Scale& xs) {
  for (std::size_t i = 0; i < markers.size(); ++i) {
    const Marker& m = markers[i];
    if (!xs.accepts(m.x)) continue;
    const double x = xs.map(m.x);
    const std::string xt = format_coord(x);
    out += "<line class=\"marker\" x1=\"" + xt + "\" x2=\"" + xt + "\" y1=\"" + format_coord(frame.y0()) + "\" y2=\"" +
           format_coord(frame.y1()) + "\" stroke=\"" + html_escape(m.color) + "\" stroke-dasharray=\"2 3\"/>";
    const bool left_half = x < (frame.x0() + frame.x1()) / 2;
    out += text_element(left_half ? x + 4 : x - 4, frame.y0() + 10 + 12 * double(i), left_half ? "start" : "end",
                        m.label, "font-size=\"10\" fill=\"" + html_escape(m.color) + "\"") +
           "\n";
  }
}

}  // namespace detail
}  // namespace gc::report
