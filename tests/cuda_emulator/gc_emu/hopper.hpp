// CUDA emulator: the Hopper (sm_90a) features the attention kernels of issue 38 build on, as
// templates/cuda/hopper.cuh calls them where a GPU build has the PTX. Each follows our reading of
// the PTX ISA (sections named below); tests/cuda_emulator/hopper_checks.cpp checks them against
// plain references, and tests/cuda/hopper_test.cu runs the same layouts on a GPU (the kit's
// kernels row), since the emulator only encodes our reading.
//
// Dynamic shared memory (`extern __shared__`): one buffer per launch of the size the launch asks
// for, aligned to 1024 bytes, filled with 0xff bytes (NaN as float or bf16) at the start of every
// block, so a kernel that reads what its block has not written sees NaN. A launch asking more than
// 48 KiB needs cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)
// first; 227 KiB (232,448 bytes) is the most a Hopper block may have.
//
// mbarrier (PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"): a
// 64-bit object in shared memory with a phase, an expected arrival count, a pending arrival count
// and a transaction count. init sets the expected and pending counts; arrive takes one from the
// pending count; expect_tx adds bytes to the transaction count and complete_tx takes them away;
// the phase completes when both reach zero, and the next phase starts with the expected count.
// try_wait.parity(p) is true once the phase of parity p has completed (the current phase's
// parity is no longer p). Here the state lives beside the 64-bit word, keyed by its address.
//
// Bulk copies (cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes): 16-byte
// aligned addresses, a size that is a multiple of 16. The bytes land, and complete_tx is signalled
// on the copy's mbarrier, only when a thread waits on (or tests) that mbarrier: a kernel that reads
// the destination before waiting sees the old bytes, as it may on a GPU. A block that exits with
// a copy in flight aborts.
//
// wgmma (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"): see
// gc_emu/wgmma.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gc::emu {

// The launch's dynamic shared memory (aborts in a launch that asked for none).
unsigned char* dynamic_shared_memory();
std::size_t dynamic_shared_memory_bytes();

// mbarrier.init.shared::cta.b64: count in [1, 2^20 - 1]; the word must be 8-byte aligned.
void mbarrier_init(std::uint64_t* bar, unsigned count);
// mbarrier.inval.shared::cta.b64: the word may be reused as ordinary memory (or init again).
void mbarrier_inval(std::uint64_t* bar);
// mbarrier.arrive.shared::cta.b64: returns the state token of the phase it arrived in.
std::uint64_t mbarrier_arrive(std::uint64_t* bar);
// mbarrier.expect_tx / mbarrier.arrive.expect_tx: bytes in [0, 2^20 - 1].
void mbarrier_expect_tx(std::uint64_t* bar, unsigned bytes);
std::uint64_t mbarrier_arrive_expect_tx(std::uint64_t* bar, unsigned bytes);
// mbarrier.try_wait.parity: whether the phase of this parity has completed (lands the mbarrier's
// bulk copies first). Never loops: a kernel's wait loop is mbarrier_wait_parity.
bool mbarrier_try_wait_parity(std::uint64_t* bar, unsigned parity);
// The kernels' wait loop (`while (!try_wait.parity) {}`): this CUDA thread waits as a fiber until
// the phase of this parity completes; when no thread can make it complete, that is a deadlock and
// the emulator aborts naming the mbarrier.
void mbarrier_wait_parity(std::uint64_t* bar, unsigned parity);

// cp.async.bulk global -> shared, completing `bytes` transactions on `bar`.
void bulk_copy_global_to_shared(void* dst, const void* src, unsigned bytes, std::uint64_t* bar);

// setmaxnreg.{inc,dec}.sync.aligned.u32: checked (a multiple of 8 in [24, 256]), otherwise a no-op.
void setmaxnreg(unsigned registers);

}  // namespace gc::emu
