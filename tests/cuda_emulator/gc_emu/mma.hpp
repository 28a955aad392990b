// CUDA emulator: the warp-wide tensor-core instructions the kernels use (templates/cuda/mma.cuh
// calls these where a GPU build has the PTX): mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32,
// ldmatrix.sync.aligned.m8n8.{x2,x4}[.trans].shared.b16, and cp.async.cg.shared.global (16 bytes)
// with commit_group / wait_group.
//
// mma.sync: Every lane brings its fragments; the lanes exchange them through a per-warp table
// after a strict __syncwarp barrier (so the warp-collective rules apply: all 32 lanes must
// arrive, none in a divergent branch), and each lane computes its four outputs in fp32, summing k in increasing order and
// adding the accumulator last. Products of two bf16 are exact in fp32; the tensor core's own
// summation order is unspecified, so results agree with a GPU to fp32 rounding, not bit for bit.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
// lane = 4·g + t; a 32-bit register holds two bf16, the lower column/row in its low half:
//   A 16×16 row-major: a0 = A[g][2t..2t+1]  a1 = A[g+8][2t..2t+1]  a2 = A[g][2t+8..2t+9]  a3 = A[g+8][2t+8..2t+9]
//   B 16×8  (B[k][n]): b0 = B[2t..2t+1][g]  b1 = B[2t+8..2t+9][g]
//   C, D 16×8 fp32:    c0, c1 = C[g][2t], C[g][2t+1]   c2, c3 = C[g+8][2t], C[g+8][2t+1]
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace gc::emu {

inline float bf16_bits_to_float(std::uint32_t bits) {
  const std::uint32_t u = (bits & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline int linear_lane() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return int(linear % 32);
}

// Makes every lane's `value` visible to its whole warp: each lane writes its entry of a per-warp
// table, a strict __syncwarp (all 32 lanes, as the instructions require), and `use(entries)` reads
// the warp's 32 entries. Fibers switch only at barriers, so the table is stable during `use`. The
// table is double-buffered by the lane's exchange count: a lane that runs ahead to its next
// exchange writes the other table, and the one after that only once every lane has reached the
// barrier of the next exchange, that is, has finished reading this one (so one barrier an exchange
// suffices). Every lane of a warp makes the same exchanges (the barrier is strict), so the lanes
// of a warp agree on the table whatever kernels ran before.
template <typename T, typename F>
inline void warp_exchange(const T& value, F&& use) {
  thread_local T table[2][1024];            // [parity][linear thread index]: at most 1024 threads
  thread_local unsigned char parity[1024];  // each thread's exchange count, mod 2
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  T* const mine = table[parity[linear]];
  parity[linear] ^= 1u;
  mine[linear] = value;
  __syncwarp();
  use(&mine[linear / 32 * 32]);
}

// d += A·B for the warp's fragments (all 32 lanes call it together).
inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  struct Fragments {
    std::uint32_t a[4], b[2];
  };
  const int lane = linear_lane(), g = lane / 4, t = lane % 4;
  const Fragments mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  warp_exchange(mine, [&](const Fragments* lanes) {
    // Row g (and g + 8) of A sits in lanes 4g + s at k = 2s, 2s+1 (a0, a1) and 2s+8, 2s+9 (a2, a3);
    // column n of B in lanes 4n + s at k = 2s, 2s+1 (b0) and 2s+8, 2s+9 (b1). This lane's two rows
    // of A and two columns of B are unpacked once (64 conversions, not one per product).
    const auto unpack = [](float* out, int k, std::uint32_t reg) {  // the two bf16 at k and k + 1
      out[k] = bf16_bits_to_float(reg);
      out[k + 1] = bf16_bits_to_float(reg >> 16);
    };
    float a_rows[2][16], b_columns[2][16];
    for (int s = 0; s < 4; ++s) {
      const Fragments& f = lanes[4 * g + s];
      for (int row = 0; row < 2; ++row) {
        unpack(a_rows[row], 2 * s, f.a[row]);
        unpack(a_rows[row], 2 * s + 8, f.a[row + 2]);
      }
      for (int col = 0; col < 2; ++col) {
        const Fragments& h = lanes[4 * (2 * t + col) + s];
        unpack(b_columns[col], 2 * s, h.b[0]);
        unpack(b_columns[col], 2 * s + 8, h.b[1]);
      }
    }
    for (int row = 0; row < 2; ++row) {
      for (int col = 0; col < 2; ++col) {
        float sum = 0.0f;
        for (int k = 0; k < 16; ++k) sum += a_rows[row][k] * b_columns[col][k];
        d[2 * row + col] += sum;
      }
    }
  });
}

// ldmatrix: lanes 8m .. 8m+7 give the row addresses of 8×8 matrix m (m < COUNT; the other lanes'
// addresses are ignored); lane l receives in r[m] the two b16 at row l/4, columns 2(l%4) and
// 2(l%4)+1 of matrix m — or, with TRANS, at rows 2(l%4) and 2(l%4)+1 of column l/4 — the lower
// one in the low half. All 32 lanes call it together.
template <int COUNT, bool TRANS>
inline void ldmatrix(std::uint32_t (&r)[COUNT], const void* row) {
  static_assert(COUNT == 1 || COUNT == 2 || COUNT == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const int lane = linear_lane();
  const auto element = [](const void* row_address, int col) {
    std::uint16_t v;
    std::memcpy(&v, static_cast<const char*>(row_address) + 2 * col, sizeof v);
    return std::uint32_t(v);
  };
  warp_exchange(row, [&](const void* const* rows) {
    for (int m = 0; m < COUNT; ++m) {
      if (!TRANS) {
        const void* src = rows[8 * m + lane / 4];
        r[m] = element(src, 2 * (lane % 4)) | (element(src, 2 * (lane % 4) + 1) << 16);
      } else {
        r[m] = element(rows[8 * m + 2 * (lane % 4)], lane / 4) | (element(rows[8 * m + 2 * (lane % 4) + 1], lane / 4) << 16);
      }
    }
  });
}

// cp.async: a thread's 16-byte copies are held back until its cp.async.wait_group lets their group
// complete (commit_group closes a group), so a kernel that reads shared memory before waiting (or
// before the barrier after the wait) sees the old bytes, as it may on a GPU. The threads of a block
// run as fibers on one OS thread, so the pending groups are kept per OS thread and per thread index.
struct PendingCopy {
  void* dst;
  const void* src;
};
struct AsyncCopies {
  std::vector<PendingCopy> open;                    // issued since the last commit
  std::vector<std::vector<PendingCopy>> committed;  // oldest first
};
inline std::vector<AsyncCopies>& async_copies() {
  thread_local std::vector<AsyncCopies> per_thread;
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  if (per_thread.size() <= linear) per_thread.resize(linear + 1);
  return per_thread;
}
inline AsyncCopies& my_async_copies() {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  return async_copies()[linear];
}
inline void cp_async_16(void* dst, const void* src) { my_async_copies().open.push_back({dst, src}); }
inline void cp_async_commit() {
  AsyncCopies& c = my_async_copies();
  c.committed.push_back(std::move(c.open));
  c.open.clear();
}
// Completes every committed group but the `newest_pending` most recent ones.
inline void cp_async_wait(int newest_pending) {
  AsyncCopies& c = my_async_copies();
  while (int(c.committed.size()) > newest_pending) {
    for (const PendingCopy& p : c.committed.front()) std::memcpy(p.dst, p.src, 16);
    c.committed.erase(c.committed.begin());
  }
}

}  // namespace gc::emu
