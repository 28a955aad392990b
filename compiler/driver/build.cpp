#include "driver/build.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <utime.h>

#include "common/text.hpp"
#include "emit/emit.hpp"
#include "plan/plan.hpp"
#include "spec/spec.hpp"

namespace gc {

namespace fs = std::filesystem;

namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::optional<Tree> tree_of(const std::string& spec_path, Diagnostics& diags) {
  auto spec = load_spec(spec_path, diags);
  if (!spec) return std::nullopt;
  auto plan = make_plan(*spec, diags);
  if (!plan) return std::nullopt;
  // Diffs compare code, not data: no tokenization here.
  return generate_tree(*plan, PreparedData{}, diags);
}

void report(const Diagnostics& diags, const std::string& spec) {
  diags.print(std::cerr);
  if (diags.has_errors()) {
    std::cerr << diags.error_count() << (diags.error_count() == 1 ? " error" : " errors") << " in " << spec << "\n";
  }
}

std::string last_lines(const fs::path& file, int n) {
  std::ifstream in(file);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  std::string out;
  for (std::size_t i = lines.size() > std::size_t(n) ? lines.size() - n : 0; i < lines.size(); ++i) {
    out += "  " + lines[i] + "\n";
  }
  return out;
}

// Runs a build step, appending its output to the log. Returns success.
bool run_step(const std::string& what, const std::string& command, const fs::path& log) {
  std::cerr << "gcompile: " << what << "...\n";
  const std::string full = command + " >> " + shell_quote(log.string()) + " 2>&1";
  const int status = std::system(full.c_str());
  return status == 0;
}

}  // namespace

namespace {

// " --target a b" for --programs (nothing: every program of the tree).
std::string targets_of(const std::vector<std::string>& programs) {
  std::string out;
  for (const auto& p : programs) out += (out.empty() ? " --target " : " ") + p;
  return out;
}

}  // namespace

bool parse_programs(const std::string& text, std::vector<std::string>& out) {
  out.clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, end - start);
    const bool known = std::find(std::begin(kTreePrograms), std::end(kTreePrograms), name) != std::end(kTreePrograms);
    if (!known || std::find(out.begin(), out.end(), name) != out.end()) return false;
    out.push_back(name);
    start = end + 1;
  }
  return !out.empty();
}

std::string programs_need() {
  std::vector<std::string> names(std::begin(kTreePrograms), std::end(kTreePrograms) - 1);
  return "a comma-separated list of " + join(names, ", ") + " and " + std::end(kTreePrograms)[-1] + ", e.g. train,analyze";
}

std::string programs_conflict(const std::vector<std::string>& programs, bool build, bool cuda) {
  if (!programs.empty() && !build) return "--programs and --no-build contradict each other";
  if (!cuda && std::find(programs.begin(), programs.end(), "parity") != programs.end()) {
    return "--programs parity needs the CUDA backend, which --cpu-only leaves out";
  }
  return "";
}

int generate_command(const GenerateOptions& options) {
  Diagnostics diags;
  auto spec = load_spec(options.spec, diags);
  std::optional<Plan> plan;
  if (spec) plan = make_plan(*spec, diags);
  std::optional<Tree> tree;
  std::optional<PreparedData> data;
  if (plan) {
    if (plan->spec.data.format == DataFormat::text) std::cerr << "gcompile: preparing text data...\n";
    data = prepare_data(plan->spec, diags);
  }
  if (data) {
    if (plan->spec.data.format != DataFormat::llmc) {
      std::cerr << "gcompile: data " << (data->reused ? "(cached) " : "") << data->train << "\n";
    }
    tree = generate_tree(*plan, *data, diags);
  }
  const std::string dir = options.out_dir.empty() && plan ? "generated/" + plan->spec.experiment.name : options.out_dir;
  std::vector<std::string> kept;
  if (tree && !write_tree(*tree, dir, diags, &kept)) tree.reset();
  report(diags, options.spec);
  if (!tree) return 1;
  std::cerr << "gcompile: wrote " << dir << " (" << tree->files.size() << " files)\n";
  if (!kept.empty()) {
    std::cerr << "gcompile: kept what you added to " << dir << " (gcompile never deletes it):";
    for (const auto& path : kept) std::cerr << " " << path;
    std::cerr << "\n";
  }
  if (!options.build) return 0;

  const fs::path log = fs::path(dir) / "build.log";
  std::ofstream(log, std::ios::trunc) << "";
  const int jobs = options.jobs > 0 ? options.jobs : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::string build_dir = shell_quote((fs::path(dir) / "build").string());
  const bool ok = run_step("configuring", "cmake -S " + shell_quote(dir) + " -B " + build_dir + " -DCMAKE_BUILD_TYPE=" + (options.quick ? "Quick" : "Release") + (options.cuda ? "" : " -DGC_CUDA=OFF") +
                                 (options.cuda_arch.empty() ? "" : " '-DGC_CUDA_ARCHITECTURES=" + options.cuda_arch + "'"), log) &&
                  run_step("building with " + std::to_string(jobs) + " jobs",
                           "cmake --build " + build_dir + " -j " + std::to_string(jobs) + targets_of(options.programs),
                           log);
  if (!ok) {
    std::cerr << "gcompile: error: the build of " << dir << " failed; the full log is " << log.string()
              << "\nlast lines:\n"
              << last_lines(log, 15);
    return 1;
  }
  std::cerr << "gcompile: built " << dir << " (log: " << log.string() << ")\n";
  return 0;
}

int diff_command(const std::string& spec_a, const std::string& spec_b) {
  Diagnostics diags_a, diags_b;
  auto a = tree_of(spec_a, diags_a);
  report(diags_a, spec_a);
  auto b = tree_of(spec_b, diags_b);
  report(diags_b, spec_b);
  if (!a || !b) return 1;
  // Write both trees (sources only; the runtime copy is identical by
  // construction) and let diff(1) produce the unified diff.
  const fs::path root = fs::temp_directory_path() / ("gcompile-diff-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::remove_all(root, ec);
  for (const auto& [label, tree] : {std::pair{"a", &*a}, std::pair{"b", &*b}}) {
    for (const auto& [path, text] : tree->files) {
      if (path.rfind("runtime/", 0) == 0 || path == "manifest.json") continue;
      const fs::path file = root / label / path;
      fs::create_directories(file.parent_path(), ec);
      std::ofstream(file, std::ios::binary) << text;
      // A fixed time stamp (the Unix epoch), so the diff's headers do not change run to run.
      const struct utimbuf epoch {};
      ::utime(file.c_str(), &epoch);
    }
  }
  // Hunks that only change the provenance banner (which names the spec file)
  // are left out: an ablation's diff shows the code and constants it changes.
  const std::string cmd = "cd " + shell_quote(root.string()) + " && diff -ruN -I 'Generated by gcompile .* from ' a b";
  const int status = std::system(cmd.c_str());
  fs::remove_all(root, ec);
  // diff exits 0 (same) or 1 (differences); both are success for us.
  return (WIFEXITED(status) && WEXITSTATUS(status) <= 1) ? 0 : 1;
}

}  // namespace gc
