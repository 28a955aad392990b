// SHA-256 (FIPS 180-4), used to fingerprint checkpoint files so a damaged one
// is named instead of silently loaded. Self-contained: generated trees build
// with a C++ compiler alone (no OpenSSL).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gc::rt {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t size);
  std::array<std::uint8_t, 32> digest();  // finalizes; the object is spent afterwards
  std::string hex_digest();               // digest() as 64 lowercase hex digits

 private:
  void compress(const std::uint8_t* block);
  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, std::size_t size);
std::string sha256_hex(const std::string& text);
// SHA-256 of a whole file (memory-mapped); throws RuntimeError naming the file.
std::string sha256_file_hex(const std::string& path);

}  // namespace gc::rt
