// CUDA emulator: the grid runner. Blocks run one after another; the threads of a block are
// fibers (each with its own stack) that the scheduler resumes round-robin on the calling OS
// thread. A fiber runs until it finishes or waits at a barrier, then hands over to the next fiber
// of the sweep that can run:
//
//   __syncthreads      released when every thread of the block has arrived;
//   warp collectives   (__syncwarp, __shfl_*_sync) released when every lane of the mask has
//                      arrived with the same kind of call, mask and width; the values move at
//                      the release.
//
// Strict by design: when no fiber can run but some have not finished (a thread exited or waits
// at a different barrier than the others), that is a deadlock on a GPU, and the emulator aborts
// naming the block and what every thread waits for. So do partial-warp shuffles, sources outside
// the mask, and differing masks or kinds within one collective.
//
// Fibers switch with a few instructions of assembly on x86-64 (no system call, unlike
// swapcontext) and with ucontext elsewhere or when GC_EMU_UCONTEXT is defined.
// GC_CUDA_EMULATOR_ORDER=reverse runs threads and blocks in reverse order, =random in a seeded
// random order (a kernel whose result depends on that order has a race).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gc_emu/device.hpp"
#include "gc_emu/launch.hpp"
#include "gc_emu/runtime.hpp"
#include "internal.hpp"

#if defined(__x86_64__) && !defined(GC_EMU_UCONTEXT)
#define GC_EMU_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace gc::emu {
namespace {

constexpr int kWarp = 32;
constexpr int kMaxThreads = 1024;
constexpr std::size_t kStackBytes = std::size_t(256) << 10;  // per CUDA thread; attention needs ~10 KiB

[[noreturn]] void fatal(const char* format, ...) {
  std::fflush(stdout);
  std::fputs("gcompile CUDA emulator: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

// ---- context switch ------------------------------------------------------------------------

#ifdef GC_EMU_ASM_SWITCH
// gc_emu_switch(save, load): pushes the callee-saved registers, stores the stack pointer in
// *save, loads `load` and pops the same frame from there. The SSE and x87 control words are not
// switched: device code cannot change the rounding mode (CUDA has no such call), so every fiber
// runs with the launching thread's, and ldmxcsr/fldcw cost more than the rest of a switch
// together (80 % of it, measured with perf on the emulated train of tests/e2e/specs/gpu_data_parallel.toml).
extern "C" void gc_emu_switch(void** save, void* load);
asm(R"(
  .text
  .p2align 4
  .type gc_emu_switch, @function
gc_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size gc_emu_switch, .-gc_emu_switch
)");

struct Context {
  void* sp = nullptr;
};
#else
struct Context {
  ucontext_t uc;
};
#endif

// ---- block state -----------------------------------------------------------------------------

// polling: waits until its predicate holds (an mbarrier phase, gc_emu/hopper.hpp);
// group_barrier: waits for the other threads of a named group (a warpgroup's collective).
enum class State { ready, block_barrier, warp_barrier, polling, group_barrier, done };

struct Fiber {
  Context context;
  char* stack = nullptr;  // lowest usable byte (a guard page lies below)
  uint3 tid{};
  int linear = 0;
  State state = State::ready;
  // The pending warp collective: this lane's argument and value, after the release its result.
  int arg = 0;
  std::uint64_t value = 0;
  // polling: the condition that makes it ready again, and what it waits for (for a deadlock report).
  std::function<bool()> until;
  std::string waiting_for;
};

// A barrier over a named group of threads (a warpgroup: 128 threads): released when `count`
// threads have arrived; every arrival must name the same count.
struct GroupBarrier {
  int count = 0;
  std::vector<int> arrived;  // linear thread indices
  std::string what;
};

struct Warp {
  int lanes = 0;            // threads of the block in this warp (the last warp may be partial)
  unsigned present = 0;     // their lane bits
  int arrived = 0;          // lanes waiting at the current collective
  int expected = 0;         // the lanes of its mask
  unsigned mask = 0;        // its mask, kind and width (all lanes must agree)
  Collective kind{};
  int width = 0;
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<int> order;  // resume order of the fibers in a sweep
  int position = -1;       // the running fiber's place in `order`
  int threads = 0;
  int at_block_barrier = 0;
  int done = 0;
  Fiber* current = nullptr;
  std::map<int, GroupBarrier> groups;
  Context scheduler;
  GridBody body = nullptr;
  const void* body_context = nullptr;
};

thread_local Block* g_block = nullptr;  // the block whose fibers are running

// Stacks are mapped once per launching thread (committed lazily by the OS) and reused by every
// block it runs.
std::vector<char*>& stack_pool() {
  thread_local std::vector<char*> pool;
  return pool;
}

char* stack_for(int i) {
  auto& pool = stack_pool();
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  while (int(pool.size()) <= i) {
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) fatal("cannot map a %zu-byte fiber stack", kStackBytes);
    mprotect(p, page, PROT_NONE);  // overflow faults instead of corrupting the neighbour
    pool.push_back(static_cast<char*>(p) + page);
  }
  return pool[std::size_t(i)];
}

Block& block_or_die(const char* what) {
  if (g_block == nullptr || g_block->current == nullptr) fatal("%s called outside a kernel", what);
  return *g_block;
}

void switch_context(Context& save, Context& load) {
#ifdef GC_EMU_ASM_SWITCH
  gc_emu_switch(&save.sp, load.sp);
#else
  swapcontext(&save.uc, &load.uc);
#endif
}

// The place in the sweep's order of the next fiber that can run after place `after` (-1: from the
// sweep's start), or -1 when the sweep is over. A polling fiber whose condition holds becomes ready
// when the sweep reaches it.
int next_runnable(Block& b, int after) {
  for (int p = after + 1; p < b.threads; ++p) {
    Fiber& f = b.fibers[std::size_t(b.order[std::size_t(p)])];
    if (f.state == State::polling && f.until()) {
      f.state = State::ready;
      f.until = nullptr;
    }
    if (f.state == State::ready) return p;
  }
  return -1;
}

// Switches to the fiber at place p of the sweep, saving the caller's context in `save`.
void enter(Block& b, int p, Context& save) {
  b.position = p;
  Fiber& f = b.fibers[std::size_t(b.order[std::size_t(p)])];
  b.current = &f;
  threadIdx = f.tid;
  switch_context(save, f.context);
}

// The running fiber stops (it waits, or it finished): straight on to the next fiber of the sweep
// that can run, or back to the scheduler when the sweep is over. One switch per resumption rather
// than two through the scheduler, in the order the scheduler's sweep would take.
void leave(Block& b, Context& save) {
  const int next = next_runnable(b, b.position);
  if (next >= 0) {
    enter(b, next, save);
    return;
  }
  b.current = nullptr;
  switch_context(save, b.scheduler);
}

[[noreturn]] void fiber_main() {
  Block& b = *g_block;
  b.body(b.body_context);
  b.current->state = State::done;
  ++b.done;
  leave(b, b.current->context);
  fatal("a finished CUDA thread was resumed");
}

void start_fiber(Block& b, Fiber& f) {
  char* const top = f.stack + kStackBytes;  // page aligned, so 16-byte aligned
#ifdef GC_EMU_ASM_SWITCH
  // The frame gc_emu_switch pops: r15 … rbp, then `ret` to fiber_main with the stack as a call
  // would leave it (a zero return address above).
  auto* sp = reinterpret_cast<std::uint64_t*>(top);
  *--sp = 0;
  *--sp = reinterpret_cast<std::uint64_t>(&fiber_main);
  for (int r = 0; r < 6; ++r) *--sp = 0;
  f.context.sp = sp;
  (void)b;
#else
  getcontext(&f.context.uc);
  f.context.uc.uc_stack.ss_sp = f.stack;
  f.context.uc.uc_stack.ss_size = kStackBytes;
  f.context.uc.uc_link = &b.scheduler.uc;
  makecontext(&f.context.uc, fiber_main, 0);
  (void)top;
#endif
}

// Called by the running fiber: on to the next one until something resumes this fiber.
void suspend(Block& b) { leave(b, b.current->context); }

const char* collective_name(Collective kind) {
  switch (kind) {
    case Collective::sync_warp: return "__syncwarp";
    case Collective::shfl_idx: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
  }
  return "?";
}

std::string describe_thread(const Fiber& f) {
  return "block (" + std::to_string(blockIdx.x) + "," + std::to_string(blockIdx.y) + "," +
         std::to_string(blockIdx.z) + ") thread (" + std::to_string(f.tid.x) + "," + std::to_string(f.tid.y) + "," +
         std::to_string(f.tid.z) + ")";
}

[[noreturn]] void deadlock(const Block& b) {
  std::string waits;
  int exited = 0;
  for (const Fiber& f : b.fibers) exited += f.state == State::done;
  waits += std::to_string(b.at_block_barrier) + " at __syncthreads, " + std::to_string(exited) + " exited";
  std::map<std::string, int> polling;
  for (const Fiber& f : b.fibers) {
    if (f.state == State::polling) ++polling[f.waiting_for];
  }
  for (const auto& [what, n] : polling) waits += "; " + std::to_string(n) + " waiting for " + what;
  for (const auto& [id, g] : b.groups) {
    if (!g.arrived.empty()) {
      waits += "; " + std::to_string(g.arrived.size()) + " of " + std::to_string(g.count) + " threads at " + g.what;
    }
  }
  for (std::size_t w = 0; w < b.warps.size(); ++w) {
    const Warp& warp = b.warps[w];
    if (warp.arrived == 0) continue;
    char line[160];
    std::snprintf(line, sizeof line, "; warp %zu: %d of %d lanes at %s (mask 0x%08x)", w, warp.arrived,
                  __builtin_popcount(warp.mask), collective_name(warp.kind), warp.mask);
    waits += line;
  }
  fatal("deadlock in block (%u,%u,%u) of %d threads: no thread can run (%s)", blockIdx.x, blockIdx.y, blockIdx.z,
        b.threads, waits.c_str());
}

// The lane whose value `lane` receives (CUDA's __shfl_*_sync rules), or `lane` itself.
int source_lane(Collective kind, int lane, int arg, int width) {
  const int base = lane & ~(width - 1), offset = lane - base;
  switch (kind) {
    case Collective::shfl_idx: return base + (arg & (width - 1));
    case Collective::shfl_up: return offset >= arg ? lane - arg : lane;
    case Collective::shfl_down: return offset + arg < width ? lane + arg : lane;
    case Collective::shfl_xor: {
      const int src = lane ^ arg;
      return src < base + width ? src : lane;  // later segments are out of reach
    }
    case Collective::sync_warp: return lane;
  }
  return lane;
}

void release_warp(Block& b, int w) {
  Warp& warp = b.warps[std::size_t(w)];
  const int first = w * kWarp;
  std::uint64_t values[kWarp];
  for (int lane = 0; lane < warp.lanes; ++lane) values[lane] = b.fibers[std::size_t(first + lane)].value;
  for (int lane = 0; lane < warp.lanes; ++lane) {
    if (!(warp.mask >> lane & 1u)) continue;
    Fiber& f = b.fibers[std::size_t(first + lane)];
    const int src = source_lane(warp.kind, lane, f.arg, warp.width);
    if (!(warp.mask >> src & 1u)) {
      fatal("%s in %s: lane %d reads lane %d, which is not in the mask 0x%08x", collective_name(warp.kind),
            describe_thread(f).c_str(), lane, src, warp.mask);
    }
    f.value = values[src];
    f.state = State::ready;
  }
  warp.arrived = 0;
}

// The order of a sweep over threads, or over blocks, by GC_CUDA_EMULATOR_ORDER.
enum class Order { forward, reverse, random };

Order order_policy() {
  static const Order policy = [] {
    const char* env = std::getenv("GC_CUDA_EMULATOR_ORDER");
    if (env == nullptr || std::strcmp(env, "forward") == 0 || *env == '\0') return Order::forward;
    if (std::strcmp(env, "reverse") == 0) return Order::reverse;
    if (std::strcmp(env, "random") == 0) return Order::random;
    fatal("GC_CUDA_EMULATOR_ORDER must be forward, reverse or random, not \"%s\"", env);
  }();
  return policy;
}

std::mt19937& order_rng() {
  static std::mt19937 rng(20240601u);
  return rng;
}

void arrange(std::vector<int>& order, int n) {
  order.resize(std::size_t(n));
  std::iota(order.begin(), order.end(), 0);
  if (order_policy() == Order::reverse) std::reverse(order.begin(), order.end());
  if (order_policy() == Order::random) std::shuffle(order.begin(), order.end(), order_rng());
}

void run_block(Block& b) {
  b.at_block_barrier = 0;
  b.done = 0;
  b.groups.clear();
  for (Warp& w : b.warps) w.arrived = 0;
  for (Fiber& f : b.fibers) {
    f.state = State::ready;
    f.until = nullptr;
    start_fiber(b, f);
  }
  hopper_block_begin();
  arrange(b.order, b.threads);

  // A sweep resumes every fiber that can run, in order; the fibers hand over to each other
  // (leave) and the last returns here. A sweep with nothing to run is a deadlock.
  while (b.done < b.threads) {
    const int first = next_runnable(b, -1);
    if (first < 0) deadlock(b);
    enter(b, first, b.scheduler);
  }
  hopper_block_end();
}

bool valid_configuration(dim3 grid, dim3 block) {
  const std::uint64_t threads = std::uint64_t(block.x) * block.y * block.z;
  return grid.x >= 1 && grid.y >= 1 && grid.z >= 1 && grid.x <= 0x7fffffffu && grid.y <= 65535 && grid.z <= 65535 &&
         block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 && block.y <= 1024 && block.z <= 64 &&
         threads <= std::uint64_t(kMaxThreads);
}

}  // namespace

void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_smem, GridBody body, const void* context) {
  run_pending_copies();  // the stream runs the copies queued before this launch first
  if (g_block != nullptr) fatal("a kernel launched another kernel (dynamic parallelism is not emulated)");
  if (!valid_configuration(grid, block)) {
    record_error(cudaErrorInvalidConfiguration,
                 "invalid launch configuration: grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," +
                     std::to_string(grid.z) + "), block (" + std::to_string(block.x) + "," + std::to_string(block.y) +
                     "," + std::to_string(block.z) + ")");
    return;
  }
  if (!dynamic_shared_memory_fits(kernel, dynamic_smem)) return;
  Block b;
  b.threads = int(block.x * block.y * block.z);
  b.body = body;
  b.body_context = context;
  b.fibers.resize(std::size_t(b.threads));
  for (int t = 0; t < b.threads; ++t) {
    Fiber& f = b.fibers[std::size_t(t)];
    f.linear = t;
    f.tid = uint3{unsigned(t) % block.x, unsigned(t) / block.x % block.y, unsigned(t) / (block.x * block.y)};
    f.stack = stack_for(t);
  }
  b.warps.resize(std::size_t((b.threads + kWarp - 1) / kWarp));
  for (std::size_t w = 0; w < b.warps.size(); ++w) {
    b.warps[w].lanes = std::min(kWarp, b.threads - int(w) * kWarp);
    b.warps[w].present = b.warps[w].lanes == kWarp ? 0xffffffffu : (1u << b.warps[w].lanes) - 1u;
  }

  gridDim = grid;
  blockDim = block;
  const std::int64_t blocks = std::int64_t(grid.x) * grid.y * grid.z;
  std::vector<int> block_order;
  const bool reorder = order_policy() != Order::forward && blocks <= (std::int64_t(1) << 24);
  if (reorder) arrange(block_order, int(blocks));
  g_block = &b;
  set_dynamic_shared_memory(dynamic_smem);
  for (std::int64_t i = 0; i < blocks; ++i) {
    const std::int64_t id = reorder ? block_order[std::size_t(i)] : i;
    blockIdx = uint3{unsigned(id % grid.x), unsigned(id / grid.x % grid.y),
                     unsigned(id / (std::int64_t(grid.x) * grid.y))};
    run_block(b);
  }
  g_block = nullptr;
}

std::uint64_t warp_collective(Collective kind, unsigned mask, std::uint64_t value, int arg, int width) {
  Block& b = block_or_die(collective_name(kind));
  Fiber& f = *b.current;
  const int w = f.linear / kWarp, lane = f.linear % kWarp;
  Warp& warp = b.warps[std::size_t(w)];
  if (width < 1 || width > kWarp || (width & (width - 1)) != 0) {
    fatal("%s in %s: width %d is not a power of two up to 32", collective_name(kind), describe_thread(f).c_str(),
          width);
  }
  if (!(mask >> lane & 1u)) {
    fatal("%s in %s: the calling lane %d is not in the mask 0x%08x", collective_name(kind), describe_thread(f).c_str(),
          lane, mask);
  }
  if ((mask & ~warp.present) != 0) {
    fatal("%s in %s: mask 0x%08x names lanes the block does not have (warp lanes 0x%08x)", collective_name(kind),
          describe_thread(f).c_str(), mask, warp.present);
  }
  if (warp.arrived == 0) {
    warp.mask = mask;
    warp.kind = kind;
    warp.width = width;
    warp.expected = __builtin_popcount(mask);
  } else if (warp.mask != mask || warp.kind != kind || warp.width != width) {
    fatal("%s in %s (mask 0x%08x, width %d) while other lanes of its warp wait at %s (mask 0x%08x, width %d)",
          collective_name(kind), describe_thread(f).c_str(), mask, width, collective_name(warp.kind), warp.mask,
          warp.width);
  }
  f.arg = arg;
  f.value = value;
  f.state = State::warp_barrier;
  if (++warp.arrived == warp.expected) release_warp(b, w);
  suspend(b);
  return f.value;
}

int current_thread() { return block_or_die("a CUDA device function").current->linear; }

int block_threads() { return block_or_die("a CUDA device function").threads; }

std::string current_thread_name() {
  Block& b = block_or_die("a CUDA device function");
  return describe_thread(*b.current);
}

void wait_until(std::function<bool()> ready, const std::string& what) {
  Block& b = block_or_die(what.c_str());
  if (ready()) return;
  Fiber& f = *b.current;
  f.state = State::polling;
  f.until = std::move(ready);
  f.waiting_for = what;
  suspend(b);
}

void group_barrier(int group, int count, const std::string& what) {
  Block& b = block_or_die(what.c_str());
  Fiber& f = *b.current;
  GroupBarrier& g = b.groups[group];
  if (g.arrived.empty()) {
    g.count = count;
    g.what = what;
  } else if (g.count != count || g.what != what) {
    fatal("%s in %s while other threads of its group wait at %s (%d threads)", what.c_str(),
          describe_thread(f).c_str(), g.what.c_str(), g.count);
  }
  g.arrived.push_back(f.linear);
  f.state = State::group_barrier;
  if (int(g.arrived.size()) == count) {
    for (int t : g.arrived) b.fibers[std::size_t(t)].state = State::ready;
    g.arrived.clear();
  }
  suspend(b);
}

[[noreturn]] void fail(const std::string& what) { fatal("%s", what.c_str()); }

}  // namespace gc::emu

void __syncthreads() {
  gc::emu::Block& b = gc::emu::block_or_die("__syncthreads");
  b.current->state = gc::emu::State::block_barrier;
  if (++b.at_block_barrier == b.threads) {
    for (gc::emu::Fiber& f : b.fibers) f.state = gc::emu::State::ready;
    b.at_block_barrier = 0;
  }
  gc::emu::suspend(b);
}
