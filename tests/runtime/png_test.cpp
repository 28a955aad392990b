#include "runtime/png.hpp"

#include <gtest/gtest.h>

#include <cstdio>
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

TEST(RuntimePng, ChecksumsMatchTheirPublishedCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const std::uint8_t*>(digits.data()), digits.size()), 0xCBF43926u);
  const std::string wiki = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const std::uint8_t*>(wiki.data()), wiki.size()), 0x11E60398u);
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
    EXPECT_EQ(be32(png, at + 8 + len), crc32(reinterpret_cast<const std::uint8_t*>(typed.data()), typed.size()));
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

}  // namespace
}  // namespace gc::rt
