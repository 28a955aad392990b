// Shared by the tests that run programs: a shell runner, gcompile with its
// streams kept apart, and, for the tests that generate and build a tree, a
// fixture that owns a temporary directory (kept when the test fails, for
// inspection) and runs gcompile on a spec written into it.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <sys/wait.h>
#include <unistd.h>

namespace gc::test {

// Whether the tests run in CI (CI set, and not "", "false" or "0"): there a missing tool that
// scripts/setup installs is a failure, not a skip.
inline bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && *ci != '\0' && std::string(ci) != "false" && std::string(ci) != "0";
}

// The text of a spec under tests/e2e/specs/ (the end-to-end tests' fixtures); a missing file
// stops the test binary naming it.
inline std::string fixture_spec(const std::string& name) {
  const std::string path = std::string(GCOMPILE_SOURCE_DIR) + "/tests/e2e/specs/" + name;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "cannot read the test fixture %s\n", path.c_str());
    std::abort();
  }
  if (text.empty()) {
    std::fprintf(stderr, "the test fixture %s is missing or empty\n", path.c_str());
    std::abort();
  }
  return text;
}

struct Outcome {
  int status = -1;
  std::string output;  // stdout and stderr together
};

inline Outcome sh(const std::string& command) {
  Outcome r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

// The records of a metrics.jsonl file.
inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// A file's whole text ("" when it cannot be read).
inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The loss of every training record of a run's metrics.jsonl (not summaries or events).
inline std::vector<double> training_losses(const std::vector<nlohmann::json>& records) {
  std::vector<double> out;
  for (const auto& r : records) {
    if (r.contains("loss") && !r.contains("event")) out.push_back(r["loss"].get<double>());
  }
  return out;
}

// The training losses of the run directory RUN (its metrics.jsonl).
inline std::vector<double> run_losses(const std::filesystem::path& run) {
  return training_losses(read_jsonl(run / "metrics.jsonl"));
}

// A shell word: PATH in single quotes.
inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Streams {
  int status = -1;
  std::string out, err;
};

// Runs the gcompile under test with `args` (already shell-quoted) in `cwd`,
// keeping stdout and stderr apart.
inline Streams run_gcompile(const std::string& args, const std::string& cwd) {
  static int calls = 0;
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() /
      ("gcompile_test_err_" + std::to_string(::getpid()) + "_" + std::to_string(calls++));
  const std::string cmd = "cd " + shell_quote(cwd) + " && " + GCOMPILE_BINARY + " " + args + " 2>" +
                          shell_quote(err_file.string());
  Streams r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int raw = ::pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  std::ifstream in(err_file, std::ios::binary);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::filesystem::remove(err_file);
  return r;
}

class TreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("gcompile_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    // Prepared data and specialized templates go to the suite's cache, never the user's: under
    // ctest the build directory's (GCOMPILE_TEST_CACHE_DIR, shared by every test of the run: a
    // text corpus's tokenizer costs ~20 s and a spec's specialization ~7 s the first time;
    // entries are published atomically, so parallel tests can fill it), else the test's own.
    const char* suite_cache = std::getenv("GCOMPILE_TEST_CACHE_DIR");
    ::setenv("GCOMPILE_CACHE_DIR", suite_cache && *suite_cache ? suite_cache : (dir_ / "cache").c_str(), 1);
  }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  std::filesystem::path spec_path() const { return dir_ / "spec.toml"; }
  std::filesystem::path tree() const { return dir_ / "tree"; }

  // Writes the spec and runs gcompile on it; the tree is dir_/tree. Trees
  // build without the CUDA backend (faster) unless `cuda`, and at -Og (--quick-build: about half
  // the compile time, the same losses; ~35 trees are built by the suite).
  // `extra`: more gcompile options (e.g. "--cuda-arch 80").
  Outcome generate(const std::string& spec_text, bool build = true, bool cuda = false, const std::string& extra = "") {
    std::ofstream(spec_path()) << spec_text;
    return sh(std::string(GCOMPILE_BINARY) + " " + spec_path().string() + " -o " + tree().string() +
              (build ? std::string(" -j 2 --quick-build") + (cuda ? "" : " --cpu-only") +
                           (programs_.empty() ? "" : " --programs " + programs_)
                     : " --no-build") +
              (extra.empty() ? "" : " " + extra));
  }

  std::filesystem::path dir_;
  std::string programs_;  // generate's --programs (a fixture that runs only train says "train"); "" = all
};

}  // namespace gc::test
