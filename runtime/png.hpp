// PNG images for the metrics (cosine-similarity heatmaps): 8-bit RGB or
// indexed, one IDAT chunk, compressed and checksummed by zlib (every machine
// we build on has it: Debian's zlib1g-dev, and the GPU image's own).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gc::rt {

// The PNG file's bytes for an RGB image (rgb.size() == 3 * width * height).
std::string encode_png_rgb(int width, int height, const std::vector<std::uint8_t>& rgb);

// The PNG file's bytes for an indexed-colour image: palette_rgb holds 1 to 256
// RGB entries, indices one byte per pixel (row-major from the top-left).
std::string encode_png_indexed(int width, int height, const std::vector<std::uint8_t>& palette_rgb,
                               const std::vector<std::uint8_t>& indices);
void write_png_indexed(const std::string& path, int width, int height, const std::vector<std::uint8_t>& palette_rgb,
                       const std::vector<std::uint8_t>& indices);

// The same image with its IDAT data recompressed by zlib (8-bit, unfiltered
// gray, RGB, RGBA or indexed PNGs, as written here) and, with max_side > 0,
// box-averaged down to at most max_side pixels a side (indexed images only
// when their palette is the heatmaps' 255-level ramp). The report uses it on
// the heatmaps it inlines. Returns the input when it is not such a PNG, the
// result would not be smaller.
std::string compress_png(const std::string& png, int max_side = 0);

// True (and the size) for bytes that start with the PNG signature and a
// valid IHDR chunk (sides from 1 to 2^20).
bool png_dimensions(std::string_view bytes, int& width, int& height);

// Writes the PNG atomically. Throws RuntimeError naming PATH on bad sizes or I/O errors.
void write_png_rgb(const std::string& path, int width, int height, const std::vector<std::uint8_t>& rgb);

}  // namespace gc::rt
