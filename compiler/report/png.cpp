#include "report/png.hpp"

#include <algorithm>
#include <stdexcept>

#include "runtime/png.hpp"

namespace gc::report {

std::string encode_png(const RgbImage& image) {
  if (image.width <= 0 || image.height <= 0 ||
      image.pixels.size() != std::size_t(image.width) * std::size_t(image.height) * 3) {
    throw std::invalid_argument("PNG image: pixel count does not match width x height");
  }
  return rt::encode_png_rgb(image.width, image.height, image.pixels);  // the runtime's writer (runtime/png.hpp)
}

std::string base64_encode(std::string_view bytes) {
  static const char* const kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (std::size_t i = 0; i < bytes.size(); i += 3) {
    const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
    std::uint32_t v = 0;
    for (std::size_t k = 0; k < 3; ++k) v = (v << 8) | (k < n ? std::uint8_t(bytes[i + k]) : 0u);
    for (std::size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 0x3F] : '=';
  }
  return out;
}

std::string png_data_uri(std::string_view png_bytes) { return "data:image/png;base64," + base64_encode(png_bytes); }

}  // namespace gc::report
