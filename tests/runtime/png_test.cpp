#include "runtime/png.hpp"

#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

using test::read_bytes;
using test::TempDir;

std::uint32_t be32(const std::string& s, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | std::uint8_t(s[at + i]);
  return v;
}

// zlib's CRC-32 of a chunk's type and data (what PNG readers check).
std::uint32_t chunk_crc(const std::string& typed) {
  return std::uint32_t(::crc32(0L, reinterpret_cast<const Bytef*>(typed.data()), uInt(typed.size())));
}

// An image whose raw data needs several stored deflate blocks (> 65535 bytes).
std::vector<std::uint8_t> gradient(int w, int h) {
  std::vector<std::uint8_t> rgb(std::size_t(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = std::uint8_t((i * 7 + i / 3) % 251);
  return rgb;
}

TEST(RuntimePng, ChunksAreWellFormedWithValidCrcs) {
  const std::string png = encode_png_rgb(200, 150, gradient(200, 150));
  ASSERT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::vector<std::string> types;
  for (std::size_t at = 8; at < png.size();) {
    const std::uint32_t len = be32(png, at);
    const std::string typed = png.substr(at + 4, 4 + len);
    types.push_back(typed.substr(0, 4));
    EXPECT_EQ(be32(png, at + 8 + len), chunk_crc(typed));
    at += 12 + len;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  EXPECT_EQ(be32(png, 16), 200u);  // width
  EXPECT_EQ(be32(png, 20), 150u);  // height
}

TEST(RuntimePng, AnIndependentZlibDecodesThePixelsExactly) {
  // Python's zlib (not our code) inflates the IDAT stream; the pixels must round-trip.
  TempDir dir;
  const int w = 200, h = 150;
  const auto rgb = gradient(w, h);
  write_png_rgb(dir / "img.png", w, h, rgb);
  const std::string script =
      "import sys, zlib, struct\n"
      "d = open(sys.argv[1], 'rb').read(); at = 8; idat = b''\n"
      "while at < len(d):\n"
      "    n, = struct.unpack('>I', d[at:at+4]); t = d[at+4:at+8]\n"
      "    if t == b'IDAT': idat += d[at+8:at+8+n]\n"
      "    at += 12 + n\n"
      "raw = zlib.decompress(idat); w, h = 200, 150; out = bytearray()\n"
      "for y in range(h):\n"
      "    assert raw[y*(1+3*w)] == 0\n"
      "    out += raw[y*(1+3*w)+1:(y+1)*(1+3*w)]\n"
      "open(sys.argv[2], 'wb').write(out)\n";
  {
    std::FILE* f = std::fopen((dir / "decode.py").c_str(), "w");
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  const std::string cmd = "python3 " + (dir / "decode.py") + " " + (dir / "img.png") + " " + (dir / "pixels.bin");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(read_bytes(dir / "pixels.bin"), std::string(rgb.begin(), rgb.end()));
}

TEST(RuntimePng, RejectsAMismatchedBufferNamingTheFile) {
  TempDir dir;
  try {
    write_png_rgb(dir / "bad.png", 4, 4, std::vector<std::uint8_t>(10));
    FAIL() << "no error";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.png"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4x4"), std::string::npos) << e.what();
  }
}

// An indexed heatmap-like image: the palette and one index per pixel decode
// back exactly (Python's zlib, independent of ours), and compress_png leaves
// the pixels alone while shrinking a stored-block file.
TEST(RuntimePng, IndexedImagesDecodeExactlyAndCompress) {
  TempDir dir;
  const int w = 96, h = 64;
  std::vector<std::uint8_t> palette;
  for (int i = 0; i < 200; ++i) palette.insert(palette.end(), {std::uint8_t(i), std::uint8_t(255 - i), std::uint8_t(i / 2)});
  std::vector<std::uint8_t> index(std::size_t(w) * h);
  for (std::size_t i = 0; i < index.size(); ++i) index[i] = std::uint8_t((i * 7 + i / w) % 200);
  const std::string png = encode_png_indexed(w, h, palette, index);
  {
    std::FILE* f = std::fopen((dir / "img.png").c_str(), "wb");
    std::fwrite(png.data(), 1, png.size(), f);
    std::fclose(f);
  }
  const std::string script =
      "import sys, zlib, struct\n"
      "d = open(sys.argv[1], 'rb').read(); at = 8; idat = b''; plte = b''\n"
      "while at < len(d):\n"
      "    n = struct.unpack('>I', d[at:at+4])[0]; t = d[at+4:at+8]\n"
      "    if t == b'IHDR': assert d[at+8+9] == 3, 'colour type'\n"
      "    if t == b'PLTE': plte = d[at+8:at+8+n]\n"
      "    if t == b'IDAT': idat += d[at+8:at+8+n]\n"
      "    at += 12 + n\n"
      "raw = zlib.decompress(idat); w, h = 96, 64; out = bytearray()\n"
      "for y in range(h):\n"
      "    out += raw[y*(1+w)+1:(y+1)*(1+w)]\n"
      "open(sys.argv[2], 'wb').write(plte + bytes(out))\n";
  {
    std::FILE* f = std::fopen((dir / "decode.py").c_str(), "w");
    std::fputs(script.c_str(), f);
    std::fclose(f);
  }
  const std::string cmd = "python3 " + (dir / "decode.py") + " " + (dir / "img.png") + " " + (dir / "out.bin");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_EQ(read_bytes(dir / "out.bin"),
            std::string(palette.begin(), palette.end()) + std::string(index.begin(), index.end()));

  EXPECT_THROW(encode_png_indexed(w, h, palette, std::vector<std::uint8_t>(index.size(), 250)), RuntimeError);
  EXPECT_THROW(encode_png_indexed(w, h, std::vector<std::uint8_t>(3 * 257), index), RuntimeError);
  EXPECT_EQ(compress_png("not a png"), "not a png");
}

void put_be32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += char((v >> s) & 0xff);
}

void put_chunk(std::string& png, const std::string& type, const std::string& data) {
  put_be32(png, std::uint32_t(data.size()));
  const std::string typed = type + data;
  png += typed;
  put_be32(png, chunk_crc(typed));
}

// An RGB PNG of stored deflate blocks (as other encoders, and gcompile before it used zlib, write).
std::string stored_png(int w, int h, const std::vector<std::uint8_t>& rgb) {
  std::string raw;
  for (int y = 0; y < h; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(rgb.data()) + std::size_t(y) * w * 3, std::size_t(w) * 3);
  }
  std::string z = "\x78\x01";
  for (std::size_t pos = 0; pos < raw.size();) {
    const std::size_t n = std::min<std::size_t>(65535, raw.size() - pos);
    z += char(pos + n == raw.size() ? 1 : 0);
    z += char(n & 0xff);
    z += char(n >> 8);
    z += char(~n & 0xff);
    z += char((~n >> 8) & 0xff);
    z.append(raw, pos, n);
    pos += n;
  }
  put_be32(z, std::uint32_t(::adler32(1L, reinterpret_cast<const Bytef*>(raw.data()), uInt(raw.size()))));
  std::string header;
  put_be32(header, std::uint32_t(w));
  put_be32(header, std::uint32_t(h));
  header += std::string("\x08\x02\x00\x00\x00", 5);
  std::string png = "\x89PNG\r\n\x1a\n";
  put_chunk(png, "IHDR", header);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", "");
  return png;
}

// A PNG of stored blocks (larger than 64 KiB) shrinks
// under compress_png and keeps every pixel; a compressed one comes back as is.
TEST(RuntimePng, CompressesStoredBlockImagesWithoutChangingThem) {
  const int w = 160, h = 160;
  std::vector<std::uint8_t> rgb(std::size_t(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = std::uint8_t((i / 3) % 7 * 30);
  const std::string stored = stored_png(w, h, rgb);
  const std::string smaller = compress_png(stored);
  EXPECT_LT(smaller.size(), stored.size() / 4);
  int width = 0, height = 0;
  ASSERT_TRUE(png_dimensions(smaller, width, height));
  EXPECT_EQ(width, w);
  EXPECT_EQ(height, h);
  // The same pixels: the IDAT inflates to the stored image's rows.
  const std::size_t idat_at = 8 + 25;
  ASSERT_EQ(smaller.substr(idat_at + 4, 4), "IDAT");
  const std::uint32_t length = (std::uint32_t(std::uint8_t(smaller[idat_at])) << 24) |
                               (std::uint32_t(std::uint8_t(smaller[idat_at + 1])) << 16) |
                               (std::uint32_t(std::uint8_t(smaller[idat_at + 2])) << 8) |
                               std::uint32_t(std::uint8_t(smaller[idat_at + 3]));
  std::vector<unsigned char> raw(std::size_t(h) * (1 + 3 * w));
  uLongf size = raw.size();
  ASSERT_EQ(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(smaller.data() + idat_at + 8), length), Z_OK);
  ASSERT_EQ(size, raw.size());
  for (int y = 0; y < h; ++y) {
    ASSERT_EQ(0, std::memcmp(&raw[std::size_t(y) * (1 + 3 * w) + 1], &rgb[std::size_t(y) * w * 3], std::size_t(w) * 3))
        << "row " << y;
  }
  EXPECT_EQ(compress_png(smaller), smaller);
}

// Thumbnails for the report: the longer side becomes max_side, the aspect
// ratio stays, and each pixel is the mean of its block.
TEST(RuntimePng, DownscalesByBlockAveragesKeepingTheAspectRatio) {
  const int w = 300, h = 150;
  std::vector<std::uint8_t> rgb(std::size_t(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &rgb[(std::size_t(y) * w + x) * 3];
      p[0] = std::uint8_t(x % 2 ? 100 : 200);  // averages to 150 over 2-pixel blocks
      p[1] = std::uint8_t(y);
      p[2] = 7;
    }
  }
  const std::string small = compress_png(encode_png_rgb(w, h, rgb), 100);
  ASSERT_GE(small.size(), 24u);
  auto be32 = [&](std::size_t at) {
    return (std::uint32_t(std::uint8_t(small[at])) << 24) | (std::uint32_t(std::uint8_t(small[at + 1])) << 16) |
           (std::uint32_t(std::uint8_t(small[at + 2])) << 8) | std::uint32_t(std::uint8_t(small[at + 3]));
  };
  EXPECT_EQ(be32(16), 100u);
  EXPECT_EQ(be32(20), 50u);
  // The pixels: IHDR is 25 bytes after the signature; IDAT follows.
  const std::size_t idat_at = 8 + 25;
  ASSERT_EQ(small.substr(idat_at + 4, 4), "IDAT");
  const std::string idat = small.substr(idat_at + 8, be32(idat_at));
  std::vector<unsigned char> raw(50 * (1 + 100 * 3));
  uLongf size = raw.size();
  ASSERT_EQ(uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()), uLong(idat.size())), Z_OK);
  ASSERT_EQ(size, raw.size());
  // Pixel (x, y) averages the 3x3 block of rows 3y..3y+2, columns 3x..3x+2.
  const unsigned char* first = &raw[1];
  EXPECT_NEAR(first[0], (200 + 100 + 200) / 3.0, 0.5);  // columns 0, 1, 2
  EXPECT_EQ(first[1], 1);                               // rows 0, 1, 2
  EXPECT_EQ(first[2], 7);
  const unsigned char* last = &raw[49 * (1 + 300) + 1 + 99 * 3];
  EXPECT_EQ(last[1], 148);  // rows 147, 148, 149
  // An image already small enough keeps its size.
  const std::string same = compress_png(encode_png_rgb(w, h, rgb), 400);
  EXPECT_EQ(std::uint32_t(std::uint8_t(same[19])), 44u);  // 300 = 0x12c
}

}  // namespace
}  // namespace gc::rt
