#include "runtime/atomic_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>

#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

namespace fs = std::filesystem;
using test::entries;
using test::error_of;
using test::read_bytes;
using test::TempDir;

TEST(RuntimeAtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  TempDir dir;
  const std::string path = dir / "a.txt";
  write_file_atomic(path, "first");
  EXPECT_EQ(read_bytes(path), "first");
  write_file_atomic(path, [](FileWriter& w) {
    w.write("sec");
    w.write("ond");
    EXPECT_EQ(w.bytes_written(), 6u);
  });
  EXPECT_EQ(read_file(path), "second");
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"a.txt"});
}

TEST(RuntimeAtomicFile, FailedWriteKeepsTheOldFile) {
  TempDir dir;
  const std::string path = dir / "a.txt";
  write_file_atomic(path, "old");
  const auto msg = error_of([&] {
    write_file_atomic(path, [](FileWriter& w) {
      w.write("half of the new con");
      throw RuntimeError("simulated failure");
    });
  });
  EXPECT_EQ(msg, "simulated failure");
  EXPECT_EQ(read_bytes(path), "old");
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"a.txt"});
}

TEST(RuntimeAtomicFile, MissingDirectoryIsAClearError) {
  TempDir dir;
  const std::string path = dir / "nope/a.txt";
  EXPECT_EQ(error_of([&] { write_file_atomic(path, "x"); }), path + ": cannot create temporary file " + path + ".tmp." +
                                                                 std::to_string(::getpid()) +
                                                                 ": No such file or directory");
  EXPECT_EQ(error_of([&] { read_file(path); }), path + ": cannot open: No such file or directory");
}

TEST(RuntimeAtomicFile, ReplaceDirCreatesAndReplaces) {
  TempDir root;
  const std::string dir = root / "ckpt";
  replace_dir_atomic(dir, [](const std::string& tmp) {
    EXPECT_EQ(fs::path(tmp).filename(), "ckpt.tmp");
    write_file_atomic(tmp + "/a", "1");
    write_file_atomic(tmp + "/b", "2");
  });
  EXPECT_EQ(entries(dir), (std::vector<std::string>{"a", "b"}));
  replace_dir_atomic(dir, [](const std::string& tmp) { write_file_atomic(tmp + "/c", "3"); });
  EXPECT_EQ(entries(dir), std::vector<std::string>{"c"});
  EXPECT_EQ(entries(root.str()), std::vector<std::string>{"ckpt"});
}

TEST(RuntimeAtomicFile, ReplaceDirFailureKeepsThePreviousContents) {
  TempDir root;
  const std::string dir = root / "ckpt";
  replace_dir_atomic(dir, [](const std::string& tmp) { write_file_atomic(tmp + "/a", "old"); });
  const auto msg = error_of([&] {
    replace_dir_atomic(dir, [](const std::string& tmp) {
      write_file_atomic(tmp + "/a", "new");
      throw RuntimeError("disk full (simulated)");
    });
  });
  EXPECT_EQ(msg, "disk full (simulated)");
  EXPECT_EQ(read_bytes(dir + "/a"), "old");
  EXPECT_EQ(entries(root.str()), std::vector<std::string>{"ckpt"});
}

TEST(RuntimeAtomicFile, ReplaceDirRemovesAStaleTemporary) {
  TempDir root;
  const std::string dir = root / "ckpt";
  fs::create_directories(dir + ".tmp");
  write_file_atomic(dir + ".tmp/garbage", "left by a crash");
  replace_dir_atomic(dir, [](const std::string& tmp) { write_file_atomic(tmp + "/a", "1"); });
  EXPECT_EQ(entries(dir), std::vector<std::string>{"a"});
  EXPECT_EQ(entries(root.str()), std::vector<std::string>{"ckpt"});
}

}  // namespace
}  // namespace gc::rt
