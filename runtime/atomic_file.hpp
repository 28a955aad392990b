// Crash-safe writes. A reader never sees a half-written file or directory:
//
// - write_file_atomic writes PATH.tmp.<pid> in the same directory, fsyncs it,
//   renames it over PATH and fsyncs the directory. After a crash PATH holds
//   either the old or the new contents (plus, at worst, a stale .tmp file).
// - replace_dir_atomic fills DIR.tmp, fsyncs every file in it, then renames it
//   to DIR. An existing DIR is swapped out in one step (renameat2
//   RENAME_EXCHANGE) and deleted only after the new one is in place.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace gc::rt {

// Sequential writer handed to write_file_atomic's callback. Errors name the
// destination file and the byte offset reached.
class FileWriter {
 public:
  FileWriter(int fd, std::string display_path) : fd_(fd), path_(std::move(display_path)) {}
  void write(const void* data, std::size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  std::uint64_t bytes_written() const { return written_; }
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
  std::uint64_t written_ = 0;
};

// Writes PATH atomically from `fill`. If `fill` throws, the temporary file is
// removed, PATH is left untouched and the exception propagates. The parent
// directory must exist.
void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill);
void write_file_atomic(const std::string& path, std::string_view contents);

// Replaces directory DIR atomically with what `fill` writes into the temporary
// directory it is given (DIR.tmp; a stale one from a crash is removed first).
// If `fill` throws, DIR.tmp is removed and DIR is left untouched.
void replace_dir_atomic(const std::string& dir, const std::function<void(const std::string& tmp_dir)>& fill);

// fsync a file or directory by path (EINVAL from filesystems that cannot sync
// directories is ignored).
void fsync_path(const std::string& path, bool is_dir);

// The whole file as bytes (errors name the file).
std::string read_file(const std::string& path);

}  // namespace gc::rt
