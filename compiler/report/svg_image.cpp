// Heatmaps (a matrix encoded as an embedded PNG, with a colour bar) and
// existing PNG images with axes (see svg.hpp).
#include <algorithm>
#include <cmath>

#include "common/text.hpp"
#include "report/colors.hpp"
#include "report/png.hpp"
#include "report/svg.hpp"
#include "report/svg_internal.hpp"

namespace gc::report {

using detail::Frame;

namespace {

constexpr double kColorBarWidth = 12;
constexpr int kColorBarSteps = 64;

std::string image_element(const Frame& f, const std::string& png) {
  return "<image x=\"" + format_coord(f.x0()) + "\" y=\"" + format_coord(f.y0()) + "\" width=\"" +
         format_coord(f.plot_width()) + "\" height=\"" + format_coord(f.plot_height()) +
         "\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"" + png_data_uri(png) + "\"/>\n";
}

// Position and label of every `every`-th cell (at the cell's centre).
struct CellTicks {
  std::vector<double> positions;
  std::vector<std::string> labels;
};

CellTicks cell_ticks(const std::vector<std::string>& labels, std::size_t count, double space_px, bool vertical) {
  CellTicks out;
  if (count == 0) return out;
  double widest = 0;
  for (const auto& l : labels) widest = std::max(widest, text_width(l));
  const double needed = vertical ? 14 : widest + 8;
  const std::size_t fits = std::size_t(std::max(1.0, space_px / needed));
  const std::size_t every = (count + fits - 1) / fits;
  for (std::size_t i = 0; i < count; i += every) {
    out.positions.push_back(double(i) + 0.5);
    out.labels.push_back(i < labels.size() ? labels[i] : std::to_string(i));
  }
  return out;
}

void draw_y_labels(std::string& out, const Frame& f, const std::vector<double>& ticks,
                   const std::vector<std::string>& labels, const Scale& ys) {
  out += "<g class=\"y-ticks\" fill=\"#444\">\n";
  for (std::size_t i = 0; i < ticks.size(); ++i) {
    const double y = ys.map(ticks[i]);
    out += "<line x1=\"" + format_coord(f.x0() - 4) + "\" x2=\"" + format_coord(f.x0()) + "\" y1=\"" + format_coord(y) +
           "\" y2=\"" + format_coord(y) + "\" stroke=\"#666\"/>";
    out += detail::text_element(f.x0() - 6, y, "end", labels[i], "dy=\"0.35em\"") + "\n";
  }
  out += "</g>\n";
}

Rgb cell_color(const Heatmap& h, double v) {
  const double span = h.vmax > h.vmin ? h.vmax - h.vmin : 1.0;
  if (!std::isfinite(v)) return sequential_rgb(std::nan(""));
  if (h.diverging) return diverging_rgb(2 * (v - h.vmin) / span - 1);
  return sequential_rgb((v - h.vmin) / span);
}

std::string heatmap_png(const Heatmap& h) {
  RgbImage image;
  image.width = std::max(1, h.cols);
  image.height = std::max(1, h.rows);
  image.pixels.assign(std::size_t(image.width) * std::size_t(image.height) * 3, 200);
  for (std::size_t i = 0; i < std::size_t(h.rows) * std::size_t(h.cols) && i < h.values.size(); ++i) {
    const Rgb c = cell_color(h, h.values[i]);
    image.pixels[3 * i] = c.r;
    image.pixels[3 * i + 1] = c.g;
    image.pixels[3 * i + 2] = c.b;
  }
  return encode_png(image);
}

// A vertical colour bar right of the plot, vmax at the top, with tick labels.
void draw_color_bar(std::string& out, const Frame& f, const Heatmap& h, const Axis& axis) {
  RgbImage bar;
  bar.width = 1;
  bar.height = kColorBarSteps;
  for (int i = 0; i < kColorBarSteps; ++i) {
    const double v = h.vmax - (h.vmax - h.vmin) * (i + 0.5) / kColorBarSteps;
    const Rgb c = cell_color(h, v);
    bar.pixels.insert(bar.pixels.end(), {c.r, c.g, c.b});
  }
  const double x = f.x1() + 12;
  out += "<image x=\"" + format_coord(x) + "\" y=\"" + format_coord(f.y0()) + "\" width=\"" +
         format_coord(kColorBarWidth) + "\" height=\"" + format_coord(f.plot_height()) +
         "\" preserveAspectRatio=\"none\" href=\"" + png_data_uri(encode_png(bar)) + "\"/>\n";
  const Scale cs(axis, f.y1(), f.y0());
  out += "<g class=\"color-bar\" fill=\"#444\">\n";
  for (std::size_t i = 0; i < axis.ticks.size(); ++i) {
    out +=
        detail::text_element(x + kColorBarWidth + 4, cs.map(axis.ticks[i]), "start", axis.labels[i], "dy=\"0.35em\"") +
        "\n";
  }
  double widest = 0;
  for (const auto& l : axis.labels) widest = std::max(widest, text_width(l));
  const double lx = x + kColorBarWidth + 10 + widest + 8, cy = (f.y0() + f.y1()) / 2;
  out +=
      detail::text_element(lx, cy, "middle", h.value_label,
                           "fill=\"#222\" transform=\"rotate(90 " + format_coord(lx) + " " + format_coord(cy) + ")\"") +
      "\n";
  out += "</g>\n";
}

Axis color_axis(const Heatmap& h) {
  Axis axis = linear_axis(h.vmin, h.vmax, false, 4);
  if (axis.ticks.size() < 2) {
    axis.ticks = {h.vmin, h.vmax};
    axis.labels = {format_value(h.vmin, 3), format_value(h.vmax, 3)};
  }
  axis.lo = h.vmin;
  axis.hi = h.vmax > h.vmin ? h.vmax : h.vmin + 1;
  return axis;
}

}  // namespace

std::string render_heatmap(const Heatmap& h) {
  const Axis c_axis = color_axis(h);
  double widest_c = 0;
  for (const auto& l : c_axis.labels) widest_c = std::max(widest_c, text_width(l));
  std::vector<std::string> short_rows;
  for (const auto& l : h.row_labels) short_rows.push_back(shorten(l, 14));
  Frame f = detail::make_frame(560, 330, short_rows, {});
  f.right = 12 + kColorBarWidth + 10 + widest_c + 26;
  Axis x_axis, y_axis;
  x_axis.hi = std::max(1, h.cols);
  y_axis.hi = std::max(1, h.rows);
  const Scale xs(x_axis, f.x0(), f.x1()), ys(y_axis, f.y0(), f.y1());
  const CellTicks cols = cell_ticks(h.col_labels, std::size_t(std::max(0, h.cols)), f.plot_width(), false);
  const CellTicks rows = cell_ticks(short_rows, std::size_t(std::max(0, h.rows)), f.plot_height(), true);

  std::string out = detail::open_svg(h.name, h.title, f);
  out += "<g class=\"data\">\n" + image_element(f, heatmap_png(h)) + "</g>\n";
  detail::draw_x_ticks(out, f, cols.positions, cols.labels, xs, false);
  draw_y_labels(out, f, rows.positions, rows.labels, ys);
  detail::draw_axes_and_labels(out, f, h.x_label, h.y_label);
  draw_color_bar(out, f, h, c_axis);
  detail::draw_title(out, f, h.title);
  return out + detail::close_svg();
}

std::string render_image_plot(const ImagePlot& p) {
  int pw = 0, ph = 0;
  const bool valid = png_dimensions(p.png, pw, ph);
  const Axis x_axis = linear_axis(0, p.x_extent, false, 3);
  const Axis y_axis = linear_axis(0, p.y_extent, false, 3);
  Frame f = detail::make_frame(p.width, p.height, y_axis.labels, {});
  f.right = 12;
  const double side = std::min(f.plot_width(), f.plot_height());
  f.right = f.width - f.left - side;
  f.bottom = f.height - f.top - side;
  const Scale xs(x_axis, f.x0(), f.x1()), ys(y_axis, f.y0(), f.y1());

  std::string out = detail::open_svg(p.name, p.title, f);
  if (valid) {
    out += "<g class=\"data\">\n" + image_element(f, p.png) + "</g>\n";
  } else {
    out += detail::text_element((f.x0() + f.x1()) / 2, (f.y0() + f.y1()) / 2, "middle", "image unavailable",
                                "fill=\"#b00020\"") +
           "\n";
  }
  out += "<rect x=\"" + format_coord(f.x0()) + "\" y=\"" + format_coord(f.y0()) + "\" width=\"" + format_coord(side) +
         "\" height=\"" + format_coord(side) + "\" fill=\"none\" stroke=\"#666\"/>\n";
  detail::draw_x_ticks(out, f, x_axis.ticks, x_axis.labels, xs, false);
  draw_y_labels(out, f, y_axis.ticks, y_axis.labels, ys);
  detail::draw_axes_and_labels(out, f, p.x_label, p.y_label);
  detail::draw_title(out, f, p.title);
  return out + detail::close_svg();
}

}  // namespace gc::report
