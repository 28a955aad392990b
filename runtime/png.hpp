// PNG images for the metrics (cosine-similarity heatmaps), written without a
// library: 8-bit RGB, one IDAT chunk holding a zlib stream of stored
// (uncompressed) deflate blocks. Larger than a compressed PNG but exact,
// dependency-free and readable by every browser and viewer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gc::rt {

// CRC-32 (ISO 3309, as PNG chunks use) and Adler-32 (RFC 1950, the zlib trailer).
std::uint32_t crc32(const std::uint8_t* data, std::size_t n, std::uint32_t crc = 0);
std::uint32_t adler32(const std::uint8_t* data, std::size_t n);

// The PNG file's bytes for an RGB image (rgb.size() == 3 * width * height).
std::string encode_png_rgb(int width, int height, const std::vector<std::uint8_t>& rgb);

// Writes the PNG atomically. Throws RuntimeError naming PATH on bad sizes or I/O errors.
void write_png_rgb(const std::string& path, int width, int height, const std::vector<std::uint8_t>& rgb);

}  // namespace gc::rt
