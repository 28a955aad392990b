// Errors of the runtime's I/O layer. Every message names the file and, where
// it helps, the byte offset or tensor involved, so a user can find the fault:
//
//   data/train_000.bin: byte 8: token count 12 does not match file size 1040 (...)
//   ckpt/model.safetensors: tensor 'lm_head.weight': shape [4, 8] ...
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gc::rt {

struct RuntimeError : std::runtime_error {
  explicit RuntimeError(const std::string& message) : std::runtime_error(message) {}
  // "FILE: MESSAGE"
  RuntimeError(const std::string& file, const std::string& message) : std::runtime_error(file + ": " + message) {}
  // "FILE: byte OFFSET: MESSAGE"
  RuntimeError(const std::string& file, std::uint64_t byte, const std::string& message)
      : std::runtime_error(file + ": byte " + std::to_string(byte) + ": " + message) {}
};

// "FILE: tensor 'NAME': MESSAGE"
inline RuntimeError tensor_error(const std::string& file, const std::string& tensor, const std::string& message) {
  return RuntimeError(file, "tensor '" + tensor + "': " + message);
}

// The text of an errno value ("No such file or directory").
inline std::string errno_text(int err) { return std::strerror(err); }

// "[2, 3, 4]"
template <typename Int>
std::string shape_text(const std::vector<Int>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// Quotes a value for a message, shortening very long ones.
inline std::string quote_text(const std::string& s, std::size_t max_len = 80) {
  if (s.size() <= max_len) return "'" + s + "'";
  return "'" + s.substr(0, max_len) + "...'";
}

}  // namespace gc::rt
