// Hopper (sm_90a) building blocks for the attention kernels of issue 38: dynamic shared memory,
// mbarriers, bulk copies global → shared that complete on an mbarrier, and setmaxnreg; the
// warpgroup MMA is cuda/wgmma.cuh. Under the CUDA emulator (-DGC_CUDA_EMULATOR) each calls its
// gc::emu:: stand-in (tests/cuda_emulator/gc_emu/hopper.hpp, with the PTX ISA's rules as we read
// them); tests/cuda/hopper_test.cu runs the same kernels on a GPU and under the emulator.
//
// The pattern (one producer thread, a phase per tile):
//   if (threadIdx.x == 0) mbarrier_init(&bar, 1);
//   __syncthreads();
//   if (threadIdx.x == 0) { mbarrier_arrive_expect_tx(&bar, bytes); bulk_copy_g2s(dst, src, bytes, &bar); }
//   mbarrier_wait(&bar, phase);   // every consumer; phase = 0, 1, 0, ... for tiles 0, 1, 2, ...
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

#ifdef GC_CUDA_EMULATOR
#include "gc_emu/hopper.hpp"
#endif

namespace gc::tree::cuda::hopper {

// The launch's dynamic shared memory (kernel<<<grid, block, bytes>>>), 1024-byte aligned (a
// 128-byte-swizzled tile needs it); more than 48 KiB needs
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), 227 KiB at most.
__device__ __forceinline__ unsigned char* dynamic_shared() {
#ifdef GC_CUDA_EMULATOR
  return gc::emu::dynamic_shared_memory();
#else
  extern __shared__ __align__(1024) unsigned char gc_dynamic_shared[];
  return gc_dynamic_shared;
#endif
}

#ifndef GC_CUDA_EMULATOR
__device__ __forceinline__ unsigned shared_address(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
#endif

// mbarrier.init: `count` arrivals complete a phase (with the transactions expected in it). One
// thread initializes; a __syncthreads makes it visible to the block.
__device__ __forceinline__ void mbarrier_init(std::uint64_t* bar, unsigned count) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mbarrier_init(bar, count);
#else
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
#endif
}

// mbarrier.inval: before the word is used as ordinary memory again.
__device__ __forceinline__ void mbarrier_inval(std::uint64_t* bar) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mbarrier_inval(bar);
#else
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
#endif
}

// mbarrier.arrive: one arrival in the current phase.
__device__ __forceinline__ void mbarrier_arrive(std::uint64_t* bar) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mbarrier_arrive(bar);
#else
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(shared_address(bar))
               : "memory");
#endif
}

// mbarrier.arrive.expect_tx: the phase also waits for `bytes` of transactions (bulk copies), then
// one arrival.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mbarrier_arrive_expect_tx(bar, bytes);
#else
  asm volatile("{\n .reg .b64 state;\n mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n}\n" ::"r"(
                   shared_address(bar)),
               "r"(bytes)
               : "memory");
#endif
}

// Whether the phase of parity `parity` has completed (mbarrier.try_wait.parity, one test).
__device__ __forceinline__ bool mbarrier_try_wait(std::uint64_t* bar, unsigned parity) {
#ifdef GC_CUDA_EMULATOR
  return gc::emu::mbarrier_try_wait_parity(bar, parity);
#else
  unsigned done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
#endif
}

// Waits until the phase of parity `parity` has completed (tile i of a ring of one barrier per
// stage waits with parity (i / stages) % 2).
__device__ __forceinline__ void mbarrier_wait(std::uint64_t* bar, unsigned parity) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::mbarrier_wait_parity(bar, parity);
#else
  while (!mbarrier_try_wait(bar, parity)) {
  }
#endif
}

// cp.async.bulk global → shared of `bytes` (a multiple of 16; both addresses 16-byte aligned),
// completing `bytes` transactions on `bar` (announced there with mbarrier_arrive_expect_tx).
__device__ __forceinline__ void bulk_copy_g2s(void* smem, const void* gmem, unsigned bytes, std::uint64_t* bar) {
#ifdef GC_CUDA_EMULATOR
  gc::emu::bulk_copy_global_to_shared(smem, gmem, bytes, bar);
#else
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(smem)),
               "l"(gmem), "r"(bytes), "r"(shared_address(bar))
               : "memory");
#endif
}

// fence.proxy.async: shared memory written by ordinary stores becomes visible to the async proxy
// (wgmma's operand reads, bulk copies) of this thread. (The emulator has one proxy: a no-op.)
__device__ __forceinline__ void fence_proxy_async() {
#ifndef GC_CUDA_EMULATOR
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

// setmaxnreg.{inc,dec}: the warpgroup's register budget per thread (a multiple of 8 in [24, 256]);
// producer warpgroups give registers to the consumers.
template <unsigned REGISTERS, bool INCREASE>
__device__ __forceinline__ void set_max_registers() {
  static_assert(REGISTERS % 8 == 0 && REGISTERS >= 24 && REGISTERS <= 256, "setmaxnreg: a multiple of 8 in [24, 256]");
#ifdef GC_CUDA_EMULATOR
  gc::emu::setmaxnreg(REGISTERS);
#else
  if constexpr (INCREASE) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
  } else {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGISTERS));
  }
#endif
}

}  // namespace gc::tree::cuda::hopper
