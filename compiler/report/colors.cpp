#include "report/colors.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gc::report {

namespace {

Rgb mix(Rgb a, Rgb b, double t) {
  auto channel = [t](std::uint8_t x, std::uint8_t y) {
    return std::uint8_t(std::lround(x + (double(y) - double(x)) * t));
  };
  return {channel(a.r, b.r), channel(a.g, b.g), channel(a.b, b.b)};
}

template <std::size_t N>
Rgb ramp(const Rgb (&stops)[N], double t) {
  t = std::clamp(t, 0.0, 1.0) * double(N - 1);
  const std::size_t i = std::min(std::size_t(t), N - 2);
  return mix(stops[i], stops[i + 1], t - double(i));
}

constexpr Rgb kGrey{160, 160, 160};

}  // namespace

std::string hex(Rgb c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

std::string categorical_color(std::size_t i) {
  static const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return kPalette[i % (sizeof kPalette / sizeof kPalette[0])];
}

Rgb sequential_rgb(double t) {
  if (std::isnan(t)) return kGrey;
  static const Rgb kStops[] = {{68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  return ramp(kStops, t);
}

std::string sequential_line_color(std::size_t index, std::size_t count) {
  const double t = count <= 1 ? 0.0 : double(index) / double(count - 1);
  return hex(sequential_rgb(0.85 * t));
}

Rgb diverging_rgb(double t) {
  if (std::isnan(t)) return kGrey;
  static const Rgb kStops[] = {{33, 102, 172}, {146, 197, 222}, {247, 247, 247}, {244, 165, 130}, {178, 24, 43}};
  return ramp(kStops, (t + 1) / 2);
}

}  // namespace gc::report
