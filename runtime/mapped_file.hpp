// A read-only view of a whole file: memory-mapped, so multi-GB checkpoints and
// token shards cost no copy and are paged in on demand. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gc::rt {

class MappedFile {
 public:
  // Maps `path` read-only; throws RuntimeError ("PATH: cannot open: ...") on
  // failure. An empty file maps to data() == nullptr, size() == 0.
  static MappedFile open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::string& path() const { return path_; }
  const std::uint8_t* data() const { return data_; }
  std::uint64_t size() const { return size_; }

 private:
  void release();

  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

// Little-endian loads from raw bytes (independent of the host's byte order).
inline std::uint32_t load_le32(const std::uint8_t* p) {
  return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
}
inline std::uint16_t load_le16(const std::uint8_t* p) { return std::uint16_t(p[0] | p[1] << 8); }
inline std::uint64_t load_le64(const std::uint8_t* p) {
  return std::uint64_t(load_le32(p)) | std::uint64_t(load_le32(p + 4)) << 32;
}

}  // namespace gc::rt
