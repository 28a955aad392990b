// ./train: trains this experiment. With no flags it runs the spec as compiled.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>
#include <filesystem>
#include <new>
#include <string>
#include <unistd.h>

#include "config.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "train/host_allocations.hpp"
#include "train/trainer.hpp"
#include "train/trainer_checkpoint.hpp"
#include "train/trainer_impl.hpp"
#include "train/trainer_metrics.hpp"

// The global operator new, counting (train/host_allocations.hpp). new[] and
// the nothrow forms go through it in libstdc++; the aligned forms are left as
// they are (the library's own pairs).
namespace {
std::atomic<std::int64_t> g_host_allocations{0};
}  // namespace

std::int64_t gc::tree::host_allocations() { return g_host_allocations.load(std::memory_order_relaxed); }

void* operator new(std::size_t bytes) {
  g_host_allocations.fetch_add(1, std::memory_order_relaxed);
  for (;;) {
    if (void* p = std::malloc(bytes ? bytes : 1)) return p;
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();
  }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

namespace fs = std::filesystem;

const char* const kUsage =
    "usage: train [--device cpu|cuda|auto] [--steps N] [--out DIR] [--resume DIR [--checkpoint C]]\n"
    "             [--train-data PATH] [--val-data PATH] [--log-every N] [--no-metrics]\n"
    "             [--no-checkpoint] [--init-from HF_DIR] [--expert-parallel N]\n"
    "             [--profile [N] [--profile-ceilings TFLOPS,GBPS]] [--watchdog-s S] [--help]\n\n"
    "Trains the experiment this tree was generated for.\n"
    "  --device D       cpu, cuda or auto (default auto: CUDA when a GPU and the CUDA backend\n"
    "                   are present, else CPU)\n"
    "  --steps N        stop after N optimizer steps (default: the spec's; the schedule is unchanged)\n"
    "  --out DIR        run directory for metrics and checkpoints (default: a new runs/NAME/N/ under\n"
    "                   the current directory, N counting up from 1)\n"
    "  --resume DIR     continue the run in DIR from its latest checkpoint, bit-identically\n"
    "  --checkpoint C   with --resume: continue from checkpoint C (step_N or N) instead of the\n"
    "                   latest, e.g. when the latest is damaged\n"
    "  --train-data P   override the training shards (file, directory or glob)\n"
    "  --val-data P     override the validation shards\n"
    "  --log-every N    write a training record every N steps (default: the spec's train.log_every)\n"
    "  --no-metrics     skip the in-loop analyses ([metrics]); losses and evaluation are still logged\n"
    "  --no-checkpoint  save no checkpoint (timing runs)\n"
    "  --init-from D    start a new run (step 0, fresh optimizer) from the weights of D, a directory\n"
    "                   `gcompile export` wrote for a spec with the same tensors\n"
    "  --expert-parallel N  MoE (CPU over MPI, GPUs over NCCL): split each layer's experts, and their\n"
    "                   gradients and optimizer state, over groups of N consecutive ranks (default:\n"
    "                   the spec's distributed.expert_parallel; N must divide the world size;\n"
    "                   docs/distributed.md)\n"
    "  --expert-exchange-factor F  expert parallelism: a rank's experts receive at most F times its\n"
    "                   own assignments per MoE layer (F >= 1; 0: the dropless worst case; default:\n"
    "                   the spec's distributed.expert_exchange_factor); sizes the exchange buffers\n"
    "                   and stops a step whose routing exceeds them\n"
    "  --attention K    the CUDA backend's attention kernels: auto (default: today as mma), mma (the\n"
    "                   mma.sync tensor-core kernels where the shape allows, else the reference ones;\n"
    "                   never wgmma), or wgmma (Hopper's warpgroup MMAs: bf16, head_dim 64 or 128, a\n"
    "                   compute capability 9.0 GPU, a tree with sm_90a code; docs/architecture.md)\n"
    "  --experts K      the CUDA backend's expert GEMMs, likewise: auto (today as mma), mma (the mma.sync\n"
    "                   grouped kernels where the shape allows, else the plain ones), or wgmma (bf16,\n"
    "                   d_model and expert_d_ff multiples of 128, compute capability 9.0, sm_90a code)\n"
    "  --expert-route R expert parallelism's route: auto (default: slotted on GPUs where\n"
    "                   moe.capacity_factor allows, so a step waits for no host plan; planned on the\n"
    "                   host on the CPU, without padding), slotted, or host (docs/distributed.md)\n"
    "  --profile [N]    the step profile: train 2 warm-up steps, then time every op of N more steps\n"
    "                   (default 5) with the backend's clock (CUDA events on a GPU, the wall clock on\n"
    "                   the CPU); print a table (ops by category, ms per step, share, TFLOP/s or GB/s,\n"
    "                   idle time) and write RUN/profile.json; no checkpoint (docs/performance.md)\n"
    "  --profile-ceilings T,G  with --profile: the machine's measured GEMM TFLOP/s and copy GB/s; the\n"
    "                   table then gives each op's rate as a share of them\n"
    "  --watchdog-s S   stop this rank (exit status 3, naming its step and phase) when it makes no\n"
    "                   progress for S seconds, e.g. stuck in a collective with a dead or stuck rank\n"
    "                   (default 1800; 0 = off); a GPU communicator's asynchronous error stops it\n"
    "                   at once\n\n"
    "Under mpirun or srun the ranks train one data-parallel job (the spec's global batch split among\n"
    "them; NCCL on GPUs, one rank per GPU; MPI on the CPU; rank 0 logs and checkpoints):\n"
    "OMP_NUM_THREADS=1 mpirun -np 2 ./train (docs/distributed.md).\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "train: error: %s\nRun './train --help' for usage.\n", message.c_str());
  return 2;
}

constexpr int kDefaultProfileSteps = 5;

// "TFLOPS,GBPS": two positive numbers.
bool parse_ceilings(const std::string& s, double& tflops, double& gbps) {
  const std::size_t comma = s.find(',');
  if (comma == std::string::npos) return false;
  char* end = nullptr;
  const std::string a = s.substr(0, comma), b = s.substr(comma + 1);
  tflops = std::strtod(a.c_str(), &end);
  if (a.empty() || *end != '\0' || !(tflops > 0)) return false;
  gbps = std::strtod(b.c_str(), &end);
  return !b.empty() && *end == '\0' && gbps > 0;
}

bool parse_steps(const std::string& s, std::int64_t& out) {
  if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != std::string::npos) return false;
  out = std::stoll(s);
  return out > 0;
}

// A new numbered run directory runs/NAME/N/ under the current directory (N one
// past the highest existing number). Runs never live inside the generated tree,
// which regenerating replaces. create_directory is atomic: two trainings started
// at once get different numbers.
std::string new_run_dir() {
  const fs::path parent = fs::path("runs") / gc::tree::kExperimentName;
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw gc::rt::RuntimeError(parent.string(), "cannot create the runs directory: " + ec.message());
  long next = 1;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name.size() < 10 && name.find_first_not_of("0123456789") == std::string::npos) {
      next = std::max(next, std::stol(name) + 1);
    }
  }
  for (;; ++next) {
    const fs::path dir = parent / std::to_string(next);
    if (fs::create_directory(dir, ec)) return dir.string();
    if (ec) throw gc::rt::RuntimeError(dir.string(), "cannot create the run directory: " + ec.message());
  }
}

// A fresh run must not overwrite another run's checkpoints.
void prepare_fresh_run(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(fs::path(dir) / "checkpoints", ec)) {
    throw gc::rt::RuntimeError(dir, "already holds a run (checkpoints/ exists); continue it with --resume " + dir +
                                        " or choose another --out");
  }
  fs::create_directories(dir, ec);
  if (ec) throw gc::rt::RuntimeError(dir, "cannot create the run directory: " + ec.message());
  // The resolved spec and the tokenizer (text data) travel with the run.
  const fs::path tree = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (const char* name : {"spec.resolved.toml", "tokenizer.model"}) {
    std::error_code missing;
    if (!ec && fs::exists(tree / name, missing)) {
      gc::rt::write_file_atomic((fs::path(dir) / name).string(), gc::rt::read_file((tree / name).string()));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  gc::tree::TrainOptions options;
  std::string device = "auto", out, resume;
  bool steps_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](std::string& into) {
      if (i + 1 >= argc) return false;
      into = argv[++i];
      return true;
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::string v;
    if (arg == "--device") {
      if (!value(device) || (device != "cpu" && device != "cuda" && device != "auto")) {
        return usage_error("--device needs cpu, cuda or auto");
      }
    } else if (arg == "--steps") {
      if (!value(v) || !parse_steps(v, options.steps)) return usage_error("--steps needs a positive integer");
      steps_given = true;
      if (options.steps > gc::tree::kTotalSteps) {
        return usage_error("--steps " + v + " exceeds the schedule's " + std::to_string(gc::tree::kTotalSteps) +
                           " steps (change train.steps in the spec to train longer)");
      }
    } else if (arg == "--out") {
      if (!value(out) || out.empty()) return usage_error("--out needs a directory");
    } else if (arg == "--resume") {
      if (!value(resume) || resume.empty()) return usage_error("--resume needs a run directory");
    } else if (arg == "--checkpoint") {
      if (!value(options.checkpoint) || options.checkpoint.empty()) return usage_error("--checkpoint needs a name");
    } else if (arg == "--train-data") {
      if (!value(options.train_data)) return usage_error("--train-data needs a path");
    } else if (arg == "--val-data") {
      if (!value(options.val_data)) return usage_error("--val-data needs a path");
    } else if (arg == "--log-every") {
      if (!value(v) || !parse_steps(v, options.log_every)) return usage_error("--log-every needs a positive integer");
    } else if (arg == "--init-from") {
      if (!value(options.init_from) || options.init_from.empty()) return usage_error("--init-from needs a directory");
    } else if (arg == "--expert-parallel") {
      std::int64_t n = 0;
      if (!value(v) || !parse_steps(v, n) || n > 1'000'000) {
        return usage_error("--expert-parallel needs a positive integer (ranks per expert-parallel group)");
      }
      options.expert_parallel = int(n);
    } else if (arg == "--expert-exchange-factor") {
      char* end = nullptr;
      const double f = value(v) ? std::strtod(v.c_str(), &end) : -1.0;
      if (end == nullptr || end == v.c_str() || *end != '\0' || !(f == 0.0 || (f >= 1.0 && f <= 1e6))) {
        return usage_error("--expert-exchange-factor needs 0 (the dropless worst case) or a number of at least 1");
      }
      options.expert_exchange_factor = f;
    } else if (arg == "--attention" || arg == "--experts") {
      if (!value(v) || !gc::tree::core::set_kernel_choice(options.kernels, arg, v)) {
        return usage_error(arg + " needs auto, mma or wgmma");
      }
    } else if (arg == "--expert-route") {
      if (!value(v) || (v != "auto" && v != "slotted" && v != "host")) {
        return usage_error("--expert-route needs auto, slotted or host");
      }
      using gc::tree::RouteChoice;
      options.expert_route = v == "slotted" ? RouteChoice::slotted : v == "host" ? RouteChoice::host : RouteChoice::automatic;
    } else if (arg == "--profile") {
      options.profile_steps = kDefaultProfileSteps;
      if (i + 1 < argc && argv[i + 1][0] != '-') {  // an optional count
        std::int64_t n = 0;
        if (!value(v) || !parse_steps(v, n) || n > 1000) return usage_error("--profile needs a step count from 1 to 1000");
        options.profile_steps = int(n);
      }
    } else if (arg == "--profile-ceilings") {
      if (!value(v) || !parse_ceilings(v, options.profile_ceiling_tflops, options.profile_ceiling_gbps)) {
        return usage_error("--profile-ceilings needs two positive numbers, TFLOPS,GBPS (e.g. 780,4300)");
      }
    } else if (arg == "--watchdog-s") {
      char* end = nullptr;
      if (!value(v) || v.empty() || (options.watchdog_s = std::strtod(v.c_str(), &end), *end != '\0') ||
          !(options.watchdog_s >= 0.0) || options.watchdog_s > 1e7) {
        return usage_error("--watchdog-s needs a number of seconds (0 turns the watchdog off), not '" + v + "'");
      }
    } else if (arg == "--no-metrics") {
      options.metrics = false;
    } else if (arg == "--no-checkpoint") {
      options.checkpoints = false;
    } else {
      return usage_error("unknown argument '" + arg + "'");
    }
  }
  if (!out.empty() && !resume.empty()) return usage_error("--out and --resume are exclusive (--resume names the run)");
  if (!options.checkpoint.empty() && resume.empty()) return usage_error("--checkpoint needs --resume DIR");
  if (!options.init_from.empty() && !resume.empty()) {
    return usage_error("--init-from starts a new run; --resume continues one (use one of them)");
  }
  if (options.profile_ceiling_tflops > 0 && options.profile_steps == 0) {
    return usage_error("--profile-ceilings needs --profile");
  }
  if (options.profile_steps > 0) {
    if (!resume.empty()) return usage_error("--profile starts a new run; it cannot --resume one");
    if (steps_given) return usage_error("--profile sets the steps itself (2 warm-up + N timed); drop --steps");
    options.steps = gc::tree::StepProfiler::kWarmup + options.profile_steps;
    if (options.steps > gc::tree::kTotalSteps) {
      return usage_error("--profile " + std::to_string(options.profile_steps) + " needs " +
                         std::to_string(options.steps) + " steps, more than the schedule's " +
                         std::to_string(gc::tree::kTotalSteps));
    }
    options.checkpoints = false;  // a timing run
  }
  options.device = device;
  options.resume = !resume.empty();
  gc::rt::Comm* comm = nullptr;
  try {
    comm = &gc::rt::Comm::world();  // joins the MPI job under mpirun/srun
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: error: %s\n", e.what());
    return 1;
  }
  const bool root = comm->root();
  options.progress = root && ::isatty(STDERR_FILENO) != 0;
  // Rank 0 chooses and prepares the run directory; every rank learns it (or that it failed).
  std::string chosen;
  if (root) {
    try {
      options.run_dir = options.resume ? resume : (out.empty() ? new_run_dir() : out);
      if (!options.resume) prepare_fresh_run(options.run_dir);
      chosen = options.run_dir;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "train: error: %s\n", e.what());
      chosen.clear();
    }
  }
  comm->broadcast(chosen);
  if (chosen.empty()) {
    comm->finalize();
    return 1;
  }
  options.run_dir = chosen;
  try {
    gc::tree::Trainer trainer(options);
    if (root) {
      const std::string world =
          comm->distributed() ? ", data-parallel over " + std::to_string(comm->size()) + " processes (" +
                                    (trainer.on_device() ? "NCCL" : "MPI") +
                                    (gc::tree::kZeroStage == 1 ? ", ZeRO-1" : "") +
                                    (options.expert_parallel > 1
                                         ? ", experts over groups of " + std::to_string(options.expert_parallel)
                                         : std::string()) +
                                    ")"
                              : "";
      std::fprintf(stderr, "train: %s, %lld parameters, %s%s, run directory %s\n", gc::tree::kExperimentName,
                   (long long)gc::tree::kTotalParams, trainer.describe().c_str(), world.c_str(),
                   options.run_dir.c_str());
    }
    gc::tree::note_cpu_precision(root, trainer.on_device());
    const int status = trainer.run();
    comm->finalize();
    return status;
  } catch (const std::exception& e) {
    if (comm->distributed()) {
      // One rank failed: every rank stops (the last good checkpoint is kept; checkpoints are atomic).
      std::fprintf(stderr, "train: error on rank %d of %d: %s; stopping every rank\n", comm->rank(), comm->size(),
                   e.what());
      comm->abort(1);
    }
    std::fprintf(stderr, "train: error: %s\n", e.what());
    if (root && !options.resume && out.empty() && !options.run_dir.empty()) {
      // The numbered directory this process created: removed when the run
      // failed before writing anything but the copies of the spec and tokenizer.
      std::error_code ec;
      bool only_copies = true;
      for (fs::directory_iterator it(options.run_dir, ec), end; !ec && it != end; it.increment(ec)) {
        const fs::path name = it->path().filename();
        only_copies = only_copies && (name == "spec.resolved.toml" || name == "tokenizer.model");
      }
      if (!ec && only_copies) {
        fs::remove_all(options.run_dir, ec);
      } else {
        std::fprintf(stderr, "train: the run's output so far is in %s\n", options.run_dir.c_str());
      }
    }
    return 1;
  }
}
