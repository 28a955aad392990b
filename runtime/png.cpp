#include "runtime/png.hpp"

#include <zlib.h>

#include <algorithm>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::rt {

namespace {

void put_u32_be(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xff));
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32_be(out, std::uint32_t(data.size()));
  std::string typed(type, 4);
  typed += data;
  out += typed;
  put_u32_be(out, std::uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(typed.data()), uInt(typed.size()))));
}

// The image data as a zlib stream (RFC 1950), compressed at level 9.
std::string zlib_stream(const std::string& raw) {
  uLongf size = compressBound(uLong(raw.size()));
  std::string out(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                uLong(raw.size()), 9) != Z_OK) {
    throw RuntimeError("png: zlib could not compress the image data");
  }
  out.resize(size);
  return out;
}

std::uint32_t get_u32_be(const std::string& s, std::size_t at) {
  return (std::uint32_t(std::uint8_t(s[at])) << 24) | (std::uint32_t(std::uint8_t(s[at + 1])) << 16) |
         (std::uint32_t(std::uint8_t(s[at + 2])) << 8) | std::uint32_t(std::uint8_t(s[at + 3]));
}


// Signature, IHDR, (PLTE), one IDAT of the filtered rows, IEND.
std::string assemble_png(int width, int height, std::uint8_t color_type, int bytes_per_pixel, const std::uint8_t* pixels,
                         const std::string& palette) {
  std::string raw;
  const std::size_t row = std::size_t(width) * std::size_t(bytes_per_pixel);
  raw.reserve(std::size_t(height) * (1 + row));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');  // filter type: none
    raw.append(reinterpret_cast<const char*>(pixels) + std::size_t(y) * row, row);
  }
  std::string header;
  put_u32_be(header, std::uint32_t(width));
  put_u32_be(header, std::uint32_t(height));
  header += char(8);           // bit depth
  header += char(color_type);  // 2 truecolour, 3 indexed
  header += std::string("\x00\x00\x00", 3);  // deflate, adaptive filter, no interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  put_chunk(png, "IHDR", header);
  if (!palette.empty()) put_chunk(png, "PLTE", palette);
  put_chunk(png, "IDAT", zlib_stream(raw));
  put_chunk(png, "IEND", "");
  return png;
}

}  // namespace

std::string encode_png_rgb(int width, int height, const std::vector<std::uint8_t>& rgb) {
  if (width <= 0 || height <= 0 || rgb.size() != std::size_t(width) * std::size_t(height) * 3) {
    throw RuntimeError("PNG image: " + std::to_string(rgb.size()) + " bytes do not make a " + std::to_string(width) +
                       "x" + std::to_string(height) + " RGB image");
  }
  return assemble_png(width, height, 2, 3, rgb.data(), "");
}

std::string encode_png_indexed(int width, int height, const std::vector<std::uint8_t>& palette_rgb,
                               const std::vector<std::uint8_t>& indices) {
  const std::size_t colors = palette_rgb.size() / 3;
  if (width <= 0 || height <= 0 || indices.size() != std::size_t(width) * std::size_t(height)) {
    throw RuntimeError("PNG image: " + std::to_string(indices.size()) + " indices do not make a " +
                       std::to_string(width) + "x" + std::to_string(height) + " image");
  }
  if (colors == 0 || colors > 256 || palette_rgb.size() % 3 != 0) {
    throw RuntimeError("PNG image: a palette needs 1 to 256 RGB entries (got " + std::to_string(palette_rgb.size()) +
                       " bytes)");
  }
  for (std::uint8_t i : indices) {
    if (i >= colors) throw RuntimeError("PNG image: index " + std::to_string(i) + " outside the " +
                                        std::to_string(colors) + "-colour palette");
  }
  return assemble_png(width, height, 3, 1, indices.data(),
                      std::string(reinterpret_cast<const char*>(palette_rgb.data()), palette_rgb.size()));
}

void write_png_indexed(const std::string& path, int width, int height, const std::vector<std::uint8_t>& palette_rgb,
                       const std::vector<std::uint8_t>& indices) {
  std::string bytes;
  try {
    bytes = encode_png_indexed(width, height, palette_rgb, indices);
  } catch (const RuntimeError& e) {
    throw RuntimeError(path, e.what());
  }
  write_file_atomic(path, bytes);
}

namespace {

// Box-averages the unfiltered rows `raw` (filter byte + w·c bytes each) of a
// w×h image with c bytes per pixel down to a side of at most max_side.
// Returns false when a row uses a PNG filter (only "none" is handled).
bool downscale_rows(std::string& raw, std::uint32_t& width, std::uint32_t& height, int channels, int max_side) {
  const std::size_t row = 1 + std::size_t(width) * std::size_t(channels);
  for (std::uint32_t y = 0; y < height; ++y) {
    if (raw[y * row] != 0) return false;
  }
  const std::uint32_t side = std::uint32_t(max_side);
  if (max_side <= 0 || (width <= side && height <= side)) return true;
  // The longer side becomes max_side; the aspect ratio is kept.
  const std::uint32_t longer = std::max(width, height);
  const std::uint32_t w2 = std::max<std::uint32_t>(1, std::uint32_t((std::uint64_t(width) * side + longer / 2) / longer));
  const std::uint32_t h2 = std::max<std::uint32_t>(1, std::uint32_t((std::uint64_t(height) * side + longer / 2) / longer));
  std::string out;
  out.reserve(std::size_t(h2) * (1 + std::size_t(w2) * std::size_t(channels)));
  for (std::uint32_t y = 0; y < h2; ++y) {
    const std::uint32_t r0 = std::uint32_t(std::uint64_t(y) * height / h2), r1 = std::uint32_t(std::uint64_t(y + 1) * height / h2);
    out.push_back('\0');
    for (std::uint32_t x = 0; x < w2; ++x) {
      const std::uint32_t c0 = std::uint32_t(std::uint64_t(x) * width / w2), c1 = std::uint32_t(std::uint64_t(x + 1) * width / w2);
      for (int k = 0; k < channels; ++k) {
        std::uint64_t sum = 0;
        for (std::uint32_t r = r0; r < r1; ++r) {
          for (std::uint32_t c = c0; c < c1; ++c) sum += std::uint8_t(raw[r * row + 1 + std::size_t(c) * channels + k]);
        }
        const std::uint64_t n = std::uint64_t(r1 - r0) * (c1 - c0);
        out.push_back(char((sum + n / 2) / n));
      }
    }
  }
  raw = std::move(out);
  width = w2;
  height = h2;
  return true;
}

}  // namespace

std::string compress_png(const std::string& png, int max_side) {
  if (png.size() < 8 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return png;
  // Chunks: length, type, data, CRC. Keep IHDR, PLTE and IEND; inflate IDAT.
  std::string idat, header, palette;
  std::size_t at = 8;
  while (at + 12 <= png.size()) {
    const std::uint32_t length = get_u32_be(png, at);
    if (at + 12 + std::size_t(length) > png.size()) return png;
    const std::string type = png.substr(at + 4, 4);
    if (type == "IHDR") header = png.substr(at + 8, length);
    if (type == "PLTE") palette = png.substr(at + 8, length);
    if (type == "IDAT") idat += png.substr(at + 8, length);
    if (type != "IHDR" && type != "PLTE" && type != "IDAT" && type != "IEND") return png;  // ancillary data: keep as is
    at += 12 + std::size_t(length);
  }
  if (header.size() != 13 || idat.empty()) return png;
  std::uint32_t width = get_u32_be(header, 0), height = get_u32_be(header, 4);
  const int color_type = std::uint8_t(header[9]);
  const int channels = color_type == 2 ? 3 : color_type == 6 ? 4 : (color_type == 0 || color_type == 3) ? 1 : 0;
  if (header[8] != 8 || header[12] != 0 || channels == 0 || width == 0 || height == 0 || width > (1u << 15) ||
      height > (1u << 15)) {
    return png;
  }
  uLongf raw_size = uLongf(height) * (1 + uLongf(width) * uLongf(channels));
  if (raw_size > (uLongf(64) << 20)) return png;  // not a heatmap: leave it (and the memory) alone
  std::string raw(raw_size, '\0');
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_size, reinterpret_cast<const Bytef*>(idat.data()),
                 uLong(idat.size())) != Z_OK ||
      raw_size != raw.size()) {
    return png;
  }
  // Averaging palette indices is only meaningful for a palette ordered like a
  // colour ramp (the heatmaps'); other indexed images are not downscaled.
  const bool scale = max_side > 0 && (color_type != 3 || palette.size() == 3u * 255u);
  if (!downscale_rows(raw, width, height, channels, scale ? max_side : 0)) return png;
  std::string out = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put_u32_be(ihdr, width);
  put_u32_be(ihdr, height);
  ihdr += header.substr(8);
  put_chunk(out, "IHDR", ihdr);
  if (!palette.empty()) put_chunk(out, "PLTE", palette);
  put_chunk(out, "IDAT", zlib_stream(raw));
  put_chunk(out, "IEND", "");
  return out.size() < png.size() ? out : png;
}

bool png_dimensions(std::string_view bytes, int& width, int& height) {
  if (bytes.size() < 8 + 8 + 13 + 4 || bytes.substr(0, 8) != std::string_view("\x89PNG\r\n\x1a\n", 8)) return false;
  const std::string head(bytes.substr(0, 24));
  if (get_u32_be(head, 8) != 13 || head.compare(12, 4, "IHDR") != 0) return false;
  const std::uint32_t w = get_u32_be(head, 16), h = get_u32_be(head, 20);
  if (w == 0 || h == 0 || w > 1u << 20 || h > 1u << 20) return false;
  width = int(w);
  height = int(h);
  return true;
}

void write_png_rgb(const std::string& path, int width, int height, const std::vector<std::uint8_t>& rgb) {
  std::string bytes;
  try {
    bytes = encode_png_rgb(width, height, rgb);
  } catch (const RuntimeError& e) {
    throw RuntimeError(path, e.what());
  }
  write_file_atomic(path, bytes);
}

}  // namespace gc::rt
