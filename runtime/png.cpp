#include "runtime/png.hpp"

#include <array>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::rt {

namespace {

const std::array<std::uint32_t, 256>& crc_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t n = 0; n < 256; ++n) {
      std::uint32_t c = n;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xedb88320u ^ (c >> 1) : c >> 1;
      t[n] = c;
    }
    return t;
  }();
  return table;
}

void put_u32_be(std::string& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(char((v >> shift) & 0xff));
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32_be(out, std::uint32_t(data.size()));
  std::string typed(type, 4);
  typed += data;
  out += typed;
  put_u32_be(out, crc32(reinterpret_cast<const std::uint8_t*>(typed.data()), typed.size()));
}

// zlib stream (RFC 1950) of stored deflate blocks (RFC 1951 §3.2.4), at most 65535 bytes each.
std::string zlib_stored(const std::string& raw) {
  std::string out = "\x78\x01";
  std::size_t pos = 0;
  do {
    const std::size_t n = std::min<std::size_t>(65535, raw.size() - pos);
    const bool final_block = pos + n == raw.size();
    out.push_back(char(final_block ? 1 : 0));
    out.push_back(char(n & 0xff));
    out.push_back(char(n >> 8));
    out.push_back(char(~n & 0xff));
    out.push_back(char((~n >> 8) & 0xff));
    out.append(raw, pos, n);
    pos += n;
  } while (pos < raw.size());
  put_u32_be(out, adler32(reinterpret_cast<const std::uint8_t*>(raw.data()), raw.size()));
  return out;
}

}  // namespace

std::uint32_t crc32(const std::uint8_t* data, std::size_t n, std::uint32_t crc) {
  crc = ~crc;
  for (std::size_t i = 0; i < n; ++i) crc = crc_table()[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t adler32(const std::uint8_t* data, std::size_t n) {
  std::uint32_t a = 1, b = 0;
  for (std::size_t i = 0; i < n; ++i) {
    a = (a + data[i]) % 65521u;
    b = (b + a) % 65521u;
  }
  return (b << 16) | a;
}

std::string encode_png_rgb(int width, int height, const std::vector<std::uint8_t>& rgb) {
  if (width <= 0 || height <= 0 || rgb.size() != std::size_t(width) * std::size_t(height) * 3) {
    throw RuntimeError("PNG image: " + std::to_string(rgb.size()) + " bytes do not make a " + std::to_string(width) +
                       "x" + std::to_string(height) + " RGB image");
  }
  std::string raw;
  raw.reserve(std::size_t(height) * (1 + 3 * std::size_t(width)));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');  // filter type: none
    raw.append(reinterpret_cast<const char*>(rgb.data()) + std::size_t(y) * width * 3, std::size_t(width) * 3);
  }
  std::string header;
  put_u32_be(header, std::uint32_t(width));
  put_u32_be(header, std::uint32_t(height));
  header += std::string("\x08\x02\x00\x00\x00", 5);  // 8-bit, truecolour, deflate, adaptive filter, no interlace
  std::string png = "\x89PNG\r\n\x1a\n";
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", zlib_stored(raw));
  put_chunk(png, "IEND", "");
  return png;
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
