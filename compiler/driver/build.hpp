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
  bool quick = false;     // --quick-build: the tree's Quick build type (-O1) instead of Release
  std::vector<std::string> programs;  // --programs: build only these (train, analyze, ...); empty = all
};

// Returns the process exit status (0 ok, 1 spec or build error).
int generate_command(const GenerateOptions& options);
int diff_command(const std::string& spec_a, const std::string& spec_b);

}  // namespace gc
