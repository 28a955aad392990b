// `gcompile SPEC` and `gcompile diff`: generating trees, building them with
// CMake, and comparing the trees of two specs.
#pragma once

#include <string>
#include <vector>

namespace gc {

struct GenerateOptions {
  std::string spec;
  std::string out_dir;  // "" = generated/<experiment name>
  bool build = true;
  int jobs = 0;  // 0 = all cores
  bool cuda = true;  // false: configure the tree with -DGC_CUDA=OFF (CPU backend only)
  std::string cuda_arch;  // "" = the tree's default list; else e.g. "90a" or "80;90a" (-DGC_CUDA_ARCHITECTURES)
  bool quick = false;     // --quick-build: the tree's Quick build type (C++ at -Og) instead of Release
  std::vector<std::string> programs;  // --programs: build only these (train, analyze, ...); empty = all
};

// --programs' value: "train,analyze" -> {"train", "analyze"}; false (out unusable) unless each entry
// is one of the tree's programs (train, analyze, probe, gradcheck, parity) and none is repeated.
bool parse_programs(const std::string& text, std::vector<std::string>& out);
// The tree's programs, in the order --programs' message names them.
inline constexpr const char* kTreePrograms[] = {"train", "analyze", "probe", "gradcheck", "parity"};
// What --programs needs: "a comma-separated list of train, analyze, ... and parity, e.g. train,analyze".
std::string programs_need();
// Why --programs cannot go with the other build options ("" when it can): gcompile SPEC's and
// gcompile sweep's check.
std::string programs_conflict(const std::vector<std::string>& programs, bool build, bool cuda);

// Returns the process exit status (0 ok, 1 spec or build error).
int generate_command(const GenerateOptions& options);
int diff_command(const std::string& spec_a, const std::string& spec_b);

}  // namespace gc
