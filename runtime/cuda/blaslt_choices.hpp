// The cuBLASLt algorithm chosen for each GEMM shape, kept in a file per device and library
// version, so that the timed choice (runtime/cuda/blaslt.hpp) is made once and every later run
// with those shapes uses the same algorithms, and so repeats bit for bit.
//
// File: $GC_BLASLT_CACHE if set (a path; "off" keeps nothing), else
// $XDG_CACHE_HOME/gcompile/cublaslt/<device>-<version>.tsv (XDG_CACHE_HOME defaulting to
// ~/.cache). One line per shape: the shape's key, a tab, the algorithm's 8 words in hex. New
// choices are appended with one write each (O_APPEND), and a shape's first line wins, so
// processes that share the file (data-parallel ranks) agree once they have re-read it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

namespace gc::rt::cuda {

struct AlgoWords {
  std::uint64_t w[8];
};

class AlgoChoices {
 public:
  AlgoChoices() = default;
  // The file for this device and library version ("" when persistence is off).
  static std::string default_path(const std::string& device, std::size_t version) {
    if (const char* p = std::getenv("GC_BLASLT_CACHE")) return std::string(p) == "off" ? "" : std::string(p);
    std::string dir;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
      dir = x;
    } else if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') {
      dir = std::string(h) + "/.cache";
    } else {
      return "";
    }
    std::string name;
    for (char c : device) name += (std::isalnum(static_cast<unsigned char>(c)) || c == '-') ? c : '_';
    return dir + "/gcompile/cublaslt/" + name + "-" + std::to_string(version) + ".tsv";
  }

  explicit AlgoChoices(std::string path) : path_(std::move(path)) { reload(); }
  const std::string& path() const { return path_; }

  std::optional<AlgoWords> find(const std::string& key) const {
    const auto it = choices_.find(key);
    if (it == choices_.end()) return std::nullopt;
    return it->second;
  }

  // Appends a new choice, then re-reads the file: the first line of a key wins.
  void remember(const std::string& key, const AlgoWords& algo) {
    choices_.emplace(key, algo);
    if (path_.empty()) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
      warn_once("cannot write " + path_ + " (the choices of this run are not kept)");
      return;
    }
    const std::string line = key + "\t" + hex(algo) + "\n";
    const bool ok = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
    ::close(fd);
    if (!ok) warn_once("could not append to " + path_);
    reload();
  }

 private:
  static std::string hex(const AlgoWords& a) {
    std::string out;
    char buf[17];
    for (std::uint64_t w : a.w) {
      std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(w));
      out += buf;
    }
    return out;
  }
  // The file's choices (a key's first line wins), then this process's own for keys the file lacks.
  void reload() {
    if (path_.empty()) return;
    std::map<std::string, AlgoWords> from_file;
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      const std::size_t tab = line.find('\t');
      if (tab == std::string::npos || line.size() - tab - 1 != 128) continue;  // a torn or foreign line
      AlgoWords a{};
      bool ok = true;
      for (int i = 0; i < 8 && ok; ++i) {
        char* end = nullptr;
        const std::string word = line.substr(tab + 1 + 16 * std::size_t(i), 16);
        a.w[i] = std::strtoull(word.c_str(), &end, 16);
        ok = end != nullptr && *end == '\0';
      }
      if (ok) from_file.emplace(line.substr(0, tab), a);
    }
    for (const auto& [key, algo] : choices_) from_file.emplace(key, algo);
    choices_ = std::move(from_file);
  }
  void warn_once(const std::string& what) {
    if (warned_) return;
    warned_ = true;
    std::fprintf(stderr, "cuBLASLt algorithm cache: %s\n", what.c_str());
  }

  std::string path_;
  std::map<std::string, AlgoWords> choices_;
  bool warned_ = false;
};

}  // namespace gc::rt::cuda
