#include "runtime/metrics_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::rt {

using nlohmann::json;

namespace {

const char* nonfinite_name(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

double nonfinite_value(const std::string& name) {
  if (name == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (name == "inf") return std::numeric_limits<double>::infinity();
  if (name == "-inf") return -std::numeric_limits<double>::infinity();
  throw std::invalid_argument(name);
}

// Replaces non-finite numbers under `v` by null, recording their pointers.
void scrub(json& v, const json::json_pointer& at, json& found) {
  if (v.is_number_float() && !std::isfinite(v.get<double>())) {
    found[at.to_string()] = nonfinite_name(v.get<double>());
    v = nullptr;
  } else if (v.is_object()) {
    for (auto& [k, child] : v.items()) scrub(child, at / k, found);
  } else if (v.is_array()) {
    for (std::size_t i = 0; i < v.size(); ++i) scrub(v[i], at / i, found);
  }
}

struct Line {
  std::string text;
  std::uint64_t offset = 0;  // byte offset of the line in the file
  std::size_t number = 0;    // 1-based
  bool complete = true;      // ended by '\n'
};

std::vector<Line> split_lines(const std::string& data) {
  std::vector<Line> out;
  std::size_t start = 0;
  while (start < data.size()) {
    const std::size_t nl = data.find('\n', start);
    Line line;
    line.offset = start;
    line.number = out.size() + 1;
    line.complete = nl != std::string::npos;
    line.text = data.substr(start, (line.complete ? nl : data.size()) - start);
    start = line.complete ? nl + 1 : data.size();
    out.push_back(std::move(line));
  }
  return out;
}

std::string where(const std::string& path, const Line& line) {
  return path + ": line " + std::to_string(line.number) + " (byte " + std::to_string(line.offset) + ")";
}

json parse_line(const std::string& path, const Line& line) {
  if (!line.complete) throw RuntimeError(where(path, line) + ": incomplete last line (no newline): torn write?");
  json v;
  try {
    v = json::parse(line.text);
  } catch (const json::parse_error& e) {
    throw RuntimeError(where(path, line) + ": not valid JSON: " + e.what());
  }
  if (!v.is_object()) throw RuntimeError(where(path, line) + ": not a JSON object");
  return v;
}

// Puts back the values listed under "nonfinite" and removes it.
void restore(const std::string& path, const Line& line, json& record) {
  const auto it = record.find("nonfinite");
  if (it == record.end()) return;
  const json list = *it;
  record.erase("nonfinite");
  if (!list.is_object()) throw RuntimeError(where(path, line) + ": \"nonfinite\" is not an object");
  for (const auto& [ptr, name] : list.items()) {
    try {
      json& slot = record.at(json::json_pointer(ptr));
      if (!slot.is_null()) throw std::invalid_argument(ptr);
      slot = nonfinite_value(name.get<std::string>());
    } catch (const std::exception&) {
      throw RuntimeError(where(path, line) + ": bad \"nonfinite\" entry " + json{{ptr, name}}.dump());
    }
  }
}

bool file_exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// True for a missing or empty file or one whose last byte is '\n' (reads one byte).
bool ends_with_newline_or_empty(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // missing: created below; other errors surface there
  struct stat st{};
  char last = '\n';
  const bool ok = ::fstat(fd, &st) == 0 && (st.st_size == 0 || ::pread(fd, &last, 1, st.st_size - 1) == 1);
  ::close(fd);
  return !ok || last == '\n';
}

}  // namespace

std::string metrics_line(const json& record) {
  if (!record.is_object()) throw RuntimeError("metrics record is not a JSON object: " + record.dump());
  json copy = record;
  json found = json::object();
  scrub(copy, json::json_pointer(), found);
  if (!found.empty()) copy["nonfinite"] = found;
  return copy.dump();
}

MetricsWriter::MetricsWriter(const std::string& path, Mode mode, bool tensorboard) : path_(path) {
  if (mode == Mode::Append && !ends_with_newline_or_empty(path)) {
    const std::string data = read_file(path);
    if (!data.empty() && data.back() != '\n') {
      const std::size_t start = data.rfind('\n') == std::string::npos ? 0 : data.rfind('\n') + 1;
      throw RuntimeError(path, start, "the log ends with an incomplete line; truncate it before appending");
    }
  }
  const int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (mode == Mode::Truncate ? O_TRUNC : 0);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw RuntimeError(path, "cannot open for writing: " + errno_text(errno));
  if (tensorboard) {
    const std::vector<json> earlier = mode == Mode::Append ? read_metrics_log(path) : std::vector<json>{};
    const std::string dir = std::filesystem::path(path).parent_path().string();
    tensorboard_ = std::make_unique<TensorBoardWriter>(dir.empty() ? "." : dir, earlier);
  }
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::write(const json& record) {
  const std::string line = metrics_line(record) + "\n";
  FileWriter(fd_, path_).write(line);  // O_APPEND: one write per line, no user-space buffer
  if (tensorboard_) tensorboard_->write(record);
}

std::vector<json> read_metrics_log(const std::string& path) {
  std::vector<json> out;
  for (const Line& line : split_lines(read_file(path))) {
    json record = parse_line(path, line);
    restore(path, line, record);
    out.push_back(std::move(record));
  }
  return out;
}

std::size_t truncate_metrics_log(const std::string& path, std::int64_t max_step) {
  if (!file_exists(path)) return 0;
  const std::vector<Line> lines = split_lines(read_file(path));
  std::string kept;
  std::size_t dropped = 0;
  for (const Line& line : lines) {
    if (!line.complete) {
      ++dropped;  // torn by a crash
      continue;
    }
    const json record = parse_line(path, line);
    const auto step = record.find("step");
    if (step != record.end() && !step->is_number_integer()) {
      throw RuntimeError(where(path, line) + ": \"step\" is not an integer: " + step->dump());
    }
    if (step != record.end() && step->get<std::int64_t>() > max_step) {
      ++dropped;
      continue;
    }
    kept += line.text + "\n";
  }
  if (dropped > 0) write_file_atomic(path, kept);
  return dropped;
}

}  // namespace gc::rt
