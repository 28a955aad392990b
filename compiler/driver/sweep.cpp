#include "driver/sweep.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "common/diagnostics.hpp"
#include "driver/build.hpp"
#include "report/page.hpp"
#include "spec/spec.hpp"

namespace gc {

namespace fs = std::filesystem;

namespace {

const char* const kSweepUsage =
    R"(usage: gcompile sweep BASE.toml --set KEY=V1,V2,... [--set ...] -o DIR
                      [--train] [--steps N] [--no-build] [--cpu-only] [--quick-build]
                      [--programs LIST] [-j N]

  Writes one spec per point of the grid into DIR (NAME.toml, each extends
  BASE and sets the point's values), generates and builds every tree
  (generated/NAME/), and with --train trains them one after another (one per
  GPU at a time where several GPUs are found) into DIR/runs/NAME/ and writes
  DIR/report.html. Values are TOML literals (strings may be bare words).
  --cpu-only, --quick-build, --programs and -j build each tree as gcompile SPEC
  does (--programs train builds only what --train runs).
)";

struct Axis {
  std::string key;
  std::vector<std::string> values;  // TOML literals
};

struct Point {
  std::string name;
  fs::path spec;
  std::vector<std::pair<std::string, std::string>> settings;  // key, TOML literal
};

struct SweepArgs {
  std::string base, out;
  std::vector<Axis> axes;
  bool train = false, build = true, cuda = true, quick = false;
  long steps = 0;
  int jobs = 0;
  std::vector<std::string> programs;  // --programs: build only these of each tree's programs; empty = all
};

int usage(const std::string& message) {
  std::cerr << "gcompile sweep: error: " << message << "\n" << kSweepUsage;
  return 2;
}

// A value as a TOML literal: valid TOML as it is (1e-5, true, "x", [1, 2]),
// else a bare word taken as a string.
std::string toml_literal(const std::string& v) {
  try {
    (void)toml::parse("v = " + v);
    return v;
  } catch (const toml::parse_error&) {
    std::ostringstream s;
    s << toml::value<std::string>(v);
    return s.str();
  }
}

std::vector<std::string> split_values(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false;
  for (char c : list) {
    if (c == '"') quoted = !quoted;
    if (!quoted && c == '[') ++depth;
    if (!quoted && c == ']') --depth;
    if (c == ',' && depth == 0 && !quoted) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool parse_sweep_args(int argc, char** argv, SweepArgs& a, int& status) {
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    std::string v;
    if (arg == "-h" || arg == "--help") {
      std::cout << kSweepUsage;
      status = 0;
      return false;
    } else if (arg == "--set") {
      const auto eq = value(v) ? v.find('=') : std::string::npos;
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size()) {
        status = usage("--set needs KEY=V1,V2,... (got '" + v + "')");
        return false;
      }
      Axis axis{v.substr(0, eq), {}};
      for (const auto& item : split_values(v.substr(eq + 1))) {
        if (item.empty()) {
          status = usage("--set " + v + ": empty value");
          return false;
        }
        axis.values.push_back(toml_literal(item));
      }
      for (const auto& other : a.axes) {
        if (other.key == axis.key) {
          status = usage("--set " + axis.key + " given twice");
          return false;
        }
      }
      a.axes.push_back(axis);
    } else if (arg == "-o") {
      if (!value(a.out) || a.out.empty()) return (status = usage("-o needs a directory")), false;
    } else if (arg == "--steps") {
      if (!value(v) || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 12 || std::stol(v) <= 0) {
        return (status = usage("--steps needs a positive integer")), false;
      }
      a.steps = std::stol(v);
    } else if (arg == "-j") {
      if (!value(v) || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 4 || std::stoi(v) <= 0) {
        return (status = usage("-j needs a positive integer")), false;
      }
      a.jobs = std::stoi(v);
    } else if (arg == "--train") {
      a.train = true;
    } else if (arg == "--no-build") {
      a.build = false;
    } else if (arg == "--cpu-only") {
      a.cuda = false;
    } else if (arg == "--quick-build") {
      a.quick = true;
    } else if (arg == "--programs") {
      if (!value(v) || !parse_programs(v, a.programs)) {
        return (status = usage(std::string("--programs needs ") + programs_need())), false;
      }
    } else if (!arg.empty() && arg[0] == '-') {
      return (status = usage("unknown option '" + arg + "'")), false;
    } else if (a.base.empty()) {
      a.base = arg;
    } else {
      return (status = usage("one BASE spec only (got '" + a.base + "' and '" + arg + "')")), false;
    }
  }
  if (a.base.empty()) return (status = usage("no BASE spec given")), false;
  if (a.axes.empty()) return (status = usage("no --set KEY=V1,V2,... given")), false;
  if (a.out.empty()) return (status = usage("no -o DIR given (where the point specs go)")), false;
  if (a.train && !a.build) return (status = usage("--train needs the trees built (drop --no-build)")), false;
  if (a.steps && !a.train) return (status = usage("--steps applies to --train")), false;
  if (const std::string conflict = programs_conflict(a.programs, a.build, a.cuda); !conflict.empty()) {
    return (status = usage(conflict)), false;
  }
  if (a.train && !a.programs.empty() && std::find(a.programs.begin(), a.programs.end(), "train") == a.programs.end()) {
    return (status = usage("--train needs train among --programs")), false;
  }
  return true;
}

// "model.norm_eps" = "1e-12" -> "norm_eps1e-12"; only characters an experiment name allows.
std::string name_part(const std::string& key, const std::string& literal) {
  std::string out = key.substr(key.rfind('.') + 1);
  for (char c : literal) {
    const char l = char(std::tolower(static_cast<unsigned char>(c)));
    if ((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '.' || l == '-' || l == '_') out += l;
  }
  return out;
}

// The grid in row-major order (the last --set varies fastest).
std::vector<Point> make_points(const SweepArgs& a, const std::string& base_name) {
  std::vector<Point> points(1);
  for (const auto& axis : a.axes) {
    std::vector<Point> next;
    for (const auto& p : points) {
      for (const auto& v : axis.values) {
        Point q = p;
        q.settings.emplace_back(axis.key, v);
        next.push_back(q);
      }
    }
    points = next;
  }
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::string name = base_name;
    for (const auto& [key, v] : points[i].settings) name += "-" + name_part(key, v);
    if (name.size() > 64) name = base_name.substr(0, 50) + "-p" + std::to_string(i + 1);
    points[i].name = name;
    points[i].spec = fs::path(a.out) / (name + ".toml");
  }
  return points;
}

std::string point_spec_text(const Point& p, const SweepArgs& a, std::size_t index, std::size_t count) {
  std::string changes;
  for (const auto& [key, v] : p.settings) changes += (changes.empty() ? "" : ", ") + key + " = " + v;
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
  for (const auto& [key, v] : p.settings) {
    const auto dot = key.rfind('.');
    tables[dot == std::string::npos ? "" : key.substr(0, dot)].emplace_back(key.substr(dot + 1), v);
  }
  const fs::path base_rel = fs::relative(fs::absolute(a.base), fs::absolute(p.spec.parent_path()));
  std::ostringstream o;
  o << "# gcompile sweep point " << index + 1 << " of " << count << ": " << changes << "\n";
  o << "[experiment]\nextends = " << toml::value<std::string>(base_rel.generic_string()) << "\n";
  o << "name = \"" << p.name << "\"\n";
  o << "description = " << toml::value<std::string>("sweep point: " + changes) << "\n";
  for (const auto& [key, v] : tables["experiment"]) o << key << " = " << v << "\n";
  for (const auto& [table, entries] : tables) {
    if (table == "experiment") continue;
    if (table.empty()) {
      continue;  // a top-level key: the loader reports it as unknown at its line
    }
    o << "\n[" << table << "]\n";
    for (const auto& [key, v] : entries) o << key << " = " << v << "\n";
  }
  return o.str();
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// GPUs nvidia-smi lists (0 without it).
int gpu_count() {
  FILE* pipe = ::popen("nvidia-smi -L 2>/dev/null", "r");
  if (!pipe) return 0;
  int n = 0;
  char line[512];
  while (std::fgets(line, sizeof line, pipe)) n += std::string(line).rfind("GPU ", 0) == 0;
  ::pclose(pipe);
  return n;
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool run_complete(const fs::path& run) {
  std::ifstream in(run / "metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  return last.find("\"summary\"") != std::string::npos;
}

// Trains every point into OUT/runs/NAME; a point whose run finished before is kept.
bool train_points(const std::vector<Point>& points, const SweepArgs& a) {
  std::error_code ec;
  fs::create_directories(fs::path(a.out) / "runs", ec);
  if (ec) {
    std::cerr << "gcompile sweep: error: " << (fs::path(a.out) / "runs").string() << ": " << ec.message() << "\n";
    return false;
  }
  const int gpus = gpu_count();
  const int workers = std::max(1, gpus);
  std::atomic<std::size_t> next{0};
  std::atomic<bool> ok{true};
  std::mutex print;
  auto worker = [&](int gpu) {
    for (std::size_t i = next++; i < points.size(); i = next++) {
      const Point& p = points[i];
      const fs::path run = fs::path(a.out) / "runs" / p.name;
      const fs::path log = fs::path(a.out) / "runs" / (p.name + ".log");
      if (run_complete(run)) {
        std::lock_guard<std::mutex> lock(print);
        std::cerr << "gcompile sweep: " << p.name << " already trained (" << run.string() << "), kept\n";
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(print);
        std::cerr << "gcompile sweep: training " << p.name << " (" << i + 1 << "/" << points.size() << ")"
                  << (gpus > 1 ? " on GPU " + std::to_string(gpu) : "") << ", log " << log.string() << "\n";
      }
      std::string cmd = (gpus > 1 ? "CUDA_VISIBLE_DEVICES=" + std::to_string(gpu) + " " : "") +
                        quote((fs::path("generated") / p.name / "train").string()) + " --out " + quote(run.string());
      if (a.steps) cmd += " --steps " + std::to_string(a.steps);
      const int status = std::system((cmd + " > " + quote(log.string()) + " 2>&1").c_str());
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        std::lock_guard<std::mutex> lock(print);
        std::cerr << "gcompile sweep: error: training " << p.name << " failed; see " << log.string() << "\n";
        ok = false;
      }
    }
  };
  std::vector<std::thread> threads;
  for (int g = 0; g < workers; ++g) threads.emplace_back(worker, g);
  for (auto& t : threads) t.join();
  return ok;
}

void write_index(const std::vector<Point>& points, const SweepArgs& a) {
  nlohmann::ordered_json j;
  j["base"] = a.base;
  j["axes"] = nlohmann::ordered_json::array();
  for (const auto& axis : a.axes) j["axes"].push_back({{"key", axis.key}, {"values", axis.values}});
  j["points"] = nlohmann::ordered_json::array();
  for (const auto& p : points) {
    nlohmann::ordered_json settings = nlohmann::ordered_json::object();
    for (const auto& [key, v] : p.settings) settings[key] = v;
    j["points"].push_back({{"name", p.name}, {"spec", p.spec.filename().string()},
                           {"tree", "generated/" + p.name}, {"run", "runs/" + p.name}, {"settings", settings}});
  }
  std::ofstream(fs::path(a.out) / "sweep.json") << j.dump(2) << "\n";
}

}  // namespace

int sweep_command(int argc, char** argv) {
  SweepArgs a;
  int status = 0;
  if (!parse_sweep_args(argc, argv, a, status)) return status;
  Diagnostics diags;
  const auto base = load_spec(a.base, diags);
  diags.print(std::cerr);
  if (!base) return 1;

  std::vector<Point> points = make_points(a, base->experiment.name);
  std::error_code ec;
  fs::create_directories(a.out, ec);
  if (ec) {
    std::cerr << "gcompile sweep: error: " << a.out << ": cannot create the directory: " << ec.message() << "\n";
    return 1;
  }
  // Write every point's spec (never over a different file of that name), then
  // check them all before generating anything.
  for (std::size_t i = 0; i < points.size(); ++i) {
    const std::string text = point_spec_text(points[i], a, i, points.size());
    if (fs::exists(points[i].spec, ec) && read_text(points[i].spec) != text) {
      std::cerr << "gcompile sweep: error: " << points[i].spec.string()
                << ": exists with other content; move it away or choose another -o (a sweep never overwrites "
                   "a spec)\n";
      return 1;
    }
    std::ofstream(points[i].spec, std::ios::binary) << text;
  }
  bool valid = true;
  for (const auto& p : points) {
    Diagnostics d;
    const bool loaded = load_spec(p.spec.string(), d).has_value() && !d.has_errors();
    d.print(std::cerr);
    valid = valid && loaded;
  }
  if (!valid) return 1;
  write_index(points, a);
  std::cerr << "gcompile sweep: " << points.size() << " points, specs in " << a.out << "\n";
  for (std::size_t i = 0; i < points.size(); ++i) {
    std::cerr << "gcompile sweep: point " << i + 1 << "/" << points.size() << ": " << points[i].name << "\n";
    if (generate_command({points[i].spec.string(), "", a.build, a.jobs, a.cuda, "", a.quick, a.programs}) != 0) return 1;
  }
  if (!a.train) return 0;
  if (!train_points(points, a)) return 1;
  report::ReportOptions options;
  for (const auto& p : points) options.run_dirs.push_back((fs::path(a.out) / "runs" / p.name).string());
  options.output = (fs::path(a.out) / "report.html").string();
  return report::report_command(options, std::cout, std::cerr);
}

}  // namespace gc
