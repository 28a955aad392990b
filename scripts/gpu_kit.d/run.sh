# scripts/gpu_kit run (sourced by scripts/gpu_kit; called as KIT/run): the rows, in order of value,
# each capped, all within --budget-s. Every row lands in OUT/summary.md as soon as it is known.
kit=""
budget_s=560
out_dir=${OUT:-}
only=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kit) [ $# -ge 2 ] || die "--kit needs a directory"; kit=$2; shift 2 ;;
    --budget-s) [ $# -ge 2 ] || die "--budget-s needs seconds"; budget_s=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out_dir=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || die "--only needs row names"; only=",$2,"; shift 2 ;;
    -j|--jobs) [ $# -ge 2 ] || die "--jobs needs a number"; JOBS=$2; shift 2 ;;
    *) die "run: unknown argument '$1' (see scripts/gpu_kit --help)" ;;
  esac
done
[ -n "$kit" ] || die "run: --kit is missing (call KIT/run)"
[ -f "$kit/kit.json" ] || die "$kit/kit.json is missing: run scripts/gpu_kit prepare first"
kit=$(cd "$kit" && pwd)  # absolute: the emulated builds compile from inside each tree
[[ $budget_s =~ ^[0-9]+$ ]] || die "--budget-s needs a whole number of seconds"
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive integer"
out_dir=${out_dir:-gpu-kit-out}
mode=$(py kit-value "$kit" mode) || die "$mode"
emulate=${GC_GPU_KIT_EMULATE:-0}
if [ "$emulate" = 1 ] && [ "$mode" != emulated ]; then die "GC_GPU_KIT_EMULATE=1 needs a kit from prepare --emulate"; fi
if [ "$emulate" != 1 ] && [ "$mode" != gpu ]; then die "$kit was prepared with --emulate: run it with GC_GPU_KIT_EMULATE=1"; fi
trees=$kit/trees
STEPS_TINY=$(py kit-value "$kit" steps.tiny)
STEPS_MOE=$(py kit-value "$kit" steps.moe_tiny)
STEPS_MEMCHECK=$(py kit-value "$kit" steps.memcheck)
TOL_PARITY=$(py kit-value "$kit" tolerances.parity)
TOL_PARITY_BF16=$(py kit-value "$kit" tolerances.parity_bf16)
TOL_CURVE=$(py kit-value "$kit" tolerances.cpu_cuda)
TOL_BF16=$(py kit-value "$kit" tolerances.bf16)
PARITY_TREES=(parity_plain parity_headwise parity_elementwise parity_moe parity_hd128 parity_wgmma_hd64 parity_wgmma_hd128
  parity_wgmma_moe)

mkdir -p "$out_dir" || die "cannot create $out_dir"
rm -f "$out_dir/summary.md" "$out_dir/summary.json" "$out_dir/results.tgz"
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_kit.XXXXXX")
logs=$work/results
mkdir -p "$logs"
ROWS=$work/rows.tsv
FACTS=$work/facts.json
: > "$ROWS"
bg_pids=()
need=()  # "TREE:TARGET": the binaries this run builds (into the trees: a tree's CMake puts them there)
cleanup() {  # the kit leaves as it came: no build directory, no binary of this machine, no store link
  local p n
  for p in "${bg_pids[@]}"; do kill "$p" 2> /dev/null; done
  for n in "${need[@]}"; do rm -f "$trees/${n%%:*}/${n##*:}"; done
  py unmaterialize "$kit" "$work/stored_paths.txt"
  rm -rf "$work"
}
trap cleanup EXIT
# The files the trees share travel once, in KIT/store (scripts/gpu_kit.d/kit_data.py): their paths
# in the trees come back now, as hard links, before anything reads a tree.
stored=$(py materialize "$kit" "$work/stored_paths.txt") || die "$kit/store: $stored"

# ---------------------------------------------------------------------------------------------
# Rows, the budget, capped steps.
# ---------------------------------------------------------------------------------------------
failed=0
wanted() { [ -z "$only" ] || [[ $only == *",$1,"* ]]; }
publish() {  # the summary and the logs, now (a run cut short keeps what it has)
  py summary "$ROWS" "$out_dir" "$FACTS" "$logs"
  tar -czf "$out_dir/results.tgz.part" -C "$work" results 2> /dev/null && mv "$out_dir/results.tgz.part" "$out_dir/results.tgz"
}
row() {  # NAME RESULT DETAIL [SECONDS]
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${4:--}" "${3//$'\t'/ }" >> "$ROWS"
  [ "$2" != FAIL ] || failed=$((failed + 1))
  note "$1: $2 - $3"
  publish
}
remaining() { echo $((budget_s - SECONDS)); }
cap() {  # CAP -> seconds a step may take now (0: none left); 10 s are kept for the summary
  local left=$(($(remaining) - 10))
  if [ "$left" -le 0 ]; then echo 0; elif [ "$1" -lt "$left" ]; then echo "$1"; else echo "$left"; fi
}
took=0
timed() {  # CAP LOG CMD... : CMD under a timeout, its output in LOG; sets took
  local limit=$1 log=$2 start=$SECONDS rc
  shift 2
  echo "\$ $*" >> "$log"
  took=0
  if [ "$limit" -le 0 ]; then echo "(not run: out of time)" >> "$log"; return 124; fi
  timeout --kill-after=10 "$limit" "$@" >> "$log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then echo "(killed at its cap of ${limit} s)" >> "$log"; fi
  return "$rc"
}
why() {  # RC LOG -> why a step failed, in a few words
  if [ "$1" -eq 124 ] || [ "$1" -eq 137 ]; then echo "killed at its cap (${took} s)"; return; fi
  echo "exit $1: $(grep -v '^\$ ' "$2" 2> /dev/null | grep -v '^\s*$' | tail -n 1 | cut -c1-160)"
}

# ---------------------------------------------------------------------------------------------
# env: the machine, in facts
# ---------------------------------------------------------------------------------------------
version_of() {  # CMD... -> the last version number on the first line of CMD's output that has one
  local v
  v=$("$@" 2>&1 | grep -m 1 -oE '[0-9]+\.[0-9]+(\.[0-9]+)?' | tail -n 1)
  echo "${v:-not found}"
}
gpu="" arch=""
if [ "$emulate" = 1 ]; then
  gpu="CUDA emulator (GC_GPU_KIT_EMULATE=1, $(nproc) CPU cores)"
else
  if ! command -v nvidia-smi > /dev/null 2>&1 || ! nvidia-smi -L > /dev/null 2>&1; then
    die "no NVIDIA GPU here (nvidia-smi finds none); run the kit on a GPU machine, or GC_GPU_KIT_EMULATE=1 with an emulated kit"
  fi
  gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader | head -n 1)
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')
  arch=${cc/./}
  [ "${cc%%.*}" != 9 ] || arch=${arch}a  # Hopper: the sm_90a target
fi
torch_facts=$(python3 -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)' 2> /dev/null ||
  python3 -c 'import torch; print(torch.__version__, torch.version.cuda, "none")' 2> /dev/null || echo "none none none")
read -r torch_v torch_cuda triton_v <<< "$torch_facts"
sanitizer=$(command -v compute-sanitizer 2> /dev/null || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -n "$sanitizer" ] || { [ ! -x "$c" ] || sanitizer=$c; }
done
py facts "$FACTS" "gpu=$gpu" "date=$(date '+%Y-%m-%d %H:%M:%S %Z')" "kit=$kit ($mode, $(py kit-value "$kit" git_commit))" \
  "nvcc=$(version_of nvcc --version)" "cmake=$(version_of cmake --version)" "g++=$(version_of g++ --version)" \
  "python3=$(version_of python3 --version)" "torch=$torch_v (CUDA $torch_cuda)" "triton=$triton_v" \
  "compute-sanitizer=${sanitizer:-not found}" "budget_s=$budget_s" "cuda_arch=${arch:-emulated}" "store=$stored"
if wanted env; then
  { nvidia-smi 2>&1 || true; nvcc --version 2>&1 || true; cmake --version 2>&1 || true; } > "$logs/env.log"
  row env PASS "$gpu; nvcc $(version_of nvcc --version); cmake $(version_of cmake --version); torch $torch_v; triton $triton_v" 0
fi

# Libraries the prebuilt test binary loads: the toolkit's cuBLASLt, else the wheel's.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         "$(python3 -c 'import nvidia.cublas as m; print(list(m.__path__)[0] + "/lib")' 2> /dev/null)"; do
  [ -z "$d" ] || [ ! -d "$d" ] || export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d
done

# ---------------------------------------------------------------------------------------------
# build: the trees each row needs, in the background (kernels run meanwhile)
# ---------------------------------------------------------------------------------------------
add_need() { local n; for n in "${need[@]}"; do [ "$n" != "$1" ] || return 0; done; need+=("$1"); }
# The wgmma parity trees run on Hopper only (sm_90a); under the emulator everywhere.
hopper_or_emulated() { [ "$emulate" = 1 ] || [ "$arch" = 90a ]; }
not_hopper="needs a compute capability 9.0 GPU (wgmma; this is ${cc:-?})"  # the SKIP of the wgmma rows elsewhere
for t in "${PARITY_TREES[@]}"; do
  case "$t" in parity_wgmma_*) hopper_or_emulated || continue ;; esac
  wanted "$t" && add_need "$t:parity"
done
{ wanted train_fp32 || wanted repeat || wanted memcheck || wanted profile; } && add_need tiny:train
wanted train_bf16 && add_need tiny_bf16:train
wanted moe_train && add_need moe_tiny:train
metrics_tree=metrics_0.1b
[ "$emulate" = 0 ] || metrics_tree=tiny  # a 0.1B step takes minutes under the emulator
wanted metrics_overhead && add_need "$metrics_tree:train"
{ wanted moe_3b || wanted moe_3b_profile || wanted moe_3b_wgmma; } && [ "$emulate" = 0 ] && add_need moe_3b:train  # 57 GiB of state: a GPU only
mapfile -t bench_trees < <(py bench-trees "$kit")                    # the bench row's
mapfile -t moe_bench_trees < <(py bench-trees "$kit" moe_bench_specs)  # the moe_bench row's
# GC_KIT_BENCH_SPECS=PATTERN: the bench row runs (and builds) only the specs whose name contains it.
bench_only=${GC_KIT_BENCH_SPECS:-}
if wanted bench; then for b in "${bench_trees[@]}"; do [[ $b == *"$bench_only"* ]] && add_need "$b:train"; done; fi
if wanted moe_bench && [ "$emulate" = 0 ]; then for b in "${moe_bench_trees[@]}"; do add_need "$b:train"; done; fi

build_tree() {  # TREE TARGET DEADLINE -> TREE/TARGET, with nvcc for this GPU (or against the emulator)
  local tree=$trees/$1 target=$2 left=$(($3 - SECONDS)) gen=()
  [ "$left" -gt 0 ] || { echo "out of time"; return 124; }
  if [ "$emulate" = 1 ]; then
    emulated_build "$tree" "$target" "$left"
    return
  fi
  if command -v ninja > /dev/null; then gen=(-G Ninja); fi
  timeout "$left" cmake -S "$tree" -B "$work/build/$1" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGC_CCACHE=OFF \
    -DGC_MPI=OFF "-DGC_CUDA_ARCHITECTURES=$arch" || return
  left=$(($3 - SECONDS))
  [ "$left" -gt 0 ] || return 124
  timeout "$left" cmake --build "$work/build/$1" --target "$target" -j "$tree_jobs"
}
emulated_build() {  # TREE TARGET SECONDS: the tree's CUDA backend compiled by g++ against tests/cuda_emulator
  local tree=$1 target=$2 objects emu=$ROOT/tests/cuda_emulator sources
  objects=$work/objects/$(basename "$1")_$2
  mkdir -p "$objects"
  if [ "$target" = parity ]; then
    sources=("$tree/src/parity_main.cu" "$tree/src/experiment.cpp" "$tree/src/plan_init.cpp" "$tree/runtime/comm.cpp")
  else
    sources=("$tree/src/engine/cuda_engine.cu" "$tree"/runtime/*.cpp "$tree/src/experiment.cpp" "$tree/src/plan_init.cpp"
             "$tree/src/train_main.cpp")
  fi
  export GC_EMU_FLAGS="-std=c++17 -O1 -fopenmp -w -DGC_CUDA_EMULATOR -DGC_HAVE_CUDA -DGC_NO_CBLAS -I$emu -I$tree/src -I$tree -I$tree/runtime/third_party"
  export GC_EMU_OBJECTS=$objects GC_EMU_TREE=$tree GC_EMU_LAUNCHER=
  # Through ccache where installed (CI): compiled from inside the tree with paths relative to
  # it, the trees share the objects of the sources they share (runtime/).
  command -v ccache > /dev/null && GC_EMU_LAUNCHER="env CCACHE_BASEDIR=$tree CCACHE_NOHASHDIR=1 ccache"
  printf '%s\n' "${sources[@]}" | timeout "$3" xargs -P "$tree_jobs" -I{} \
    bash -c 'cd "$GC_EMU_TREE" && $GC_EMU_LAUNCHER g++ $GC_EMU_FLAGS -x c++ -c "$1" -o "$GC_EMU_OBJECTS/$(basename "$1").o"' _ {} || return
  g++ -fopenmp "$objects"/*.o "$kit/bin/libgcompile_cuda_emulator.a" -lz -o "$tree/$target"
}
tree_jobs=$(( JOBS / (${#need[@]} > 0 ? ${#need[@]} : 1) + 1 ))  # nvcc of one file dominates a tree
[ "$emulate" = 0 ] || tree_jobs=$JOBS  # the emulated builds run one after another
build_cap=$(cap "$([ "$emulate" = 1 ] && echo 900 || echo 240)")  # emulated: g++ builds on a loaded CI machine
build_start=$SECONDS
build_deadline=$((SECONDS + build_cap))
mkdir -p "$logs/build"
build_all() {
  local n pids=()
  for n in "${need[@]}"; do
    local t=${n%%:*} g=${n##*:}
    rm -f "$trees/$t/$g"
    if [ "$emulate" = 1 ]; then
      build_tree "$t" "$g" "$build_deadline" > "$logs/build/$t.$g.log" 2>&1
    else
      build_tree "$t" "$g" "$build_deadline" > "$logs/build/$t.$g.log" 2>&1 &
      pids+=($!)
    fi
  done
  for n in "${pids[@]}"; do wait "$n"; done
}
if [ ${#need[@]} -gt 0 ] && [ "$build_cap" -le 0 ]; then
  row build SKIP "out of time (--budget-s $budget_s)"
  for n in "${need[@]}"; do rm -f "$trees/${n%%:*}/${n##*:}"; done  # no binary of an earlier run stands in
  need=()
elif [ ${#need[@]} -gt 0 ]; then
  note "building ${#need[@]} tree target(s) (cap ${build_cap} s): ${need[*]}"
  build_all > /dev/null 2>&1 &
  build_pid=$!
  bg_pids+=("$build_pid")
fi
built() { [ -x "$trees/$1/$2" ]; }

# ---------------------------------------------------------------------------------------------
# kernels: every CUDA kernel against the CPU kernels (prebuilt, portable)
# ---------------------------------------------------------------------------------------------
if wanted kernels; then
  tests_bin=$kit/bin/gcompile_cuda_tests
  filter=()
  # Emulated: a sample (the whole emulated suite runs in ctest already).
  [ "$emulate" = 0 ] || filter=(--gtest_filter='CudaDevice.*:CudaRows.Embedding*:CudaOptim.AdamWMatchesCpuFp32Working')
  timed "$(cap 150)" "$logs/kernels.log" "$tests_bin" "${filter[@]}" --gtest_output="json:$logs/kernels.json"
  rc=$?
  if detail=$(py gtest "$logs/kernels.json" "$emulate") && [ "$rc" -eq 0 ]; then row kernels PASS "$detail" "$took"
  elif [ "$rc" -eq 124 ] && [ "$took" -eq 0 ]; then row kernels SKIP "out of time"
  else row kernels FAIL "$detail ($(why "$rc" "$logs/kernels.log"))" "$took"; fi
fi

if [ ${#need[@]} -gt 0 ]; then
  wait "$build_pid"
  missing=()
  for n in "${need[@]}"; do built "${n%%:*}" "${n##*:}" || missing+=("$n"); done
  if [ ${#missing[@]} -eq 0 ]; then
    row build PASS "${#need[@]} targets for ${arch:-the emulator}: ${need[*]}" $((SECONDS - build_start))
  else
    first=$logs/build/${missing[0]%%:*}.${missing[0]##*:}.log
    row build FAIL "not built: ${missing[*]}; ${missing[0]}: $(grep -m 1 -iE 'error|out of time' "$first" | cut -c1-160)" \
      $((SECONDS - build_start))
  fi
fi

# ---------------------------------------------------------------------------------------------
# parity: the whole model, CUDA against CPU (logits, loss, every gradient): fp32, and bf16 on
# Hopper's wgmma attention kernels (parity_wgmma_*: --attention wgmma, bf16's tolerance)
# ---------------------------------------------------------------------------------------------
for t in "${PARITY_TREES[@]}"; do
  wanted "$t" || continue
  limit=$(cap "$([ "$emulate" = 1 ] && echo 120 || echo 45)")
  tol=$TOL_PARITY kernels=(--attention auto) named=""
  case "$t" in
    parity_wgmma_*)
      hopper_or_emulated || { row "$t" SKIP "$not_hopper"; continue; }
      tol=$TOL_PARITY_BF16 kernels=(--attention wgmma) named="wgmma attention"
      [ "$t" != parity_wgmma_moe ] || { kernels+=(--experts wgmma); named+=",wgmma experts"; } ;;
  esac
  if ! built "$t" parity; then row "$t" SKIP "$t/parity not built"; continue; fi
  [ "$limit" -gt 0 ] || { row "$t" SKIP "out of time"; continue; }
  timed "$limit" "$logs/$t.log" "$trees/$t/parity" --tolerance "$tol" "${kernels[@]}"
  rc=$?
  if detail=$(py parity "$logs/$t.log" "$tol" "$named") && [ "$rc" -eq 0 ]; then row "$t" PASS "$detail" "$took"
  else row "$t" FAIL "$detail ($(why "$rc" "$logs/$t.log"))" "$took"; fi
done

# ---------------------------------------------------------------------------------------------
# Training runs on the GPU, against the CPU references computed by prepare.
# ---------------------------------------------------------------------------------------------
cuda_train() {  # TREE DATA_TREE RUN STEPS CAP [EXTRA...]: one run; its metrics.jsonl kept in the results
  local tree=$1 data=$trees/$2/data run=$3 steps=$4 limit=$5 rc
  shift 5
  mkdir -p "$logs/runs"
  timed "$limit" "$logs/$run.log" "$trees/$tree/train" --device cuda --steps "$steps" --log-every 1 --no-checkpoint \
    --out "$work/runs/$run" --train-data "$data/train.bin" --val-data "$data/val.bin" "$@"
  rc=$?
  cp "$work/runs/$run/metrics.jsonl" "$logs/runs/$run.metrics.jsonl" 2> /dev/null
  return "$rc"
}
train_row() {  # ROW TREE DATA_TREE RUN STEPS CAP VERDICT ARGS... : one training row
  local name=$1 tree=$2 data=$3 run=$4 steps=$5 limit rc detail verdict=$7
  limit=$(cap "$6")
  shift 7
  if ! built "$tree" train; then row "$name" SKIP "$tree/train not built"; return; fi
  [ "$limit" -gt 0 ] || { row "$name" SKIP "out of time"; return; }
  cuda_train "$tree" "$data" "$run" "$steps" "$limit"
  rc=$?
  if [ "$rc" -ne 0 ]; then row "$name" FAIL "$(why "$rc" "$logs/$run.log")" "$took"; return; fi
  if detail=$(py "$verdict" "$@" "$logs/runs/$run.metrics.jsonl" "$steps" ${TOL:+"$TOL"}); then
    row "$name" PASS "$detail" "$took"
  else
    row "$name" FAIL "$detail" "$took"
  fi
}
long=$([ "$emulate" = 1 ] && echo 120 || echo 60)
wanted train_fp32 && TOL=$TOL_CURVE train_row train_fp32 tiny tiny tiny_fp32 "$STEPS_TINY" "$long" curve \
  "$kit/reference/tiny_cpu.json"
wanted train_bf16 && TOL=$TOL_BF16 train_row train_bf16 tiny_bf16 tiny tiny_bf16 "$STEPS_TINY" "$long" final-loss \
  "$kit/reference/tiny_cpu.json"
if wanted repeat; then
  if [ ! -f "$logs/runs/tiny_fp32.metrics.jsonl" ]; then
    cuda_train tiny tiny tiny_fp32 "$STEPS_TINY" "$(cap "$long")" > /dev/null 2>&1  # --only repeat
  fi
  TOL="" train_row repeat tiny tiny tiny_fp32_again "$STEPS_TINY" "$long" repeat "$logs/runs/tiny_fp32.metrics.jsonl"
fi
wanted moe_train && TOL=$TOL_CURVE train_row moe_train moe_tiny moe_tiny moe_tiny "$STEPS_MOE" "$long" curve \
  "$kit/reference/moe_tiny_cpu.json"

# train --profile STEPS on TREE (tokens from DATA_DIR) as row ROW: RUN/profile.json checked
# (py profile) and kept in the results as runs/ROW.json, the printed table named by LABEL.
profile_row() {  # ROW TREE DATA_DIR STEPS LABEL LIMIT
  local name=$1 tree=$2 data=$3 steps=$4 label=$5 limit=$6 rc detail verdict
  mkdir -p "$logs/runs"
  timed "$limit" "$logs/$name.log" "$trees/$tree/train" --device cuda --profile "$steps" --no-metrics --no-checkpoint \
    --out "$work/runs/$name" --train-data "$data/train.bin" --val-data "$data/val.bin"
  rc=$?
  detail=$(py profile "$work/runs/$name" "$logs/$name.log" "$logs/runs/$name.json" "$label")
  verdict=$?
  if [ "$rc" -ne 0 ]; then row "$name" FAIL "$(why "$rc" "$logs/$name.log")" "$took"
  elif [ "$verdict" -eq 0 ]; then row "$name" PASS "$detail" "$took"
  else row "$name" FAIL "$detail" "$took"; fi
}

# ---------------------------------------------------------------------------------------------
# profile: train --profile on tiny (fp32): 2 warm-up steps, 3 profiled, the time of a step by
# category (profile.json, "gcompile-profile-1") and the table train prints
# ---------------------------------------------------------------------------------------------
if wanted profile; then
  limit=$(cap "$long")
  help=$(! built tiny train || "$trees/tiny/train" --help 2>&1)
  if ! built tiny train; then row profile SKIP "tiny/train not built"
  elif ! grep -q -- '--profile' <<< "$help"; then row profile SKIP "tiny/train has no --profile (a tree of before it)"
  elif [ "$limit" -le 0 ]; then row profile SKIP "out of time"
  else
    profile_row profile tiny "$trees/tiny/data" 3 "tiny fp32" "$limit"
  fi
fi

# ---------------------------------------------------------------------------------------------
# metrics_overhead: the default [metrics] (reduced on the GPU) against --no-metrics, same tree
# ---------------------------------------------------------------------------------------------
if wanted metrics_overhead; then
  limit=$(cap 150)
  steps=$(py kit-value "$kit" steps.metrics)
  data_args=()
  [ ! -f "$trees/$metrics_tree/data/train.bin" ] ||
    data_args=(--train-data "$trees/$metrics_tree/data/train.bin" --val-data "$trees/$metrics_tree/data/val.bin")
  if ! built "$metrics_tree" train; then row metrics_overhead SKIP "$metrics_tree/train not built"
  elif [ "$limit" -le 0 ]; then row metrics_overhead SKIP "out of time"
  else
    mkdir -p "$logs/runs"
    row_start=$SECONDS detail=""
    timed $((limit / 2)) "$logs/metrics_overhead.log" "$trees/$metrics_tree/train" --device cuda --steps "$steps" \
      --log-every 10 --no-checkpoint --out "$work/runs/metrics_on" "${data_args[@]}" &&
      timed $((limit / 2)) "$logs/metrics_overhead.log" "$trees/$metrics_tree/train" --device cuda --steps "$steps" \
        --log-every 10 --no-checkpoint --no-metrics --out "$work/runs/metrics_off" "${data_args[@]}"
    rc=$?
    took=$((SECONDS - row_start))
    cp "$work/runs/metrics_on/metrics.jsonl" "$logs/runs/metrics_on.metrics.jsonl" 2> /dev/null
    cp "$work/runs/metrics_off/metrics.jsonl" "$logs/runs/metrics_off.metrics.jsonl" 2> /dev/null
    if [ "$rc" -eq 0 ] && detail=$(py metrics-overhead "$logs/runs/metrics_on.metrics.jsonl" \
                                      "$logs/runs/metrics_off.metrics.jsonl"); then
      row metrics_overhead PASS "$metrics_tree, $steps steps: $detail" "$took"
    else row metrics_overhead FAIL "${detail:-} ($(why "$rc" "$logs/metrics_overhead.log"))" "$took"; fi
  fi
fi

# A micro-benchmark's binary: the kit's, prebuilt for sm_90a, or compiled here for another GPU.
bench_binary() {  # NAME SOURCE LOG [LIBS...] -> prints the binary's path
  local name=$1 source=$2 log=$3
  shift 3
  if [ "$arch" = 90a ]; then echo "$kit/bin/$name"; return; fi
  timed "$(cap 60)" "$log" nvcc -std=c++17 -O3 -arch=sm_$arch --expt-relaxed-constexpr -Xcudafe --diag_suppress=20012 \
    -I templates -I . "$source" "$@" -o "$work/$name" >&2
  echo "$work/$name"
}

# ---------------------------------------------------------------------------------------------
# moe_3b: the committed specs/moe_3b.toml (4 micro-batches a step) on the GPU: tokens/s, MFU on
# active FLOPs, device peak against the plan, routing records (scripts/gpu_kit.d/kit_moe.py)
# ---------------------------------------------------------------------------------------------
if wanted moe_3b; then
  if [ "$emulate" = 1 ]; then row moe_3b SKIP "needs a GPU (57 GiB of model state)"
  else
    # Its tokens: the 0.1B bench tree's synthetic ones (scripts/gpu_kit.py, TREES).
    TOL="" train_row moe_3b moe_3b "${bench_trees[0]:-none}" moe_3b "$(py kit-value "$kit" steps.moe_3b)" 150 moe-3b
  fi
fi

# moe_3b_wgmma: the same run on Hopper's wgmma kernels (train --attention wgmma --experts wgmma):
# the whole-step effect of the warpgroup-MMA attention and expert GEMMs, beside moe_3b's row
if wanted moe_3b_wgmma; then
  limit=$(cap 150)
  steps=$(py kit-value "$kit" steps.moe_3b)
  if [ "$emulate" = 1 ]; then row moe_3b_wgmma SKIP "needs a GPU (57 GiB of model state)"
  elif ! hopper_or_emulated; then row moe_3b_wgmma SKIP "$not_hopper"
  elif ! built moe_3b train; then row moe_3b_wgmma SKIP "moe_3b/train not built"
  elif [ "$limit" -le 0 ]; then row moe_3b_wgmma SKIP "out of time"
  else
    cuda_train moe_3b "${bench_trees[0]:-none}" moe_3b_wgmma "$steps" "$limit" --attention wgmma --experts wgmma
    rc=$?
    if [ "$rc" -ne 0 ]; then row moe_3b_wgmma FAIL "$(why "$rc" "$logs/moe_3b_wgmma.log")" "$took"
    elif detail=$(py moe-3b "$logs/runs/moe_3b_wgmma.metrics.jsonl" "$steps"); then row moe_3b_wgmma PASS "$detail" "$took"
    else row moe_3b_wgmma FAIL "$detail" "$took"; fi
  fi
fi

# moe_3b_profile: where moe_3b's step goes (train --profile 2: 2 warm-up steps, 2 profiled)
if wanted moe_3b_profile; then
  limit=$(cap 60)
  if [ "$emulate" = 1 ]; then row moe_3b_profile SKIP "needs a GPU (57 GiB of model state)"
  elif ! built moe_3b train; then row moe_3b_profile SKIP "moe_3b/train not built"
  elif [ "$limit" -le 0 ]; then row moe_3b_profile SKIP "out of time"
  else
    profile_row moe_3b_profile moe_3b "$trees/${bench_trees[0]:-none}/data" 2 "moe_3b bf16" "$limit"
  fi
fi

# ---------------------------------------------------------------------------------------------
# moe_experts: the expert projections at moe_3b's shapes, grouped kernels and per-expert cuBLASLt
# (bench/moe/expert_gemm_bench.cu) against torch._grouped_mm (bench/moe/grouped_mm_bench.py)
# ---------------------------------------------------------------------------------------------
if wanted moe_experts; then
  limit=$(cap 60)
  if [ "$emulate" = 1 ]; then row moe_experts SKIP "needs a GPU (73,728 routed rows; torch._grouped_mm)"
  elif [ "$limit" -le 0 ]; then row moe_experts SKIP "out of time"
  else
    row_start=$SECONDS
    bin=$(bench_binary expert_gemm_bench bench/moe/expert_gemm_bench.cu "$logs/moe_experts.log" -lcublasLt)
    timed "$(cap 30)" "$logs/moe_experts.log" bash -c "'$bin' --iters 20 --warmup 3 > '$logs/moe_experts_ours.jsonl'"
    rc=$?
    timed "$(cap 45)" "$logs/moe_experts.log" bash -c "python3 bench/moe/grouped_mm_bench.py --iters 20 --warmup 3 > '$logs/moe_experts_torch.jsonl'"
    rc=$((rc != 0 ? rc : $?))
    took=$((SECONDS - row_start))
    if detail=$(py moe-experts "$logs/moe_experts_ours.jsonl" "$logs/moe_experts_torch.jsonl") && [ "$rc" -eq 0 ]; then
      row moe_experts PASS "$detail" "$took"
    else row moe_experts FAIL "$detail ($(why "$rc" "$logs/moe_experts.log"))" "$took"; fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# moe_route: one MoE layer's expert-parallel route at moe_3b's shapes for EP 8, on one GPU: the
# slotted route's kernels against the host-planned route's wait (bench/moe/expert_route_bench.cu)
# ---------------------------------------------------------------------------------------------
if wanted moe_route; then
  limit=$(cap 30)
  if [ "$emulate" = 1 ]; then row moe_route SKIP "needs a GPU (the host-planned route's wait is the GPU's)"
  elif [ "$limit" -le 0 ]; then row moe_route SKIP "out of time"
  else
    row_start=$SECONDS
    bin=$(bench_binary expert_route_bench bench/moe/expert_route_bench.cu "$logs/moe_route.log")
    timed "$(cap 20)" "$logs/moe_route.log" bash -c "'$bin' --iters 30 --warmup 5 > '$logs/moe_route.jsonl'"
    rc=$?
    took=$((SECONDS - row_start))
    if detail=$(py moe-route "$logs/moe_route.jsonl") && [ "$rc" -eq 0 ]; then
      row moe_route PASS "$detail" "$took"
    else row moe_route FAIL "$detail ($(why "$rc" "$logs/moe_route.log"))" "$took"; fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# moe_bench: moe_3b (one micro-batch of 2 × 4096 tokens a step) against its PyTorch peer
# (bench/torch_moe.py: torch._grouped_mm, torch.compile, SDPA auto), both profiled
# ---------------------------------------------------------------------------------------------
if wanted moe_bench; then
  limit=$(cap 240)
  mapfile -t moe_specs < <(py bench-specs "$kit" moe_bench_specs)
  if [ "$emulate" = 1 ]; then row moe_bench SKIP "needs a GPU (moe_3b: 57 GiB of model state)"
  elif [ ${#moe_specs[@]} -eq 0 ]; then row moe_bench FAIL "the kit has no moe_bench_specs (prepare it again)"
  elif [ "$limit" -le 0 ]; then row moe_bench SKIP "out of time"
  else
    timed "$limit" "$logs/moe_bench.out" env GC_TREE_CUDA_ARCH="$arch" bench/gpu_vs_torch --trees "$trees" --no-build \
      --results "$logs/moe_bench" --log "$logs/moe_bench.log" --json "$logs/moe_bench.json" --specs "${moe_specs[*]}" \
      --steps 10 --warmup 3 --sdpa-backends auto --budget-s $((limit - 30 > 30 ? limit - 30 : 30))
    rc=$?
    if [ ! -f "$logs/moe_bench/rows.json" ] && [ -f "$logs/moe_bench/order.txt" ]; then
      bench/gpu_vs_torch --table-from "$logs/moe_bench" >> "$logs/moe_bench.out" 2>&1
    fi
    if detail=$(py bench-rows "$logs/moe_bench/rows.json") && [ "$rc" -eq 0 ]; then row moe_bench PASS "$detail" "$took"
    else row moe_bench FAIL "$detail ($(why "$rc" "$logs/moe_bench.out"))" "$took"; fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# attention: the flash kernels against SDPA flash, cuDNN and efficient (bf16; prebuilt for sm_90a)
# ---------------------------------------------------------------------------------------------
if wanted attention; then
  limit=$(cap 90)
  if [ "$emulate" = 1 ]; then row attention SKIP "needs a GPU (8 x 2048-token shapes, against torch's flash SDPA)"
  elif [ "$limit" -le 0 ]; then row attention SKIP "out of time"
  else
    bin=$(bench_binary attention_bench bench/attention/attention_bench.cu "$logs/attention.log")
    timed "$(cap 45)" "$logs/attention.log" bash -c "'$bin' --iters 20 --warmup 3 > '$logs/attention_ours.jsonl'" &&
      timed "$(cap 45)" "$logs/attention.log" bash -c "python3 bench/attention/sdpa_bench.py --iters 20 --warmup 3 > '$logs/attention_torch.jsonl'"
    rc=$?
    if detail=$(py attention-rows "$logs/attention_ours.jsonl" "$logs/attention_torch.jsonl") && [ "$rc" -eq 0 ]; then
      row attention PASS "$detail" "$took"
    else row attention FAIL "$detail ($(why "$rc" "$logs/attention.log"))" "$took"; fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# gemm: issue 37's GEMM-level candidates (bench/gemm_candidates: the down projection's d_ff
# stride, the LM head's chunk rows, the gradient memset) with the backend's cuBLASLt calls
# ---------------------------------------------------------------------------------------------
if wanted gemm; then
  limit=$(cap 60)
  if [ "$emulate" = 1 ]; then row gemm SKIP "needs a GPU (1.5B shapes; CI runs it emulated: Bench.GemmCandidatesEmulated)"
  elif [ "$limit" -le 0 ]; then row gemm SKIP "out of time"
  else
    bin=$(bench_binary gemm_candidates bench/gemm/gemm_candidates.cu "$logs/gemm.log" -lcublasLt)
    timed "$(cap 60)" "$logs/gemm.log" bash -c "GC_BLASLT_CACHE=off '$bin' --iters 10 --warmup 2 > '$logs/gemm.jsonl'"
    rc=$?
    python3 bench/gemm/gemm_table.py "$logs/gemm.jsonl" > "$logs/gemm_table.md" 2>> "$logs/gemm.log"
    if detail=$(python3 bench/gemm/gemm_table.py --detail "$logs/gemm.jsonl") && [ "$rc" -eq 0 ]; then
      row gemm PASS "$detail" "$took"
    else row gemm FAIL "$detail ($(why "$rc" "$logs/gemm.log"))" "$took"; fi
  fi
fi

# ---------------------------------------------------------------------------------------------
# bench: gcompile against torch.compile + SDPA (a row per backend) on the 0.1B and 1.5B specs, and
# their profiles (emulated: a smoke run of the bench's plumbing on the tiny bench tree, gcompile only)
# ---------------------------------------------------------------------------------------------
if wanted bench; then
  # torch.compile runs per spec: auto (PyTorch's own pick: cuDNN on Hopper) and cudnn (a repeat of auto's
  # measurement when auto picked it); flash, measured 2026-11-27, costs ~80 s more: GC_KIT_SDPA_BACKENDS.
  limit=$(cap "$([ "$emulate" = 1 ] && echo 200 || echo 300)")
  mapfile -t base_specs < <(py bench-specs "$kit" | grep -F -- "$bench_only")  # gpu_vs_torch names each tree after its spec
  bench_args=(--trees "$trees" --no-build --results "$logs/bench" --log "$logs/bench.log" --json "$logs/bench.json")
  if [ "$emulate" = 1 ]; then bench_args+=(--only ours --steps 2 --warmup 1)
  else bench_args+=(--steps 15 --warmup 5 --sdpa-backends "${GC_KIT_SDPA_BACKENDS:-auto,cudnn}"); fi
  # On Hopper each spec also trains on the wgmma attention kernels (train --attention wgmma): the
  # whole-step effect of issue 38's kernels, beside the default's.
  [ "$arch" != 90a ] || bench_args+=(--attention-rows wgmma)
  if [ ${#bench_trees[@]} -eq 0 ]; then row bench FAIL "the kit has no bench trees ($trees/bench_*)"
  elif [ "$limit" -le 0 ]; then row bench SKIP "out of time"
  else
    timed "$limit" "$logs/bench.out" env GC_TREE_CUDA_ARCH="$arch" bench/gpu_vs_torch "${bench_args[@]}" \
      --specs "${base_specs[*]}" --budget-s $((limit - 30 > 30 ? limit - 30 : 30))
    rc=$?
    if [ ! -f "$logs/bench/rows.json" ] && [ -f "$logs/bench/order.txt" ]; then
      # Killed at its cap: table the runs that finished.
      bench/gpu_vs_torch --table-from "$logs/bench" >> "$logs/bench.out" 2>&1
    fi
    if detail=$(py bench-rows "$logs/bench/rows.json") && [ "$rc" -eq 0 ]; then row bench PASS "$detail" "$took"
    else row bench FAIL "$detail ($(why "$rc" "$logs/bench.out"))" "$took"; fi
  fi
fi


# ---------------------------------------------------------------------------------------------
# compute-sanitizer: memcheck on a short training run, racecheck on the shared-memory tiles
# ---------------------------------------------------------------------------------------------
sanitize_row() {  # ROW CAP SUMMARY_PATTERN CMD...
  local name=$1 limit rc pattern=$3 summary
  limit=$(cap "$2")
  shift 3
  if [ "$emulate" = 1 ]; then row "$name" SKIP "compute-sanitizer needs a GPU"; return; fi
  if [ -z "$sanitizer" ]; then row "$name" FAIL "compute-sanitizer not found"; return; fi
  [ "$limit" -gt 0 ] || { row "$name" SKIP "out of time"; return; }
  timed "$limit" "$logs/$name.log" "$sanitizer" --tool "$name" --error-exitcode 99 "$@"
  rc=$?
  summary=$(grep -m 1 -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$logs/$name.log" | sed 's/^=* *//')
  if [ "$rc" -eq 0 ] && grep -qE "$pattern" "$logs/$name.log"; then row "$name" PASS "$summary" "$took"
  else row "$name" FAIL "${summary:-no summary line} ($(why "$rc" "$logs/$name.log"))" "$took"; fi
}
if wanted memcheck; then
  if built tiny train || [ "$emulate" = 1 ]; then
    sanitize_row memcheck 120 'ERROR SUMMARY: 0 errors' "$trees/tiny/train" --device cuda --steps "$STEPS_MEMCHECK" \
      --no-checkpoint --no-metrics --out "$work/runs/memcheck" --train-data "$trees/tiny/data/train.bin" \
      --val-data "$trees/tiny/data/val.bin"
  else row memcheck SKIP "tiny/train not built"; fi
fi
wanted racecheck && sanitize_row racecheck 150 'RACECHECK SUMMARY: 0 hazards|ERROR SUMMARY: 0 errors' \
  "$kit/bin/gcompile_cuda_tests" --gtest_filter='CudaFlashAttention.*:CudaMma.*'

note "done in ${SECONDS} s: $(grep -c $'\tPASS\t' "$ROWS") PASS, $failed FAIL, $(grep -c $'\tSKIP\t' "$ROWS") SKIP; $out_dir/summary.md"
cat "$out_dir/summary.md"
[ "$failed" -eq 0 ]
