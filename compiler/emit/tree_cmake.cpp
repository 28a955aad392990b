// CMakeLists.txt of a generated tree: the CPU backend always (OpenBLAS,
// OpenMP), the CUDA backend when nvcc is found and GC_CUDA is ON (the
// default). Binaries land in the tree's root, so `./generated/NAME/train`
// runs the experiment; with CUDA, train also links the GPU engine and the
// tree gains `parity` (CUDA vs CPU on the whole model).
#include <sstream>

#include "common/text.hpp"
#include "emit/emit.hpp"

namespace gc {

namespace {

bool is_main(const std::string& path) { return ends_with(path, "_main.cpp") || ends_with(path, "_main.cu"); }

std::string program_name(const std::string& path) {
  const std::string file = path.substr(path.rfind('/') + 1);
  return file.substr(0, file.rfind("_main."));  // "train_main.cpp" -> "train"
}

}  // namespace

std::string tree_cmake(const Plan& plan, const std::vector<std::string>& sources,
                       const std::vector<std::string>& cuda_sources) {
  std::ostringstream o;
  o << "cmake_minimum_required(VERSION 3.20)  # the GPU machines' CMake may be older than Debian's\n"
    << "project(gcompile_" << plan.spec.experiment.name << " LANGUAGES CXX)\n\n"
    << "set(CMAKE_CXX_STANDARD 17)\nset(CMAKE_CXX_STANDARD_REQUIRED ON)\n"
    << "if(NOT CMAKE_BUILD_TYPE)\n  set(CMAKE_BUILD_TYPE Release)\nendif()\n"
    << "# The CPU kernels' loops vectorize (cpu/exp.hpp's exp_fixed in the softmax, SiLU and gates):\n"
    << "# for this machine's instruction set (AVX2 / AVX-512 where it has them; -DGC_NATIVE=OFF for a\n"
    << "# build that runs on any x86-64), with no floating-point trap assumed (so loops with comparisons\n"
    << "# vectorize) and no contraction into FMAs, so the results are the same bits with or without\n"
    << "# GC_NATIVE: no floating-point sum is reordered by the vector width.\n"
    << "option(GC_NATIVE \"Compile the CPU kernels for this machine's instruction set\" ON)\n"
    << "if(CMAKE_CXX_COMPILER_ID MATCHES \"GNU|Clang\")\n"
    << "  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fno-trapping-math> $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)\n"
    << "  include(CheckCXXCompilerFlag)\n"
    << "  check_cxx_compiler_flag(-march=native GC_HAS_MARCH_NATIVE)\n"
    << "  if(GC_NATIVE AND GC_HAS_MARCH_NATIVE)\n"
    << "    add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)\n"
    << "  endif()\nendif()\n\n"
    << "# OpenBLAS and OpenMP speed up the CPU backend; without them (a GPU node with only CMake, a C++\n"
    << "# compiler and the CUDA toolkit) it builds with its portable GEMM, serially.\n"
    << "option(GC_BLAS \"Use OpenBLAS for the CPU backend's GEMMs when found\" ON)\n"
    << "find_package(OpenMP)\nset(BLA_VENDOR OpenBLAS)\nfind_package(BLAS)\n"
    << "find_path(GC_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas x86_64-linux-gnu aarch64-linux-gnu)\n\n"
    << "# ccache, when installed, reuses objects across trees: paths are made relative to the tree\n"
    << "# (CCACHE_BASEDIR), so two trees that differ only in src/experiment.cpp and src/plan_init.cpp\n"
    << "# (a sweep over γ, the seed or the name) compile those two files and link.\n"
    << "option(GC_CCACHE \"Compile through ccache when it is installed\" ON)\n"
    << "find_program(GC_CCACHE_PROGRAM ccache)\n"
    << "if(GC_CCACHE AND GC_CCACHE_PROGRAM)\n"
    << "  set(GC_LAUNCHER ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_CURRENT_SOURCE_DIR} CCACHE_NOHASHDIR=1\n"
    << "    ${GC_CCACHE_PROGRAM})\n"
    << "  set(CMAKE_CXX_COMPILER_LAUNCHER ${GC_LAUNCHER})\n"
    << "  set(CMAKE_CUDA_COMPILER_LAUNCHER ${GC_LAUNCHER})\n"
    << "endif()\n\n";
  o << "add_library(gc_common STATIC";
  for (const auto& s : sources) {
    if (!is_main(s)) o << "\n  " << s;
  }
  o << ")\n"
    << "target_include_directories(gc_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/src\n"
    << "  ${CMAKE_CURRENT_SOURCE_DIR}/runtime/third_party)\n"
    << "if(OpenMP_CXX_FOUND)\n  target_link_libraries(gc_common PUBLIC OpenMP::OpenMP_CXX)\nendif()\n"
    << "if(GC_BLAS AND BLAS_FOUND AND GC_CBLAS_INCLUDE)\n"
    << "  target_include_directories(gc_common PUBLIC ${GC_CBLAS_INCLUDE})\n"
    << "  target_link_libraries(gc_common PUBLIC BLAS::BLAS)\n"
    << "else()\n"
    << "  message(STATUS \"No OpenBLAS (or GC_BLAS=OFF): the CPU backend uses its portable GEMM (slow)\")\n"
    << "  target_compile_definitions(gc_common PUBLIC GC_NO_CBLAS)\n"
    << "endif()\n"
    << "# MPI (Open MPI from Debian) for data-parallel runs under mpirun/srun (runtime/comm.cpp); without it\n"
    << "# the tree trains in one process and refuses to run as N copies.\n"
    << "option(GC_MPI \"Build with MPI for multi-process training when found\" ON)\n"
    << "if(GC_MPI)\n  find_package(MPI COMPONENTS CXX)\nendif()\n"
    << "# zlib compresses and checksums the heatmap PNGs (runtime/png.cpp).\n"
    << "find_package(ZLIB REQUIRED)\n"
    << "target_link_libraries(gc_common PUBLIC ZLIB::ZLIB)\n"
    << "if(GC_MPI AND MPI_CXX_FOUND)\n"
    << "  target_link_libraries(gc_common PUBLIC MPI::MPI_CXX)\n"
    << "  target_compile_definitions(gc_common PUBLIC GC_HAVE_MPI)\n"
    << "endif()\n\n";
  for (const auto& s : sources) {
    if (!is_main(s)) continue;  // .cpp mains; the .cu mains are CUDA programs below
    const std::string name = program_name(s);
    o << "add_executable(" << name << " " << s << ")\n"
      << "target_link_libraries(" << name << " PRIVATE gc_common)\n"
      << "set_target_properties(" << name << " PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})\n\n";
  }
  o << "# The CUDA backend builds when the toolkit is present, unless -DGC_CUDA=OFF, for every GPU of compute\n"
    << "# capability 8.0 or newer: SASS and PTX for each architecture listed (newer GPUs compile the PTX when\n"
    << "# loading). -DGC_CUDA_ARCHITECTURES=90a (or gcompile SPEC --cuda-arch 90a) builds for one and faster.\n"
    << "option(GC_CUDA \"Build the CUDA backend when nvcc is found\" ON)\n"
    << "set(GC_CUDA_ARCHITECTURES \"80;86;89;90a\" CACHE STRING \"CUDA architectures of the CUDA backend (sm_80 or newer)\")\n"
    << "if(GC_CUDA)\n  include(CheckLanguage)\n  check_language(CUDA)\nendif()\n"
    << "if(GC_CUDA AND CMAKE_CUDA_COMPILER)\n  enable_language(CUDA)\n  find_package(CUDAToolkit REQUIRED)\n"
    << "  set(CMAKE_CUDA_STANDARD 17)\n  set(CMAKE_CUDA_STANDARD_REQUIRED ON)\n";
  if (cuda_sources.empty()) {
    o << "  # This tree has no CUDA sources.\n";
  } else {
    o << "  add_library(gc_cuda STATIC";
    for (const auto& s : cuda_sources) {
      if (!is_main(s)) o << "\n    " << s;
    }
    o << ")\n  set_target_properties(gc_cuda PROPERTIES CUDA_ARCHITECTURES \"${GC_CUDA_ARCHITECTURES}\")\n"
      << "  message(STATUS \"CUDA backend for architectures ${GC_CUDA_ARCHITECTURES}\")\n"
      << "  target_compile_options(gc_cuda PUBLIC $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)\n"
      << "  target_link_libraries(gc_cuda PUBLIC gc_common CUDA::cudart CUDA::cublasLt)\n"
      << "  target_compile_definitions(gc_cuda PUBLIC GC_HAVE_CUDA)\n"
      << "  # NCCL for multi-process training on GPUs: the toolkit's copy, NCCL_HOME, or PyPI's nvidia-nccl wheel.\n"
      << "  find_program(GC_PYTHON3 python3)\n"
      << "  if(GC_PYTHON3)\n"
      << "    execute_process(COMMAND ${GC_PYTHON3} -c \"import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))\"\n"
      << "      OUTPUT_VARIABLE GC_NCCL_WHEEL OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)\n"
      << "  endif()\n"
      << "  find_path(GC_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include ${GC_NCCL_WHEEL}/include)\n"
      << "  find_library(GC_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib\n"
      << "    ${GC_NCCL_WHEEL}/lib)\n"
      << "  if(GC_NCCL_INCLUDE AND GC_NCCL_LIBRARY)\n"
      << "    message(STATUS \"NCCL: ${GC_NCCL_LIBRARY} (multi-process training on GPUs)\")\n"
      << "    target_include_directories(gc_cuda PUBLIC ${GC_NCCL_INCLUDE})\n"
      << "    target_link_libraries(gc_cuda PUBLIC ${GC_NCCL_LIBRARY})\n"
      << "    target_compile_definitions(gc_cuda PUBLIC GC_HAVE_NCCL)\n"
      << "  else()\n"
      << "    message(STATUS \"No NCCL (nccl.h and libnccl.so.2 under the CUDA toolkit, NCCL_HOME or the nvidia-nccl \"\n"
      << "      \"wheel): the CUDA backend trains in one process\")\n"
      << "  endif()\n"
      << "  target_link_libraries(train PRIVATE gc_cuda)\n";
    for (const auto& s : cuda_sources) {
      if (!is_main(s)) continue;
      const std::string name = program_name(s);
      o << "  add_executable(" << name << " " << s << ")\n"
        << "  set_target_properties(" << name << " PROPERTIES CUDA_ARCHITECTURES \"${GC_CUDA_ARCHITECTURES}\" RUNTIME_OUTPUT_DIRECTORY "
        << "${CMAKE_CURRENT_SOURCE_DIR})\n"
        << "  target_link_libraries(" << name << " PRIVATE gc_cuda)\n";
    }
  }
  o << "endif()\n";
  return o.str();
}

}  // namespace gc
