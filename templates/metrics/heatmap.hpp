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

namespace gcm::metrics {

// RGB of value c in [-1, 1].
inline void diverging_color(double c, std::uint8_t* rgb) {
  c = std::clamp(c, -1.0, 1.0);
  // White to red (c > 0) or to blue (c < 0), through the same lightness ramp.
  const double t = std::fabs(c);
  const double hot[3] = {178, 24, 43}, cold[3] = {33, 102, 172};
  const double* end = c >= 0.0 ? hot : cold;
  for (int i = 0; i < 3; ++i) rgb[i] = std::uint8_t(std::lround(255.0 + t * (end[i] - 255.0)));
}

// Writes the k×k matrix (row-major) as a PNG of side min(k, max_px).
inline void write_heatmap_png(const std::string& path, const std::vector<float>& matrix, int k, int max_px = 512) {
  const int side = std::min(k, max_px);
  std::vector<std::uint8_t> rgb(std::size_t(side) * side * 3);
  for (int y = 0; y < side; ++y) {
    const int r0 = int(std::int64_t(y) * k / side), r1 = int(std::int64_t(y + 1) * k / side);
    for (int x = 0; x < side; ++x) {
      const int c0 = int(std::int64_t(x) * k / side), c1 = int(std::int64_t(x + 1) * k / side);
      double sum = 0.0;
      for (int r = r0; r < r1; ++r) {
        for (int c = c0; c < c1; ++c) sum += matrix[std::size_t(r) * k + c];
      }
      diverging_color(sum / double((r1 - r0) * (c1 - c0)), &rgb[(std::size_t(y) * side + x) * 3]);
    }
  }
  gc::rt::write_png_rgb(path, side, side, rgb);
}

}  // namespace gcm::metrics
