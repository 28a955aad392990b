# scripts/gpu_kit prepare (sourced by scripts/gpu_kit): builds the kit on a machine with
# gcompile's build dependencies and no GPU. Every failure names the file or step and exits non-zero.
kit=gpu-kit
build=build
mode=gpu
budget_s=560
timeout_s=600
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) [ $# -ge 2 ] || die "--kit needs a directory"; kit=$2; shift 2 ;;
    --emulate) mode=emulated; shift ;;
    --budget-s) [ $# -ge 2 ] || die "--budget-s needs seconds"; budget_s=$2; shift 2 ;;
    -j|--jobs) [ $# -ge 2 ] || die "--jobs needs a number"; JOBS=$2; shift 2 ;;
    --build-dir) [ $# -ge 2 ] || die "--build-dir needs a directory"; build=$2; shift 2 ;;
    *) die "prepare: unknown argument '$1' (see --help)" ;;
  esac
done
[[ $budget_s =~ ^[0-9]+$ ]] && [ "$budget_s" -ge 60 ] && [ "$budget_s" -le 570 ] ||
  die "--budget-s must be 60 to 570 seconds (one device call is at most 600)"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer"
# The kit is ours to replace, but a folder that is not a kit (no kit.json, and not a prepare of
# ours that stopped before writing it: .prepare_incomplete) is the user's.
if [ -e "$kit" ] && [ ! -f "$kit/kit.json" ] && [ ! -f "$kit/.prepare_incomplete" ] &&
  [ -n "$(ls -A "$kit" 2> /dev/null)" ]; then
  die "$kit exists and is not a GPU kit (no kit.json); choose another --kit"
fi
rm -rf "$kit"
mkdir -p "$kit/trees" "$kit/reference" "$kit/bin" "$kit/specs" || die "cannot create $kit"
touch "$kit/.prepare_incomplete"  # until the end: a failed prepare's folder may be replaced
scratch=$build/gpu-kit-scratch/$(basename "$kit")
rm -rf "$scratch"
mkdir -p "$scratch"
log=$scratch/prepare.log
: > "$log"
step() {  # DESCRIPTION CMD... : runs CMD with its output in the log; dies naming the step
  local what=$1
  shift
  local start=$SECONDS
  echo "\$ $*" >> "$log"
  "$@" >> "$log" 2>&1 || { tail -n 15 "$log" >&2; die "$what failed (log: $log)"; }
  echo "($what: $((SECONDS - start)) s)" >> "$log"
}

if [ "$mode" = gpu ] && ! command -v nvcc > /dev/null; then
  die "prepare needs nvcc (the CUDA toolkit) for the kernel tests and the attention bench; --emulate needs none"
fi

# gcompile, and the test binary of this mode.
GCOMPILE=${GCOMPILE_BIN:-$build/compiler/gcompile}
tests_target=gcompile_cuda_tests
[ "$mode" = gpu ] || tests_target=gcompile_cuda_emulated_tests
targets=(gcompile "$tests_target")
[ "$mode" = gpu ] || targets+=(gcompile_cuda_emulator)
if [ ! -f "$build/CMakeCache.txt" ]; then
  gen=(); if command -v ninja > /dev/null; then gen=(-G Ninja); fi
  step "configuring $build/" cmake -S . -B "$build" "${gen[@]}"
fi
note "building ${targets[*]} (log $log)"
step "building ${targets[*]}" cmake --build "$build" --target "${targets[@]}" -j "$JOBS"
[ -x "$GCOMPILE" ] || die "no $GCOMPILE after the build"

py manifest "$kit" "$mode" "$(git rev-parse --short HEAD 2> /dev/null || echo unknown)" || die "cannot write $kit/kit.json"

# The trees, each with its token files; under --emulate the training trees from small-batch
# overlays of their specs (a parity tree runs its own batch of 2 sequences of at most 96 tokens,
# so its spec is used as it is, and its specialization is the cached one of CudaEmulatedTree.*).
spec_for() {  # NAME SPEC ROLE -> the spec to generate from
  if [ "$mode" = gpu ] || [ "$3" = parity ]; then echo "$2"; else py overlay "$2" "$kit/specs/$1.toml" "$1" && echo "$kit/specs/$1.toml"; fi
}
while read -r name spec role data_from; do
  [ -f "$spec" ] || die "the kit's spec $spec is missing"
  gen_spec=$(spec_for "$name" "$spec" "$role") || die "could not write the overlay of $spec"
  note "generating $kit/trees/$name from $gen_spec"
  step "gcompile $gen_spec" "$GCOMPILE" "$gen_spec" --no-build -o "$kit/trees/$name"
  if [ "$data_from" = - ]; then
    copied=$(py copy-data "$kit/trees/$name") || die "$name: $copied"
    echo "$name: data $copied" >> "$log"
  fi
done < <(py trees "$mode")

# The bench trees (bench/gpu_vs_torch --prepare writes them, their synthetic tokens inside).
mapfile -t bench < <(py bench-specs "$kit"; py bench-specs "$kit" moe_bench_specs)
note "generating the bench trees: ${bench[*]}"
GCOMPILE=$GCOMPILE step "bench/gpu_vs_torch --prepare" bench/gpu_vs_torch --prepare --trees "$kit/trees" \
  --specs "${bench[*]}"

# The CPU references: tiny and moe_tiny trained here (CPU backend, OpenBLAS) on the kit's token
# files, copies of the trees built outside the kit, so no binary of this machine travels.
reference() {  # NAME STEPS
  local name=$1 steps=$2 tree=$scratch/cpu_$1 data=$kit/trees/$1/data
  cp -r "$kit/trees/$name" "$tree" || die "cannot copy $kit/trees/$name"
  note "CPU reference: $name, $steps steps"
  # The tree's Quick build (-Og): half the compile time, the same losses bit for bit on these
  # small specs (OpenBLAS does the GEMMs; templates/CMakeLists.txt.in). Configured as gcompile
  # --cpu-only --quick-build configures (MPI where found), so ccache serves the runtime's objects
  # that other trees of this machine compiled (CI: the tests').
  step "configuring $tree (CPU)" cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Quick -DGC_CUDA=OFF
  step "building $tree (CPU)" cmake --build "$tree/build" --target train -j "$JOBS"
  step "the CPU run of $name" "$tree/train" --device cpu --steps "$steps" --log-every 1 --no-checkpoint \
    --out "$scratch/run_$name" --train-data "$data/train.bin" --val-data "$data/val.bin"
  step "the reference of $name" py reference "$scratch/run_$name/metrics.jsonl" "$kit/reference/${name}_cpu.json" "$steps"
}
reference tiny "$(py kit-value "$kit" steps.tiny)"
reference moe_tiny "$(py kit-value "$kit" steps.moe_tiny)"

# The kernel tests: the portable binary (GPU) or the emulated one; the attention micro-benchmark
# prebuilt for Hopper (sm_90a), so the GPU machine spends no time compiling it.
tests_bin=$build/tests/$tests_target
[ -x "$tests_bin" ] || die "no $tests_bin after the build"
if [ "$mode" = gpu ]; then
  step "the portability check of $tests_bin" bash tests/cuda/portable_binary_test "$tests_bin"
  step "copying $tests_bin" cp "$tests_bin" "$kit/bin/gcompile_cuda_tests"
  strip "$kit/bin/gcompile_cuda_tests" 2>> "$log" || true
  note "compiling bench/attention/attention_bench.cu for sm_90a"
  step "nvcc attention_bench.cu" nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -Xcudafe --diag_suppress=20012 -I templates -I . bench/attention/attention_bench.cu -o "$kit/bin/attention_bench"
  note "compiling bench/gemm/gemm_candidates.cu for sm_90a"
  step "nvcc gemm_candidates.cu" nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -Xcudafe --diag_suppress=20012 -I templates -I . bench/gemm/gemm_candidates.cu -lcublasLt -o "$kit/bin/gemm_candidates"
  strip "$kit/bin/gemm_candidates" 2>> "$log" || true
  note "compiling bench/moe/expert_gemm_bench.cu for sm_90a"
  step "nvcc expert_gemm_bench.cu" nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -Xcudafe --diag_suppress=20012 -I templates -I . bench/moe/expert_gemm_bench.cu -lcublasLt -o "$kit/bin/expert_gemm_bench"
  strip "$kit/bin/expert_gemm_bench" 2>> "$log" || true
  note "compiling bench/moe/expert_route_bench.cu for sm_90a"
  step "nvcc expert_route_bench.cu" nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
    -Xcudafe --diag_suppress=20012 -I templates -I . bench/moe/expert_route_bench.cu -o "$kit/bin/expert_route_bench"
  strip "$kit/bin/expert_route_bench" 2>> "$log" || true
else
  # An emulated kit runs where it was prepared: links to the build, not copies.
  step "linking $tests_bin" ln -s "$(realpath "$tests_bin")" "$kit/bin/gcompile_cuda_tests"
  step "linking the emulator" ln -s "$(realpath "$build/tests/libgcompile_cuda_emulator.a")" "$kit/bin/"
fi

# Each token file, and each file several trees share, once: KIT/store/<sha256> and its index; a
# GPU kit's run links them back into the trees (an emulated kit links them now). `py sizes KIT`
# says what takes the space.
stored=$(py store "$kit" "$mode") || die "storing the trees' shared files: $stored"
note "store: $stored"
py sizes "$kit" >> "$log" 2>&1

# The run script and the one command to make on the GPU machine.
cat > "$kit/run" << 'EOF'
#!/usr/bin/env bash
# The GPU kit's run (scripts/gpu_kit run --kit THIS_FOLDER): see scripts/gpu_kit --help.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
for root in "$here" "$PWD"; do  # the repository above the kit, else the one we are in
  while [ "$root" != / ] && [ ! -f "$root/scripts/gpu_kit" ]; do root=$(dirname "$root"); done
  [ ! -f "$root/scripts/gpu_kit" ] || break
done
[ -f "$root/scripts/gpu_kit" ] || { echo "gpu-kit/run: no scripts/gpu_kit above $here or $PWD" >&2; exit 2; }
exec bash "$root/scripts/gpu_kit" run --kit "$here" "$@"
EOF
chmod +x "$kit/run"
cmd=$(py command "$kit" "$budget_s" "$timeout_s") || die "$cmd"
size=$(py check-kit "$kit") || die "$size"
rm -f "$kit/.prepare_incomplete"
note "prepared $kit ($size, $mode): $(grep -c . < <(py trees "$mode")) trees + ${#bench[@]} bench tree(s), references, kernel tests"
note "on the GPU machine: $cmd   (carry [\"$kit\"], timeout_s $timeout_s; $kit/command.txt)"
exit 0
