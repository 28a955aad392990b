# Sourced by the nccl_checks/*_test scripts: builds nccl_checks/NAME.cpp against the CUDA
# emulator and its NCCL over MPI into $work/NAME.
#
#   source build_check.sh; build_check NAME EMULATOR_DIR EMULATOR_LIBRARY WORK_DIR BLAS_LIBRARIES...
#   run_job ARG [SECONDS]
build_check() {
  local name=$1 emu_dir=$2 emu_lib=$3
  check_name=$name
  work=$4
  shift 4
  command -v mpicxx > /dev/null || { echo "${name}_test: mpicxx is missing (apt install libopenmpi-dev)" >&2; exit 1; }
  mkdir -p "$work"
  mpicxx -std=c++17 -O1 -fopenmp -w -DGC_CUDA_EMULATOR -DGC_HAVE_NCCL -I"$emu_dir" \
    "$emu_dir/nccl_checks/$name.cpp" "$emu_dir/src/nccl.cpp" "$emu_lib" "$@" -o "$work/$name"
}

# Runs the built check on 2 ranks with ARG, its output in $work/out.txt, within SECONDS (default
# 60). A job that outlives them gets SIGTERM, then SIGKILL 5 s later: Open MPI's teardown after an
# MPI_Abort has been seen to hang on a loaded machine (CI stop 58: mpirun outlived `timeout`'s
# SIGTERM until ctest's 300 s), and a check must end either way. Returns mpirun's status (124 or
# 137 when killed), and says so on stderr when it was killed.
run_job() {
  local arg=$1 seconds=${2:-60} rc=0
  timeout -k 5 "$seconds" mpirun --allow-run-as-root --oversubscribe -np 2 "$work/$check_name" "$arg" \
    > "$work/out.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "${check_name}_test: the job with '$arg' did not end within $seconds s and was killed (status $rc)" >&2
  fi
  return "$rc"
}
