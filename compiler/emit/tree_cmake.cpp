// CMakeLists.txt of a generated tree: the CPU backend always (OpenBLAS,
// OpenMP), the CUDA backend when nvcc is found. Binaries land in the tree's
// root, so `./generated/NAME/train` runs the experiment.
#include <sstream>

#include "emit/emit.hpp"

namespace gc {

namespace {

bool is_main(const std::string& path) {
  return path.size() > 9 && path.compare(path.size() - 9, 9, "_main.cpp") == 0;
}

std::string program_name(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string file = path.substr(slash + 1);
  return file.substr(0, file.size() - 9);  // "train_main.cpp" -> "train"
}

}  // namespace

std::string tree_cmake(const Plan& plan, const std::vector<std::string>& sources,
                       const std::vector<std::string>& cuda_sources) {
  std::ostringstream o;
  o << "cmake_minimum_required(VERSION 3.25)\n"
    << "project(gcompile_" << plan.spec.experiment.name << " LANGUAGES CXX)\n\n"
    << "set(CMAKE_CXX_STANDARD 17)\nset(CMAKE_CXX_STANDARD_REQUIRED ON)\n"
    << "if(NOT CMAKE_BUILD_TYPE)\n  set(CMAKE_BUILD_TYPE Release)\nendif()\n\n"
    << "find_package(OpenMP REQUIRED)\nset(BLA_VENDOR OpenBLAS)\nfind_package(BLAS REQUIRED)\n"
    << "find_path(GC_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu aarch64-linux-gnu REQUIRED)\n\n";
  o << "add_library(gc_common STATIC";
  for (const auto& s : sources) {
    if (!is_main(s)) o << "\n  " << s;
  }
  o << ")\n"
    << "target_include_directories(gc_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/src\n"
    << "  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/third_party ${GC_CBLAS_INCLUDE})\n"
    << "target_link_libraries(gc_common PUBLIC OpenMP::OpenMP_CXX BLAS::BLAS)\n\n";
  for (const auto& s : sources) {
    if (!is_main(s)) continue;
    const std::string name = program_name(s);
    o << "add_executable(" << name << " " << s << ")\n"
      << "target_link_libraries(" << name << " PRIVATE gc_common)\n"
      << "set_target_properties(" << name << " PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})\n\n";
  }
  o << "# The CUDA backend builds when the toolkit is present (Hopper: sm_90a for wgmma).\n"
    << "include(CheckLanguage)\ncheck_language(CUDA)\n"
    << "if(CMAKE_CUDA_COMPILER)\n  enable_language(CUDA)\n  find_package(CUDAToolkit REQUIRED)\n";
  if (cuda_sources.empty()) {
    o << "  # This tree has no CUDA sources yet.\n";
  } else {
    o << "  add_library(gc_cuda STATIC";
    for (const auto& s : cuda_sources) o << "\n    " << s;
    o << ")\n  set_target_properties(gc_cuda PROPERTIES CUDA_ARCHITECTURES 90a)\n"
      << "  target_link_libraries(gc_cuda PUBLIC gc_common CUDA::cudart CUDA::cublasLt)\n";
  }
  o << "endif()\n";
  return o.str();
}

}  // namespace gc
