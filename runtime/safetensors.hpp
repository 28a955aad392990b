// safetensors files (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length N, N bytes of JSON (padded with spaces so the
// data section starts 8-aligned), then the data section. Each tensor entry is
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
// data section; tensors are contiguous and cover it exactly. "__metadata__" maps
// strings to strings and always holds {"format": "pt"} in files written here.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/mapped_file.hpp"

namespace gc::rt {

enum class Dtype { F32, F64, BF16, F16, I32, I64, U16 };

const char* dtype_name(Dtype d);
std::size_t dtype_size(Dtype d);
std::optional<Dtype> parse_dtype(const std::string& name);

inline constexpr std::uint64_t kMaxSafetensorsHeader = 100'000'000;

// A tensor to write; `data` holds numel * dtype_size bytes in little-endian order.
struct TensorView {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
};

std::int64_t numel(const std::vector<std::int64_t>& shape);

// Writes PATH atomically; tensors are stored contiguously in the order given.
// Throws RuntimeError naming the file and tensor for empty or duplicate names,
// negative dimensions, null data, or a "format" metadata value other than "pt".
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;  // byte range within the data section

  std::int64_t numel() const { return rt::numel(shape); }
  std::uint64_t nbytes() const { return end - begin; }
};

// A validated, memory-mapped safetensors file.
class SafetensorsFile {
 public:
  const std::string& path() const { return file_.path(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }  // by data offset
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // Throws "no tensor 'x' in PATH (it has N tensors)".
  const TensorInfo& tensor(const std::string& name) const;
  const std::uint8_t* bytes(const TensorInfo& t) const { return file_.data() + data_start_ + t.begin; }

  // The tensor as float (F32 or BF16 stored). With `expected_shape`, a
  // different shape is an error naming both.
  std::vector<float> load_f32(const std::string& name) const;
  void load_f32(const std::string& name, const std::vector<std::int64_t>& expected_shape, float* out) const;

 private:
  friend SafetensorsFile read_safetensors(const std::string& path);

  MappedFile file_;
  std::uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> index_;
};

// Reads and validates PATH: sizes, JSON, every entry, offsets (in bounds,
// non-overlapping, contiguous, covering the data section), byte lengths and
// duplicate names. Every error names the file and, where one is involved, the tensor.
SafetensorsFile read_safetensors(const std::string& path);

}  // namespace gc::rt
