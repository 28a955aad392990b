# Sourced by the nccl_checks/*_test scripts: builds nccl_checks/NAME.cpp against the CUDA
# emulator and its NCCL over MPI into $work/NAME.
#
#   source build_check.sh; build_check NAME EMULATOR_DIR EMULATOR_LIBRARY WORK_DIR BLAS_LIBRARIES...
build_check() {
  local name=$1 emu_dir=$2 emu_lib=$3
  work=$4
  shift 4
  command -v mpicxx > /dev/null || { echo "${name}_test: mpicxx is missing (apt install libopenmpi-dev)" >&2; exit 1; }
  mkdir -p "$work"
  mpicxx -std=c++17 -O1 -fopenmp -w -DGC_CUDA_EMULATOR -DGC_HAVE_NCCL -I"$emu_dir" \
    "$emu_dir/nccl_checks/$name.cpp" "$emu_dir/src/nccl.cpp" "$emu_lib" "$@" -o "$work/$name"
}
