#include "runtime/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>

#include "runtime/error.hpp"

namespace gc::rt {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// Swaps two paths atomically (Linux renameat2). False when unsupported.
bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2)
  constexpr unsigned kRenameExchange = 1u << 1;  // RENAME_EXCHANGE
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kRenameExchange) == 0;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    throw RuntimeError(to, "cannot rename " + from + " into place: " + errno_text(errno));
  }
}

// fsync every regular file and directory under `root` (and `root` itself).
void fsync_tree(const std::string& root) {
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (entry.is_regular_file())
      fsync_path(entry.path().string(), false);
    else if (entry.is_directory())
      fsync_path(entry.path().string(), true);
  }
  fsync_path(root, true);
}

void remove_tree_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

void FileWriter::write(const void* data, std::size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw RuntimeError(path_, written_, "write failed: " + errno_text(errno));
    }
    p += w;
    n -= std::size_t(w);
    written_ += std::uint64_t(w);
  }
}

void fsync_path(const std::string& path, bool is_dir) {
  const int fd = ::open(path.c_str(), (is_dir ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(path, "cannot open for fsync: " + errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL && err != EROFS) throw RuntimeError(path, "fsync failed: " + errno_text(err));
}

void write_file_atomic(const std::string& path, const std::function<void(FileWriter&)>& fill) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw RuntimeError(path, "cannot create temporary file " + tmp + ": " + errno_text(errno));
  bool open = true;
  try {
    FileWriter writer(fd, path);
    fill(writer);
    if (::fsync(fd) != 0) throw RuntimeError(path, "fsync failed: " + errno_text(errno));
    open = false;
    if (::close(fd) != 0) throw RuntimeError(path, "close failed: " + errno_text(errno));
  } catch (...) {
    if (open) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  try {
    rename_or_throw(tmp, path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  fsync_path(parent_of(path), true);
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  write_file_atomic(path, [&](FileWriter& w) { w.write(contents); });
}

void replace_dir_atomic(const std::string& dir, const std::function<void(const std::string& tmp_dir)>& fill) {
  const std::string tmp = dir + ".tmp";
  remove_tree_quietly(tmp);  // stale leftovers of a crashed attempt
  std::error_code ec;
  fs::create_directory(tmp, ec);
  if (ec) throw RuntimeError(dir, "cannot create temporary directory " + tmp + ": " + ec.message());
  try {
    fill(tmp);
    fsync_tree(tmp);
  } catch (...) {
    remove_tree_quietly(tmp);
    throw;
  }
  if (!fs::exists(dir, ec)) {
    rename_or_throw(tmp, dir);
  } else if (exchange_paths(tmp, dir)) {
    remove_tree_quietly(tmp);  // now holds the previous contents
  } else {
    // No atomic exchange: move the old one aside, then the new one in. A crash
    // in between leaves DIR.old complete.
    const std::string old = dir + ".old";
    remove_tree_quietly(old);
    rename_or_throw(dir, old);
    rename_or_throw(tmp, dir);
    remove_tree_quietly(old);
  }
  fsync_path(parent_of(dir), true);
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw RuntimeError(path, "cannot open: " + errno_text(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw RuntimeError(path, out.size(), "read failed: " + errno_text(err));
    }
    out.append(buf, std::size_t(n));
  }
  ::close(fd);
  return out;
}

}  // namespace gc::rt
