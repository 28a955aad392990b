#include "runtime/tensorboard.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/png.hpp"

namespace gc::rt {

namespace {

using nlohmann::json;

const std::array<std::uint32_t, 256>& crc32c_table() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0x82f63b78u ^ (c >> 1) : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// Protocol buffer wire format: varints, tags, length-delimited fields.
void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += char(std::uint8_t(v) | 0x80);
    v >>= 7;
  }
  out += char(v);
}

void put_tag(std::string& out, int field, int wire_type) { put_varint(out, std::uint64_t(field) << 3 | unsigned(wire_type)); }

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

template <typename T>
void put_fixed(std::string& out, int field, T value) {
  put_tag(out, field, sizeof(T) == 8 ? 1 : 5);
  char raw[sizeof(T)];
  std::memcpy(raw, &value, sizeof(T));  // little-endian hosts (x86-64, aarch64)
  out.append(raw, sizeof(T));
}

std::string event_header(double wall_time, std::int64_t step) {
  std::string e;
  put_fixed(e, 1, wall_time);
  put_tag(e, 2, 0);
  put_varint(e, std::uint64_t(step));
  return e;
}

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool skipped_segment(const std::string& key) { return key == "value" || key == "values"; }

void collect(const json& v, const std::string& tag, std::vector<std::pair<std::string, double>>& out) {
  if (v.is_number()) {
    out.emplace_back(tag, v.get<double>());
  } else if (v.is_object()) {
    for (const auto& [k, child] : v.items()) {
      collect(child, skipped_segment(k) ? tag : (tag.empty() ? k : tag + "/" + k), out);
    }
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) collect(v[i], tag + "/" + std::to_string(i), out);
  }
}

void write_all(int fd, const std::string& bytes, const std::string& path) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(path, std::string("write failed: ") + std::strerror(errno));
    }
    done += std::size_t(n);
  }
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t n) {
  const auto& table = crc32c_table();
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

std::uint32_t masked_crc32c(const void* data, std::size_t n) {
  const std::uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  const std::uint64_t length = payload.size();
  char raw[8];
  std::memcpy(raw, &length, 8);
  out.append(raw, 8);
  const std::uint32_t length_crc = masked_crc32c(raw, 8);
  out.append(reinterpret_cast<const char*>(&length_crc), 4);
  out += payload;
  const std::uint32_t data_crc = masked_crc32c(payload.data(), payload.size());
  out.append(reinterpret_cast<const char*>(&data_crc), 4);
  return out;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const json& record) {
  std::vector<std::pair<std::string, double>> out;
  if (!record.is_object()) return out;
  std::string prefix;
  if (record.contains("metric") && record["metric"].is_string()) prefix = record["metric"].get<std::string>();
  if (record.contains("event") && record["event"].is_string()) prefix = record["event"].get<std::string>();
  for (const auto& [k, v] : record.items()) {
    if (k == "step" || k == "metric" || k == "event") continue;
    collect(v, skipped_segment(k) ? prefix : (prefix.empty() ? k : prefix + "/" + k), out);
  }
  return out;
}

std::string event_file_version(double wall_time) {
  std::string e = event_header(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalars(double wall_time, std::int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes(v, 1, tag);
    put_fixed(v, 2, float(value));
    put_bytes(summary, 1, v);
  }
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string event_image(double wall_time, std::int64_t step, const std::string& tag, int width, int height,
                        const std::string& png) {
  std::string image;
  put_tag(image, 1, 0);
  put_varint(image, std::uint64_t(height));
  put_tag(image, 2, 0);
  put_varint(image, std::uint64_t(width));
  put_tag(image, 3, 0);
  put_varint(image, 3);  // RGB (the heatmaps' palette colours)
  put_bytes(image, 4, png);
  std::string v;
  put_bytes(v, 1, tag);
  put_bytes(v, 4, image);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_header(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

TensorBoardWriter::TensorBoardWriter(const std::string& run_dir, const std::vector<json>& earlier) : run_dir_(run_dir) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::path(run_dir) / "tb").string();
  const std::string name = "events.out.tfevents." + std::to_string(std::int64_t(now())) + ".gcompile";
  // The directory is this writer's own output, rebuilt from metrics.jsonl.
  replace_dir_atomic(dir, [&](const std::string& tmp) {
    write_file_atomic((fs::path(tmp) / name).string(), [&](FileWriter& w) {
      const double t = now();
      w.write(tfrecord(event_file_version(t)));
      for (const json& r : earlier) {
        const std::string bytes = event_bytes(r);
        if (!bytes.empty()) w.write(tfrecord(bytes));
      }
    });
  });
  path_ = (fs::path(dir) / name).string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd_ < 0) throw RuntimeError(path_, std::string("cannot open: ") + std::strerror(errno));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TensorBoardWriter::event_bytes(const json& record) const {
  const std::int64_t step = record.contains("step") && record["step"].is_number_integer() ? record["step"].get<std::int64_t>() : 0;
  if (record.value("metric", "") == "cosine_image") {
    // The heatmap PNG the record points at (relative to the run directory).
    const std::string file = (std::filesystem::path(run_dir_) / record.value("path", "")).string();
    std::string png;
    try {
      png = read_file(file);
    } catch (const RuntimeError&) {
      return "";
    }
    int width = 0, height = 0;
    if (!png_dimensions(png, width, height)) return "";
    return event_image(now(), step, "cosine_image/" + record.value("tensor", "?"), width, height, png);
  }
  const auto scalars = tensorboard_scalars(record);
  return scalars.empty() ? std::string() : event_scalars(now(), step, scalars);
}

void TensorBoardWriter::write(const json& record) {
  const std::string bytes = event_bytes(record);
  if (!bytes.empty()) write_all(fd_, tfrecord(bytes), path_);
}

}  // namespace gc::rt
