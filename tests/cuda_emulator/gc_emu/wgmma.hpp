// CUDA emulator: the warpgroup MMA of Hopper, wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16
// (templates/cuda/wgmma.cuh calls these where a GPU build has the PTX), as we read the PTX ISA
// ("Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions") and CUTLASS's layouts
// (cute/atom/mma_traits_sm90_gmma.hpp, cute/arch/mma_sm90_desc.hpp).
//
// A warpgroup is 4 consecutive warps (128 threads, threads 128w .. 128w+127 of the block); every
// wgmma instruction is a collective of all 128 (a strict barrier, as the .sync.aligned forms
// require), and a descriptor must be the same in all of them.
//
// Operands in shared memory are named by 64-bit matrix descriptors:
//   bits 0-13 start address >> 4, 16-29 leading dimension byte offset (LBO) >> 4,
//   32-45 stride dimension byte offset (SBO) >> 4, 49-51 base offset (must be 0 here),
//   62-63 swizzle: 0 none, 1 128-byte, 2 64-byte, 3 32-byte.
// Here shared addresses are offsets into the launch's dynamic shared memory (gc_emu/hopper.hpp),
// whose base is 1024-byte aligned as on a GPU, so operands must live there. Element (mn, k) of a
// K-major operand (A: m×k, B: n×k, k contiguous; W = swizzle bytes / 16, 1 without swizzle) is at
//   none:     start + 16·(mn%8) + SBO·(mn/8) + 2·(k%8) + LBO·(k/8)
//   swizzled: start + 16W·(mn%8) + SBO·(mn/8) + 2·k                       (LBO unused)
// and of an MN-major one (imm-trans = 1) at
//   none:     start + 2·(mn%8) + SBO·(mn/8) + 16·(k%8) + LBO·(k/8)
//   swizzled: start + 2·(mn%8W) + LBO·(mn/8W) + 16W·(k%8) + SBO·(k/8)
// then the swizzle XORs address bits [4, 4+log2 W) with bits [7, 7+log2 W) of the same address.
//
// The accumulator: thread t = 128-thread index, w = t/32, lane = 4g + q; its register d[i]
// (i < N/2) holds D[16w + g + 8·((i/2)%2)][8·(i/4) + 2q + i%2]. A from registers (the RS form):
// a[r] holds A[16w + g + 8·(r%2)][2q + 8·(r/2) + h], h = 0 in the low half, 1 in the high.
//
// Asynchrony, strictly: an mma_async only records the operation; wait_group(n) computes every
// committed group but the n newest, reading the shared-memory operands then and writing the
// accumulators then. So a kernel that reads its accumulators before the wait sees the old values,
// and one that overwrites an operand tile before the wait gets a wrong product; either is a race
// on a GPU. Each output is the fp32 sum over k = 0..15 in increasing order, added to D last (the
// hardware's order is unspecified: results agree with a GPU to fp32 rounding, exactly when the
// sums are exact). A block that exits with an operation not waited for aborts.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gc::emu {

// The shared-window address of `p`, which must lie in the launch's dynamic shared memory.
unsigned shared_window_address(const void* p);

// Where element (mn, k) of an operand lies, as an offset into the dynamic shared memory, by the
// descriptor and the major-ness (the formulas above; exposed for the emulator's own tests).
std::size_t wgmma_operand_offset(std::uint64_t descriptor, int mn, int k, bool mn_major);

// wgmma.fence.sync.aligned, wgmma.commit_group.sync.aligned, wgmma.wait_group.sync.aligned N.
void wgmma_fence();
void wgmma_commit_group();
void wgmma_wait_group(int pending);

// wgmma.mma_async m64nNk16 bf16 → fp32: D (N/2 registers of this thread) = (scale_a·A)(scale_b·B)ᵀ
// + (accumulate ? D : 0). A from `desc_a`, or from the registers `a` (4 per thread, K-major) when
// `a` is not null; B from `desc_b`. scale_a, scale_b ∈ {1, -1}.
void wgmma_bf16(float* d, int n, std::uint64_t desc_a, const std::uint32_t* a, std::uint64_t desc_b, bool accumulate,
                int scale_a, int scale_b, bool trans_a, bool trans_b);

}  // namespace gc::emu
