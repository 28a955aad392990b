// CUDA emulator: dynamic shared memory, mbarriers, bulk copies and setmaxnreg (gc_emu/hopper.hpp).
// The state is per launching OS thread (the blocks of a grid run one after another on it) and is
// cleared at the start of every block.
#include "gc_emu/hopper.hpp"

#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gc_emu/runtime.hpp"
#include "internal.hpp"

namespace gc::emu {
namespace {

constexpr std::size_t kDefaultDynamicLimit = 48 << 10;  // without cudaFuncSetAttribute
constexpr std::size_t kHopperBlockLimit = 232448;      // 227 KiB: sharedMemPerBlockOptin on H100/H200
constexpr std::size_t kSharedAlignment = 1024;         // what a 128-byte swizzle's tile base needs
constexpr unsigned kMaxCount = (1u << 20) - 1;         // mbarrier arrival and transaction counts

struct Barrier {
  unsigned expected = 0, pending = 0;
  long long tx = 0;         // transaction bytes expected and not yet completed
  std::uint64_t phase = 0;  // completed phases so far; the current phase's parity is phase & 1
};

struct BulkCopy {
  void* dst;
  const void* src;
  unsigned bytes;
  std::uint64_t* bar;
};

struct BlockState {
  std::map<const std::uint64_t*, Barrier> barriers;
  std::vector<BulkCopy> copies;  // issued, not yet landed
  std::unique_ptr<unsigned char[]> raw;
  unsigned char* smem = nullptr;
  std::size_t smem_bytes = 0, capacity = 0;
};

BlockState& state() {
  thread_local BlockState s;
  return s;
}

std::mutex& attributes_mutex() {
  static std::mutex m;
  return m;
}
std::map<const void*, std::size_t>& dynamic_limits() {
  static std::map<const void*, std::size_t> limits;
  return limits;
}

std::string hex(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

Barrier& barrier_or_die(const std::uint64_t* bar, const char* op) {
  auto it = state().barriers.find(bar);
  if (it == state().barriers.end()) {
    fail(std::string(op) + ": the mbarrier at " + hex(bar) + " was not initialized (mbarrier.init) in this block");
  }
  return it->second;
}

// Starts the next phase once the pending arrivals and the transaction count are both zero.
void complete_if_done(Barrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phase;
    b.pending = b.expected;
  }
}

void add_tx(Barrier& b, long long bytes, const std::uint64_t* bar) {
  b.tx += bytes;
  if (b.tx > kMaxCount || b.tx < -static_cast<long long>(kMaxCount)) {
    fail("the transaction count of the mbarrier at " + hex(bar) + " left [-(2^20-1), 2^20-1]: " + std::to_string(b.tx));
  }
}

// Lands the bulk copies that complete on `bar`, in issue order, and signals their bytes.
void land_copies(const std::uint64_t* bar) {
  BlockState& s = state();
  std::vector<BulkCopy> still;
  for (const BulkCopy& c : s.copies) {
    if (c.bar != bar) {
      still.push_back(c);
      continue;
    }
    std::memcpy(c.dst, c.src, c.bytes);
    auto it = s.barriers.find(bar);
    if (it == s.barriers.end()) fail("a bulk copy completes on the mbarrier at " + hex(bar) + ", which was invalidated");
    add_tx(it->second, -static_cast<long long>(c.bytes), bar);
    complete_if_done(it->second);
  }
  s.copies.swap(still);
}

bool phase_completed(const std::uint64_t* bar, unsigned parity, const char* op) {
  land_copies(bar);
  return (barrier_or_die(bar, op).phase & 1u) != (parity & 1u);
}

}  // namespace

cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributePreferredSharedMemoryCarveout) {
    if (value < -1 || value > 100) return record_error(cudaErrorInvalidValue, "the carveout must be -1 or 0..100");
    return cudaSuccess;
  }
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return record_error(cudaErrorInvalidValue, "cudaFuncSetAttribute: an attribute the emulator does not know");
  }
  if (value < 0 || std::size_t(value) > kHopperBlockLimit) {
    return record_error(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                                                   " is outside [0, 232448] (227 KiB, a Hopper block's most)");
  }
  std::lock_guard<std::mutex> lock(attributes_mutex());
  dynamic_limits()[kernel] = std::size_t(value);
  return cudaSuccess;
}

bool dynamic_shared_memory_fits(const void* kernel, std::size_t bytes) {
  std::size_t limit = kDefaultDynamicLimit;
  {
    std::lock_guard<std::mutex> lock(attributes_mutex());
    auto it = dynamic_limits().find(kernel);
    if (it != dynamic_limits().end()) limit = it->second;
  }
  if (bytes <= limit) return true;
  record_error(cudaErrorInvalidValue,
               "the launch asks for " + std::to_string(bytes) + " bytes of dynamic shared memory, more than the " +
                   std::to_string(limit) + " the kernel allows (cudaFuncAttributeMaxDynamicSharedMemorySize)");
  return false;
}

void set_dynamic_shared_memory(std::size_t bytes) {
  BlockState& s = state();
  if (bytes > s.capacity) {
    s.raw.reset(new unsigned char[bytes + kSharedAlignment]);
    s.capacity = bytes;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(s.raw.get());
  s.smem = reinterpret_cast<unsigned char*>((base + kSharedAlignment - 1) / kSharedAlignment * kSharedAlignment);
  s.smem_bytes = bytes;
}

void hopper_block_begin() {
  BlockState& s = state();
  s.barriers.clear();
  s.copies.clear();
  if (s.smem_bytes > 0) std::memset(s.smem, 0xff, s.smem_bytes);
}

void hopper_block_end() {
  BlockState& s = state();
  if (!s.copies.empty()) {
    fail("a block exited with " + std::to_string(s.copies.size()) + " bulk cop" + (s.copies.size() == 1 ? "y" : "ies") +
         " in flight (no thread waited on the mbarrier at " + hex(s.copies.front().bar) + ")");
  }
  s.barriers.clear();
  wgmma_block_end();
}

unsigned char* dynamic_shared_memory() {
  if (state().smem_bytes == 0) fail("dynamic shared memory used in " + current_thread_name() + ", whose launch asked for none");
  return state().smem;
}

std::size_t dynamic_shared_memory_bytes() { return state().smem_bytes; }

void mbarrier_init(std::uint64_t* bar, unsigned count) {
  if (reinterpret_cast<std::uintptr_t>(bar) % 8 != 0) fail("mbarrier.init: " + hex(bar) + " is not 8-byte aligned");
  if (count < 1 || count > kMaxCount) {
    fail("mbarrier.init in " + current_thread_name() + ": count " + std::to_string(count) + " is outside [1, 2^20-1]");
  }
  Barrier b;
  b.expected = b.pending = count;
  state().barriers[bar] = b;
  *bar = 0;  // the word's bits are the hardware's; here it only must not be read as data
}

void mbarrier_inval(std::uint64_t* bar) {
  barrier_or_die(bar, "mbarrier.inval");
  for (const BulkCopy& c : state().copies) {
    if (c.bar == bar) fail("mbarrier.inval of the mbarrier at " + hex(bar) + " with a bulk copy in flight on it");
  }
  state().barriers.erase(bar);
}

std::uint64_t mbarrier_arrive(std::uint64_t* bar) {
  Barrier& b = barrier_or_die(bar, "mbarrier.arrive");
  const std::uint64_t token = b.phase;
  if (b.pending == 0) fail("mbarrier.arrive in " + current_thread_name() + ": more arrivals than the phase expects");
  --b.pending;
  complete_if_done(b);
  return token;
}

void mbarrier_expect_tx(std::uint64_t* bar, unsigned bytes) {
  if (bytes > kMaxCount) fail("mbarrier.expect_tx: " + std::to_string(bytes) + " bytes is over 2^20-1");
  add_tx(barrier_or_die(bar, "mbarrier.expect_tx"), bytes, bar);
}

std::uint64_t mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
  mbarrier_expect_tx(bar, bytes);
  return mbarrier_arrive(bar);
}

bool mbarrier_try_wait_parity(std::uint64_t* bar, unsigned parity) {
  return phase_completed(bar, parity, "mbarrier.try_wait.parity");
}

void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity) {
  barrier_or_die(bar, "mbarrier.try_wait.parity");
  wait_until([bar, parity] { return phase_completed(bar, parity, "mbarrier.try_wait.parity"); },
             "the mbarrier at " + hex(bar) + " (phase parity " + std::to_string(parity & 1u) + ")");
}

void bulk_copy_global_to_shared(void* dst, const void* src, unsigned bytes, std::uint64_t* bar) {
  const std::string where = "cp.async.bulk in " + current_thread_name();
  if (bytes == 0 || bytes % 16 != 0) fail(where + ": size " + std::to_string(bytes) + " is not a positive multiple of 16");
  if (reinterpret_cast<std::uintptr_t>(dst) % 16 != 0 || reinterpret_cast<std::uintptr_t>(src) % 16 != 0) {
    fail(where + ": source " + hex(src) + " and destination " + hex(dst) + " must be 16-byte aligned");
  }
  if (!is_device_range(src, bytes)) fail(where + ": the source " + hex(src) + " + " + std::to_string(bytes) + " is not device memory");
  barrier_or_die(bar, "cp.async.bulk");
  state().copies.push_back({dst, src, bytes, bar});
}

void setmaxnreg(unsigned registers) {
  if (registers < 24 || registers > 256 || registers % 8 != 0) {
    fail("setmaxnreg: " + std::to_string(registers) + " is not a multiple of 8 in [24, 256]");
  }
}

}  // namespace gc::emu
