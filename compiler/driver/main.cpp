// gcompile command line: check, explain, resolve, schema, presets, diff,
// report, and `gcompile SPEC` (generate and build).
//
// Exit status: 0 success, 1 the spec has errors (report: a run or file
// cannot be read), 2 usage error, 3 internal error (a bug in gcompile).
#include <cstdio>
#include <exception>
#include <iostream>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "common/version.hpp"
#include "driver/build.hpp"
#include "explain/explain.hpp"
#include "plan/plan.hpp"
#include "driver/sweep.hpp"
#include "export/hf_export.hpp"
#include "report/page.hpp"
#include "spec/schema.hpp"
#include "spec/spec.hpp"

namespace {

constexpr int kOk = 0;
constexpr int kSpecError = 1;
constexpr int kUsageError = 2;
constexpr int kInternalError = 3;  // a bug in gcompile, not in the spec or the command line

const char* const kUsage = R"(usage: gcompile SPEC [--no-build] [--cpu-only] [--cuda-arch LIST] [--quick-build]
                    [--programs LIST] [-o DIR] [-j N]
       gcompile <command> [options]

gcompile turns a TOML experiment spec into a specialized LLM training binary.

  gcompile SPEC           check SPEC, generate its source tree (default
                          generated/<experiment name>/), and build it; the
                          binaries land in the tree (./generated/NAME/train)
    --no-build            generate only
    --cpu-only            build without the CUDA backend even where nvcc is
                          found (a faster build for CPU-only machines)
    --cuda-arch LIST      build the CUDA backend for these architectures only
                          (e.g. 90a, or 80,89; default 80,86,89,90a: any GPU of
                          compute capability 8.0 or newer)
    --quick-build         compile the C++ at -Og (about half the C++ build
                          time; small specs train as fast, the CPU kernels'
                          loops are not vectorized)
    --programs LIST       build only these of the tree's programs, e.g.
                          train or train,analyze (train, analyze, probe,
                          gradcheck, parity; default all)
    -o DIR                write the tree to DIR
    -j N                  build with N parallel jobs

commands:
  sweep BASE.toml --set KEY=V1,V2,... [--set ...] -o DIR [--train] [--steps N]
                          one spec per grid point in DIR (each extends BASE),
                          every tree generated and built (sharing compiled
                          objects), with --train trained and DIR/report.html
  diff A.toml B.toml      unified diff of the two generated trees
  report RUN_DIR... [-o FILE] [--compare FILE.json]...
                          write one self-contained HTML page (default
                          report.html) plotting the runs' metrics.jsonl: loss,
                          attention sinks, stable rank, row cosine, norms,
                          spec differences, and token-level comparisons
                          (--compare files and RUN_DIR/*.compare.json)
  export CHECKPOINT --hf OUT [--dtype fp32|bf16] [--tokenizer FILE]
                          write a checkpoint (or a run's latest) as a Hugging
                          Face model directory: config, weights, tokenizer, and
                          modeling code where Llama/Qwen2-MoE cannot express the
                          spec (docs/evaluation.md)
  check SPEC              validate SPEC; print every error and warning
  explain SPEC [--json] [--world-size N]
                          validate SPEC and print the resolved plan: layer layout,
                          every parameter tensor with its init std, optimizer
                          groups, parameter counts, FLOPs and memory
                          (--json: the full table, machine-readable)
  resolve SPEC            print SPEC with bases, preset and defaults merged in
  schema [--markdown]     list every spec key with type and default
  presets                 list the shipped init presets

options:
  -h, --help              show this help
  --version               print the version

exit status: 0 success, 1 the spec has errors (report: a run or file cannot
be read), 2 usage error, 3 internal error (a bug in gcompile: please report it)
Spec language reference: docs/spec.md
)";

int usage_error(const std::string& message) {
  std::cerr << "gcompile: error: " << message << "\n" << "Run 'gcompile --help' for usage.\n";
  return kUsageError;
}

struct Args {
  std::string command;
  std::vector<std::string> positional;
  bool json = false;
  bool markdown = false;
  bool no_build = false;
  bool cpu_only = false;
  bool quick_build = false;
  std::vector<std::string> programs;        // gcompile SPEC --programs
  std::string out_dir;  // -o: the tree's directory, or report's output file
  int jobs = 0;
  int world_size = 0;                      // explain --world-size
  std::string cuda_arch;                   // gcompile SPEC --cuda-arch
  std::vector<std::string> compare_files;  // report --compare
};

bool parse_int(const std::string& s, int& out) {
  if (s.empty() || s.size() > 6) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  out = std::stoi(s);
  return out > 0;
}

// "80,90a" -> "80;90a": each entry 80 or newer, optionally with the a/f suffix.
bool parse_cuda_arch(const std::string& text, std::string& out) {
  out.clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find_first_of(",;", start), text.size());
    std::string entry = text.substr(start, end - start);
    std::string digits = entry;
    if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) digits.pop_back();
    int value = 0;
    if (digits.size() < 2 || digits.size() > 3 || !parse_int(digits, value) || value < 80) return false;
    out += (out.empty() ? "" : ";") + entry;
    start = end + 1;
  }
  return !out.empty();
}

// An option's value: argv[i + 1] parsed by `parse` (which stores it), i advanced past it; else the
// usage error `need` (status set) and false.
template <typename Parse>
bool option_value(int argc, char** argv, int& i, Parse&& parse, const std::string& need, int& status) {
  if (i + 1 >= argc || !parse(std::string(argv[i + 1]))) {
    status = usage_error(need);
    return false;
  }
  ++i;
  return true;
}

std::optional<Args> parse_args(int argc, char** argv, int& status) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      status = kOk;
      return std::nullopt;
    }
    if (arg == "--version") {
      std::cout << "gcompile " << gc::kVersion << "\n";
      status = kOk;
      return std::nullopt;
    }
    if (arg == "--cuda-arch") {
      if (!option_value(argc, argv, i, [&](const std::string& v) { return parse_cuda_arch(v, a.cuda_arch); },
                        "option '--cuda-arch' needs CUDA architectures of compute capability 8.0 or newer, "
                        "comma-separated, e.g. 90a or 80,86,89,90a",
                        status)) {
        return std::nullopt;
      }
      continue;
    }
    if (arg == "--programs") {
      if (!option_value(argc, argv, i, [&](const std::string& v) { return gc::parse_programs(v, a.programs); },
                        std::string("option '--programs' needs ") + gc::programs_need(),
                        status)) {
        return std::nullopt;
      }
      continue;
    }
    if (arg == "--world-size") {
      if (!option_value(argc, argv, i, [&](const std::string& v) { return parse_int(v, a.world_size); },
                        "option '--world-size' needs a positive integer", status)) {
        return std::nullopt;
      }
      continue;
    }
    if (arg == "-o" || arg == "-j" || arg == "--compare") {
      if (i + 1 >= argc) {
        status = usage_error("option '" + arg + "' needs a value");
        return std::nullopt;
      }
      const std::string value = argv[++i];
      if (arg == "-o") {
        a.out_dir = value;
      } else if (arg == "--compare") {
        a.compare_files.push_back(value);
      } else if (!parse_int(value, a.jobs)) {
        status = usage_error("option '-j' needs a positive integer, not '" + value + "'");
        return std::nullopt;
      }
    } else if (arg == "--no-build") {
      a.no_build = true;
    } else if (arg == "--cpu-only") {
      a.cpu_only = true;
    } else if (arg == "--quick-build") {
      a.quick_build = true;
    } else if (arg == "--json") {
      a.json = true;
    } else if (arg == "--markdown") {
      a.markdown = true;
    } else if (arg.size() > 1 && arg[0] == '-') {
      status = usage_error("unknown option '" + arg + "'");
      return std::nullopt;
    } else if (a.command.empty()) {
      a.command = arg;
    } else {
      a.positional.push_back(arg);
    }
  }
  if (a.command.empty()) {
    std::cerr << kUsage;
    status = kUsageError;
    return std::nullopt;
  }
  return a;
}

bool expect_args(const Args& a, std::size_t n, const char* what, int& status) {
  if (a.positional.size() == n) return true;
  status = usage_error("'" + a.command + "' takes " + what + " (got " + std::to_string(a.positional.size()) +
                       " arguments)");
  return false;
}

bool flags_allowed(const Args& a, bool json, bool markdown, int& status) {
  if ((a.json && !json) || (a.markdown && !markdown)) {
    status = usage_error(std::string("option '") + (a.json && !json ? "--json" : "--markdown") +
                         "' does not apply to '" + a.command + "'");
    return false;
  }
  return true;
}

// Loads and plans a spec, printing diagnostics to stderr.
std::optional<gc::Plan> load_plan(const std::string& path) {
  gc::Diagnostics diags;
  std::optional<gc::Plan> plan;
  if (auto spec = gc::load_spec(path, diags)) plan = gc::make_plan(*spec, diags);
  diags.print(std::cerr);
  if (diags.has_errors()) {
    std::cerr << diags.error_count() << (diags.error_count() == 1 ? " error" : " errors") << " in " << path << "\n";
    return std::nullopt;
  }
  return plan;
}

bool looks_like_spec(const std::string& arg) {
  return arg.size() > 5 && arg.compare(arg.size() - 5, 5, ".toml") == 0;
}

int report(const Args& a) {
  int status = kOk;
  if (a.no_build || a.jobs || a.cpu_only || a.quick_build || !a.programs.empty() || !a.cuda_arch.empty()) {
    return usage_error(
        "options --no-build, --cpu-only, --cuda-arch, --quick-build, --programs and -j do not apply to 'report'");
  }
  if (!flags_allowed(a, false, false, status)) return status;
  if (a.positional.empty()) return usage_error("'report' takes one or more RUN_DIRs (got 0 arguments)");
  gc::report::ReportOptions options;
  options.run_dirs = a.positional;
  options.compare_files = a.compare_files;
  if (!a.out_dir.empty()) options.output = a.out_dir;
  return gc::report::report_command(options, std::cout, std::cerr);
}

int run(const Args& a) {
  int status = kOk;
  if (a.world_size > 0 && (a.command != "explain" || a.json)) {
    return usage_error("option '--world-size' applies only to 'explain' (text output)");
  }
  if (a.command == "report") return report(a);
  if (!a.compare_files.empty()) return usage_error("option '--compare' applies only to 'gcompile report'");
  const bool generate = looks_like_spec(a.command);
  if ((a.no_build || a.cpu_only || a.quick_build || !a.programs.empty() || !a.out_dir.empty() || a.jobs ||
       !a.cuda_arch.empty()) &&
      !generate) {
    return usage_error(
        "options --no-build, --cpu-only, --cuda-arch, --quick-build, --programs, -o and -j apply only to 'gcompile SPEC'");
  }
  if (generate) {
    if (!a.positional.empty()) return usage_error("'gcompile SPEC' takes one spec (got " +
                                                  std::to_string(a.positional.size() + 1) + ")");
    if (!flags_allowed(a, false, false, status)) return status;
    if (!a.cuda_arch.empty() && a.cpu_only) return usage_error("--cuda-arch and --cpu-only contradict each other");
    if (a.quick_build && a.no_build) return usage_error("--quick-build and --no-build contradict each other");
    if (const std::string conflict = gc::programs_conflict(a.programs, !a.no_build, !a.cpu_only); !conflict.empty()) {
      return usage_error(conflict);
    }
    return gc::generate_command(
        {a.command, a.out_dir, !a.no_build, a.jobs, !a.cpu_only, a.cuda_arch, a.quick_build, a.programs});
  }
  if (a.command == "diff") {
    if (!expect_args(a, 2, "two SPECs", status) || !flags_allowed(a, false, false, status)) return status;
    return gc::diff_command(a.positional[0], a.positional[1]);
  }
  if (a.command == "check") {
    if (!expect_args(a, 1, "one SPEC", status) || !flags_allowed(a, false, false, status)) return status;
    auto plan = load_plan(a.positional[0]);
    if (!plan) return kSpecError;
    std::cout << a.positional[0] << ": ok (" << plan->spec.experiment.name << ")\n";
    return kOk;
  }
  if (a.command == "explain") {
    if (!expect_args(a, 1, "one SPEC", status) || !flags_allowed(a, true, false, status)) return status;
    auto plan = load_plan(a.positional[0]);
    if (!plan) return kSpecError;
    if (a.json) {
      std::cout << gc::explain_json(*plan).dump(2) << "\n";
    } else {
      std::cout << gc::explain_text(*plan);
      if (a.world_size > 0) std::cout << gc::explain_world(*plan, a.world_size);
    }
    return kOk;
  }
  if (a.command == "resolve") {
    if (!expect_args(a, 1, "one SPEC", status) || !flags_allowed(a, false, false, status)) return status;
    auto plan = load_plan(a.positional[0]);
    if (!plan) return kSpecError;
    std::cout << gc::resolved_toml(plan->spec);
    return kOk;
  }
  if (a.command == "schema") {
    if (!expect_args(a, 0, "no arguments", status) || !flags_allowed(a, false, true, status)) return status;
    if (a.markdown) {
      std::cout << gc::schema_markdown();
    } else {
      for (const auto& k : gc::schema()) {
        std::cout << k.path << " : " << gc::key_type_name(k) << " = " << k.default_text << "\n";
      }
    }
    return kOk;
  }
  if (a.command == "presets") {
    if (!expect_args(a, 0, "no arguments", status) || !flags_allowed(a, false, false, status)) return status;
    for (const auto& name : gc::preset_names()) {
      // The [preset] header of each file: scope and one-line description.
      const toml::table t = toml::parse(*gc::preset_source(name), name);
      std::cout << name << " (" << t["preset"]["scope"].value_or<std::string>("?") << "): "
                << t["preset"]["description"].value_or<std::string>("") << "\n";
    }
    return kOk;
  }
  return usage_error("unknown command '" + a.command + "' (commands: check, explain, resolve, diff, sweep, report, export, schema, presets; or a SPEC.toml to generate and build)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::string(argv[1]) == "sweep") return gc::sweep_command(argc - 2, argv + 2);
    if (argc > 1 && std::string(argv[1]) == "export") return gc::export_command(argc - 2, argv + 2);
    int status = kOk;
    auto args = parse_args(argc, argv, status);
    if (!args) return status;
    return run(*args);
  } catch (const std::exception& e) {
    // Spec, data and usage errors are diagnostics with their own statuses; what reaches here is a
    // broken invariant of gcompile itself (say, templates that disagree with the emitter).
    std::fprintf(stderr, "gcompile: internal error: %s\n(a bug in gcompile, not in your spec: please report it)\n",
                 e.what());
    return kInternalError;
  }
}
