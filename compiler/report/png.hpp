// Just enough PNG for the report: writing an 8-bit RGB image (through the
// runtime's writer, runtime/png.hpp), reading a PNG's dimensions, and base64
// for data: URIs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/png.hpp"

namespace gc::report {

// 8-bit RGB pixels, row-major from the top-left, 3 bytes each.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;
};

// A complete PNG file (bytes) for the image. Throws std::invalid_argument when
// the pixel count does not match width × height.
std::string encode_png(const RgbImage& image);

// True (and the size) for bytes that start with the PNG signature and a valid IHDR chunk.
using rt::png_dimensions;

// Standard base64 (RFC 4648) with padding.
std::string base64_encode(std::string_view bytes);

// "data:image/png;base64,...".
std::string png_data_uri(std::string_view png_bytes);

}  // namespace gc::report
