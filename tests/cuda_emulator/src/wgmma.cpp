// CUDA emulator: wgmma (gc_emu/wgmma.hpp). Operations are recorded per CUDA thread at issue and
// computed at the wait_group that completes their group.
#include "gc_emu/wgmma.hpp"

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gc_emu/hopper.hpp"
#include "internal.hpp"

namespace gc::emu {
namespace {

constexpr int kWarpgroup = 128;
constexpr int kMaxThreads = 1024;

struct Operation {
  float* d;
  int n;
  std::uint64_t desc_a, desc_b;
  bool accumulate, trans_a, trans_b;
  int scale_a, scale_b;
  std::shared_ptr<std::array<float, 64 * 16>> a;  // the RS form's A, gathered at issue; else null
};

struct ThreadOperations {
  std::vector<Operation> open;                    // issued since the last commit
  std::vector<std::vector<Operation>> committed;  // oldest first
};

std::vector<ThreadOperations>& operations() {
  thread_local std::vector<ThreadOperations> per_thread(kMaxThreads);
  return per_thread;
}

// Thread-operations issued and not yet computed, over the running block: a block may end only at
// zero, so a block starts with every list empty (the per-block checks cost nothing for the
// kernels without wgmma).
std::size_t& in_flight() {
  thread_local std::size_t n = 0;
  return n;
}

// What every thread of the warpgroup brings to an instruction; all must agree on all but `a`.
struct Slot {
  int n = 0;
  std::uint64_t desc_a = 0, desc_b = 0;
  bool accumulate = false, trans_a = false, trans_b = false, registers = false;
  int scale_a = 1, scale_b = 1;
  std::uint32_t a[4] = {0, 0, 0, 0};
  bool same_instruction(const Slot& o) const {
    return n == o.n && desc_a == o.desc_a && desc_b == o.desc_b && accumulate == o.accumulate &&
           trans_a == o.trans_a && trans_b == o.trans_b && registers == o.registers && scale_a == o.scale_a &&
           scale_b == o.scale_b;
  }
};

int warpgroup_of_current(const char* what) {
  const int t = current_thread(), group = t / kWarpgroup;
  if (block_threads() < (group + 1) * kWarpgroup) {
    fail(std::string(what) + " in " + current_thread_name() + ": its warpgroup (threads " +
         std::to_string(group * kWarpgroup) + ".." + std::to_string(group * kWarpgroup + kWarpgroup - 1) +
         ") is incomplete in a block of " + std::to_string(block_threads()) + " threads");
  }
  return group;
}

// A strict barrier of the current thread's warpgroup (all 128 threads, the same instruction).
void warpgroup_barrier(const char* what) {
  group_barrier(warpgroup_of_current(what), kWarpgroup, what);
}

// Every thread of the warpgroup deposits `mine`; `use` sees the warpgroup's 128 slots.
template <typename F>
void warpgroup_exchange(const Slot& mine, const char* what, F&& use) {
  thread_local Slot table[kMaxThreads];
  const int t = current_thread(), group = warpgroup_of_current(what);
  table[t] = mine;
  group_barrier(group, kWarpgroup, what);
  use(&table[group * kWarpgroup]);
  group_barrier(group, kWarpgroup, what);
}

float bf16_at(std::size_t offset) {
  if (offset + 2 > dynamic_shared_memory_bytes()) {
    fail("a wgmma operand element at shared offset " + std::to_string(offset) + " lies outside the launch's " +
         std::to_string(dynamic_shared_memory_bytes()) + " bytes of dynamic shared memory");
  }
  std::uint16_t bits;
  std::memcpy(&bits, dynamic_shared_memory() + offset, 2);
  const std::uint32_t u = std::uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

void check_descriptor(std::uint64_t desc, const char* operand) {
  if ((desc >> 49 & 7u) != 0) {
    fail(std::string("wgmma in ") + current_thread_name() + ": the " + operand +
         " descriptor has a base offset; the emulator supports only 0 (tiles on their swizzle pattern's boundary)");
  }
}

void compute(const Operation& op) {
  const int t = current_thread() % kWarpgroup, w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  for (int i = 0; i < op.n / 2; ++i) {
    const int row = 16 * w + g + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * q + i % 2;
    float sum = 0.0f;
    for (int k = 0; k < 16; ++k) {
      const float a = op.a ? (*op.a)[std::size_t(row * 16 + k)] : bf16_at(wgmma_operand_offset(op.desc_a, row, k, op.trans_a));
      const float b = bf16_at(wgmma_operand_offset(op.desc_b, col, k, op.trans_b));
      sum += (float(op.scale_a) * a) * (float(op.scale_b) * b);
    }
    op.d[i] = op.accumulate ? op.d[i] + sum : sum;
  }
}

}  // namespace

unsigned shared_window_address(const void* p) {
  const auto* base = dynamic_shared_memory();
  const auto* byte = static_cast<const unsigned char*>(p);
  if (byte < base || byte >= base + dynamic_shared_memory_bytes()) {
    fail("a wgmma descriptor names " + std::string(p ? "an address" : "null") +
         " outside the launch's dynamic shared memory (the emulator's shared window)");
  }
  return unsigned(byte - base);
}

std::size_t wgmma_operand_offset(std::uint64_t desc, int mn, int k, bool mn_major) {
  const std::size_t start = std::size_t(desc & 0x3fff) << 4, lbo = std::size_t(desc >> 16 & 0x3fff) << 4,
                    sbo = std::size_t(desc >> 32 & 0x3fff) << 4;
  const int mode = int(desc >> 62 & 3u);
  const std::size_t W = mode == 0 ? 1 : mode == 1 ? 8 : mode == 2 ? 4 : 2;  // 16-byte chunks per swizzled row
  std::size_t off;
  if (!mn_major) {
    off = mode == 0 ? 16 * std::size_t(mn % 8) + sbo * std::size_t(mn / 8) + 2 * std::size_t(k % 8) + lbo * std::size_t(k / 8)
                    : 16 * W * std::size_t(mn % 8) + sbo * std::size_t(mn / 8) + 2 * std::size_t(k);
  } else {
    off = mode == 0 ? 2 * std::size_t(mn % 8) + sbo * std::size_t(mn / 8) + 16 * std::size_t(k % 8) + lbo * std::size_t(k / 8)
                    : 2 * std::size_t(mn % int(8 * W)) + lbo * std::size_t(mn / int(8 * W)) + 16 * W * std::size_t(k % 8) +
                          sbo * std::size_t(k / 8);
  }
  std::size_t address = start + off;
  if (W > 1) address ^= ((address >> 7) & (W - 1)) << 4;  // chunk bits [4, 4+log2 W) ^= bits [7, 7+log2 W)
  return address;
}

void wgmma_fence() { warpgroup_barrier("wgmma.fence"); }

void wgmma_commit_group() {
  warpgroup_barrier("wgmma.commit_group");
  ThreadOperations& mine = operations()[std::size_t(current_thread())];
  mine.committed.push_back(std::move(mine.open));
  mine.open.clear();
}

void wgmma_wait_group(int pending) {
  if (pending < 0 || pending > 7) fail("wgmma.wait_group " + std::to_string(pending) + ": N must be in 0..7");
  warpgroup_barrier("wgmma.wait_group");
  ThreadOperations& mine = operations()[std::size_t(current_thread())];
  while (int(mine.committed.size()) > pending) {
    for (const Operation& op : mine.committed.front()) compute(op);
    in_flight() -= mine.committed.front().size();
    mine.committed.erase(mine.committed.begin());
  }
}

void wgmma_bf16(float* d, int n, std::uint64_t desc_a, const std::uint32_t* a, std::uint64_t desc_b, bool accumulate,
                int scale_a, int scale_b, bool trans_a, bool trans_b) {
  const std::string where = "wgmma.mma_async m64n" + std::to_string(n) + "k16 in " + current_thread_name();
  if (n < 8 || n > 256 || n % 8 != 0) fail(where + ": N must be a multiple of 8 in 8..256");
  if ((scale_a != 1 && scale_a != -1) || (scale_b != 1 && scale_b != -1)) fail(where + ": the scales must be 1 or -1");
  if (a != nullptr && trans_a) fail(where + ": A from registers is K-major (no imm-trans-a)");
  if (a == nullptr) check_descriptor(desc_a, "A");
  check_descriptor(desc_b, "B");
  Slot mine;
  mine.n = n;
  mine.desc_a = a ? 0 : desc_a;
  mine.desc_b = desc_b;
  mine.accumulate = accumulate;
  mine.trans_a = trans_a;
  mine.trans_b = trans_b;
  mine.registers = a != nullptr;
  mine.scale_a = scale_a;
  mine.scale_b = scale_b;
  if (a) std::memcpy(mine.a, a, sizeof mine.a);
  Operation op{d, n, mine.desc_a, desc_b, accumulate, trans_a, trans_b, scale_a, scale_b, nullptr};
  warpgroup_exchange(mine, "wgmma.mma_async", [&](const Slot* group) {
    for (int t = 0; t < kWarpgroup; ++t) {
      if (!group[t].same_instruction(group[0])) {
        fail(where + ": thread " + std::to_string(t) + " of its warpgroup issued it with other operands (descriptors, N, "
                     "scales or flags must be the same in all 128 threads)");
      }
    }
    if (!mine.registers) return;
    // The RS form's A tile: register r, half h of thread t (w, lane 4g + q) holds
    // A[16w + g + 8(r%2)][2q + 8(r/2) + h].
    op.a = std::make_shared<std::array<float, 64 * 16>>();
    for (int t = 0; t < kWarpgroup; ++t) {
      const int w = t / 32, g = (t % 32) / 4, q = t % 4;
      for (int r = 0; r < 4; ++r) {
        for (int h = 0; h < 2; ++h) {
          const std::uint32_t u = (group[t].a[r] >> (16 * h) & 0xffffu) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          (*op.a)[std::size_t((16 * w + g + 8 * (r % 2)) * 16 + 2 * q + 8 * (r / 2) + h)] = f;
        }
      }
    }
  });
  operations()[std::size_t(current_thread())].open.push_back(std::move(op));
  ++in_flight();
}

void wgmma_block_end() {
  if (in_flight() > 0) {
    fail("a block exited with " + std::to_string(in_flight()) +
         " thread-operations of wgmma.mma_async not completed by a wgmma.wait_group (their accumulators were never "
         "written)");
  }
}

}  // namespace gc::emu
