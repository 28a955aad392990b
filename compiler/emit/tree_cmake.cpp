// CMakeLists.txt of a generated tree, from templates/CMakeLists.txt.in: the
// CPU backend always (OpenBLAS, OpenMP), the CUDA backend when nvcc is found
// and GC_CUDA is ON (the default). Binaries land in the tree's root, so `./generated/NAME/train`
// runs the experiment; with CUDA, train also links the GPU engine and the
// tree gains `parity` (CUDA vs CPU on the whole model).
#include <stdexcept>
#include <utility>

#include "common/text.hpp"
#include "common/embedded.hpp"
#include "emit/emit.hpp"

namespace gc {

namespace {

std::string program_name(const std::string& path) {
  const std::string file = path.substr(path.rfind('/') + 1);
  return file.substr(0, file.rfind("_main."));  // "train_main.cpp" -> "train"
}

// Replaces every "@NAME@" of `text` with its value.
std::string fill(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [name, value] : values) {
    const std::string key = "@" + name + "@";
    for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size())) {
      text.replace(at, key.size(), value);
    }
  }
  return text;
}

const std::string& tree_cmake_template() {
  for (const auto& f : embedded_tree_files()) {
    if (f.path == "CMakeLists.txt.in") return f.text;
  }
  throw std::logic_error("templates/CMakeLists.txt.in is not embedded in gcompile");
}

}  // namespace

// templates/CMakeLists.txt.in with the tree's name, its library sources and one executable per
// *_main file (the CUDA programs inside the template's CUDA block).
std::string tree_cmake(const Plan& plan, const std::vector<std::string>& sources,
                       const std::vector<std::string>& cuda_sources) {
  std::string common, programs, cuda, cuda_programs;
  for (const auto& s : sources) {
    if (!is_program_main(s)) {
      common += "\n  " + s;
      continue;
    }
    const std::string name = program_name(s);
    programs += "add_executable(" + name + " " + s + ")\n" + "target_link_libraries(" + name + " PRIVATE gc_common)\n" +
                "set_target_properties(" + name + " PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})\n\n";
  }
  for (const auto& s : cuda_sources) {
    if (!is_program_main(s)) {
      cuda += "\n    " + s;
      continue;
    }
    const std::string name = program_name(s);
    cuda_programs += "  add_executable(" + name + " " + s + ")\n" + "  set_target_properties(" + name +
                     " PROPERTIES CUDA_ARCHITECTURES \"${GC_CUDA_ARCHITECTURES}\" RUNTIME_OUTPUT_DIRECTORY " +
                     "${CMAKE_CURRENT_SOURCE_DIR})\n" + "  target_link_libraries(" + name + " PRIVATE gc_cuda)\n";
  }
  return fill(tree_cmake_template(), {{"EXPERIMENT", plan.spec.experiment.name},
                                      {"COMMON_SOURCES", common},
                                      {"PROGRAMS", programs},
                                      {"CUDA_SOURCES", cuda},
                                      {"CUDA_PROGRAMS", cuda_programs}});
}

}  // namespace gc
