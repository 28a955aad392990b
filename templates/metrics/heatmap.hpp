// Cosine-similarity matrices as PNG heatmaps (seed 000 Fig. 4d,e; seed 003
// Fig. 6): a diverging map, blue at −1, white at 0, red at +1. Matrices larger
// than max_px are block-averaged down, so a 4096-row matrix stays a few MB.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/png.hpp"

namespace gc::tree::metrics {

// RGB of value c in [-1, 1].
inline void diverging_color(double c, std::uint8_t* rgb) {
  c = std::clamp(c, -1.0, 1.0);
  // White to red (c > 0) or to blue (c < 0), through the same lightness ramp.
  const double t = std::fabs(c);
  const double hot[3] = {178, 24, 43}, cold[3] = {33, 102, 172};
  const double* end = c >= 0.0 ? hot : cold;
  for (int i = 0; i < 3; ++i) rgb[i] = std::uint8_t(std::lround(255.0 + t * (end[i] - 255.0)));
}

// The heatmap's palette: 255 levels of c from −1 to +1 (steps of 1/127, far
// below what the eye tells apart on this ramp), so a pixel is one byte.
inline constexpr int kHeatmapLevels = 255;

inline int heatmap_level(double c) {
  if (std::isnan(c)) c = 0.0;  // a zero row has no direction: drawn as white
  return int(std::lround((std::clamp(c, -1.0, 1.0) + 1.0) * 0.5 * (kHeatmapLevels - 1)));
}

inline std::vector<std::uint8_t> heatmap_palette() {
  std::vector<std::uint8_t> rgb(std::size_t(kHeatmapLevels) * 3);
  for (int i = 0; i < kHeatmapLevels; ++i) {
    diverging_color(2.0 * i / (kHeatmapLevels - 1) - 1.0, &rgb[std::size_t(i) * 3]);
  }
  return rgb;
}

// Side of the heatmaps: a k×k matrix becomes min(k, kHeatmapPixels) pixels a side.
inline constexpr int kHeatmapPixels = 512;

// Pixel (y, x) of a side × side heatmap of a k×k matrix covers rows [⌊y·k/side⌋, ⌊(y+1)·k/side⌋)
// and the same columns (cuda/weight_stats.cuh averages on the device with the same bounds).
inline int heatmap_cell_begin(int pixel, int k, int side) { return int(std::int64_t(pixel) * k / side); }

// The k×k matrix (row-major) block-averaged to side × side pixels, side = min(k, max_px).
inline std::vector<float> block_average(const std::vector<float>& matrix, int k, int max_px = kHeatmapPixels) {
  const int side = std::min(k, max_px);
  std::vector<float> pixels(std::size_t(side) * side);
  for (int y = 0; y < side; ++y) {
    const int r0 = heatmap_cell_begin(y, k, side), r1 = heatmap_cell_begin(y + 1, k, side);
    for (int x = 0; x < side; ++x) {
      const int c0 = heatmap_cell_begin(x, k, side), c1 = heatmap_cell_begin(x + 1, k, side);
      double sum = 0.0;
      for (int r = r0; r < r1; ++r) {
        for (int c = c0; c < c1; ++c) sum += matrix[std::size_t(r) * k + c];
      }
      pixels[std::size_t(y) * side + x] = float(sum / double((r1 - r0) * (c1 - c0)));
    }
  }
  return pixels;
}

// The palette level of each pixel (one byte a pixel: what a GPU copies back).
inline std::vector<std::uint8_t> heatmap_levels(const std::vector<float>& pixels) {
  std::vector<std::uint8_t> level(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) level[i] = std::uint8_t(heatmap_level(double(pixels[i])));
  return level;
}

// Writes side × side palette levels (heatmap_levels) as an indexed PNG.
inline void write_heatmap_png(const std::string& path, const std::vector<std::uint8_t>& levels, int side) {
  static const std::vector<std::uint8_t> palette = heatmap_palette();
  gc::rt::write_png_indexed(path, side, side, palette, levels);
}

}  // namespace gc::tree::metrics
