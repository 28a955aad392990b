// PNG images for the metrics (cosine-similarity heatmaps): 8-bit RGB, one IDAT
// chunk. Compressed with zlib when the build has it (GC_HAVE_ZLIB); otherwise
// a zlib stream of stored deflate blocks: larger, but exact and dependency-free
// (a GPU node with only CMake, g++ and nvcc still writes valid images).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace gc::rt {

// CRC-32 (ISO 3309, as PNG chunks use) and Adler-32 (RFC 1950, the zlib trailer).
std::uint32_t crc32(const std::uint8_t* data, std::size_t n, std::uint32_t crc = 0);
std::uint32_t adler32(const std::uint8_t* data, std::size_t n);

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
// result would not be smaller, or the build has no zlib.
std::string compress_png(const std::string& png, int max_side = 0);

// True (and the size) for bytes that start with the PNG signature and a
// valid IHDR chunk (sides from 1 to 2^20).
bool png_dimensions(std::string_view bytes, int& width, int& height);

// Writes the PNG atomically. Throws RuntimeError naming PATH on bad sizes or I/O errors.
void write_png_rgb(const std::string& path, int width, int height, const std::vector<std::uint8_t>& rgb);

}  // namespace gc::rt
