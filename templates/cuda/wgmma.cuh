// Hopper's warpgroup MMA (sm_90a): wgmma.mma_async m64nNk16, bf16 operands in shared memory named
// by matrix descriptors, fp32 accumulators in registers, with its fence / commit / wait. Under the
// CUDA emulator (-DGC_CUDA_EMULATOR) each calls its gc::emu:: stand-in
// (tests/cuda_emulator/gc_emu/wgmma.hpp, where the layouts are written out as the emulator reads
// them); tests/cuda/wgmma_test.cu checks both against scalar products, on a GPU against the real
// instruction (the GPU kit's kernels row).
//
// A warpgroup is 4 consecutive warps (threads 128w .. 128w+127 of the block); all 128 execute each
// of these together. The sequence for D (+)= A·Bᵀ, A a 64×16 tile and B an N×16 tile, both K-major:
//   fence();  mma_bf16<N>(d, a_desc, b_desc, accumulate);  commit();  wait<0>();
// Thread t of the warpgroup (w = t/32, lane = 4g + q) holds in d[i] (i < N/2):
//   D[16w + g + 8·((i/2)%2)][8·(i/4) + 2q + i%2].
// Operands live in dynamic shared memory (cuda/hopper.cuh's dynamic_shared, 1024-byte aligned).
// Layout of a K-major operand (element (r, k), r = row of A or of B):
//   Swizzle::none  8×16-byte core matrices: byte 16·(r%8) + 2·(k%8) of core matrix (r/8, k/8),
//                  which starts at SBO·(r/8) + LBO·(k/8);
//   Swizzle::b128  rows of 128 bytes (64 bf16) in groups of 8 (SBO apart, 1024 for dense tiles);
//                  16-byte chunk c of row r stored at chunk c ^ (r % 8); the k-steps of a row are
//                  the descriptor's start advanced by 32 bytes each.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/hopper.cuh"

#ifdef GC_CUDA_EMULATOR
#include "gc_emu/wgmma.hpp"
#endif

namespace gc::tree::cuda::wgmma {

enum class Swizzle : unsigned { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// The shared-memory matrix descriptor of the operand tile at `smem`: start, leading and stride
// byte offsets (multiples of 16), swizzle mode; base offset 0 (tiles start on their pattern).
__device__ __forceinline__ std::uint64_t descriptor(const void* smem, Swizzle swizzle, unsigned lbo_bytes,
                                                    unsigned sbo_bytes) {
#ifdef GC_CUDA_EMULATOR
  const unsigned address = gc::emu::shared_window_address(smem);
#else
  const unsigned address = hopper::shared_address(smem);
#endif
  const auto field = [](unsigned bytes) { return std::uint64_t((bytes & 0x3ffffu) >> 4); };
  return field(address) | field(lbo_bytes) << 16 | field(sbo_bytes) << 32 | std::uint64_t(swizzle) << 62;
}

// wgmma.fence: before the first MMA, and after this thread touched the accumulators otherwise.
__device__ __forceinline__ void fence() {
#ifdef GC_CUDA_EMULATOR
  gc::emu::wgmma_fence();
#else
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

// wgmma.commit_group: the MMAs issued since the last commit become one group.
__device__ __forceinline__ void commit() {
#ifdef GC_CUDA_EMULATOR
  gc::emu::wgmma_commit_group();
#else
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// wgmma.wait_group: waits until at most PENDING of the newest groups are in flight; only then may
// their accumulators be read or their operand tiles be overwritten.
template <int PENDING>
__device__ __forceinline__ void wait() {
  static_assert(PENDING >= 0 && PENDING <= 7, "wgmma.wait_group: 0..7");
#ifdef GC_CUDA_EMULATOR
  gc::emu::wgmma_wait_group(PENDING);
#else
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(PENDING) : "memory");
#endif
}

// wgmma.mma_async.m64nNk16.f32.bf16.bf16, both operands from shared memory:
// D = A·Bᵀ + (accumulate ? D : 0), A the 64×16 tile of desc_a, B the N×16 tile of desc_b, each
// K-major, or MN-major when TRANS_A / TRANS_B (the transpose bits: A[m][k] with m contiguous, B[n][k]
// with n contiguous; core matrices of 8 k-rows × 8 contiguous m or n, as the V tile of
// cuda/attention_sm90.cuh).
template <int N, bool TRANS_A = false, bool TRANS_B = false>
__device__ __forceinline__ void mma_bf16(float (&d)[N / 2], std::uint64_t desc_a, std::uint64_t desc_b, bool accumulate) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma: N of 16, 32, 64 or 128 (add the others when needed)");
#ifdef GC_CUDA_EMULATOR
  gc::emu::wgmma_bf16(d, N, desc_a, nullptr, desc_b, accumulate, 1, 1, TRANS_A, TRANS_B);
#else
  if constexpr (N == 16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8,"
        " %9, p, 1, 1, %11, %12;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_A)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 32) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
        "%9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_A)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 64) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, "
        "%9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %"
        "27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_A)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 128) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8,"
        " %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, "
        "%27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, "
        "%45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, "
        "%63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_A)), "n"(int(TRANS_B)));
  }
#endif
}

// The register-A form (wgmma.mma_async with A in registers): A is the 64×16 tile held by the
// warpgroup's threads, thread t (w = t/32, lane = 4g + q) giving in a[r] the bf16 pair
// A[16w + g + 8·(r%2)][2q + 8·(r/2) + h], h = 0 in the low half (the accumulator layout of a
// previous product, packed in pairs: attention's P·V). B from desc_b, K-major, or MN-major when
// TRANS_B (B[n][k] with n contiguous: a V tile stored [keys][head_dim]).
template <int N, bool TRANS_B>
__device__ __forceinline__ void mma_bf16_rs(float (&d)[N / 2], const std::uint32_t (&a)[4], std::uint64_t desc_b,
                                            bool accumulate) {
  static_assert(N == 16 || N == 32 || N == 64 || N == 128, "wgmma: N of 16, 32, 64 or 128 (add the others when needed)");
#ifdef GC_CUDA_EMULATOR
  gc::emu::wgmma_bf16(d, N, 0, a, desc_b, accumulate, 1, 1, false, TRANS_B);
#else
  if constexpr (N == 16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, "
        "%9, %10, %11}, %12, p, 1, 1, %14;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 32) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9"
        ", %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 64) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9"
        ", %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, "
        "%28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_B)));
  }
  if constexpr (N == 128) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %"
        "9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27,"
        " %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %"
        "46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%"
        "64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),
          "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),
          "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),
          "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),
          "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),
          "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)), "n"(int(TRANS_B)));
  }
#endif
}

}  // namespace gc::tree::cuda::wgmma
