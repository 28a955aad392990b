// CUDA emulator: what its source files share (not part of the stand-in API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "gc_emu/types.hpp"

namespace gc::emu {

// src/runtime.cpp: the deferred host→device copies from page-locked memory.
void run_pending_copies_until(std::uint64_t sequence);
std::uint64_t last_queued_sequence();
bool is_pinned_range(const void* ptr, std::size_t bytes);
// A checked copy run in `stream`'s order (a created stream).
cudaError_t enqueue_copy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);

// src/streams.cpp: runs what every blocking created stream has queued (the legacy default
// stream waits for it before each of its operations).
void drain_blocking_streams();
// src/streams.cpp: runs what every created stream has queued (cudaFree and ncclCommDestroy wait
// for the device, as CUDA's and NCCL's do).
void drain_all_streams();

// src/runtime.cpp: host_waits()'s counter (a call that makes a GPU's host wait adds one).
void count_host_wait();

// src/scheduler.cpp, for src/hopper.cpp: the running CUDA thread (linear index in its block, and
// "block (x,y,z) thread (x,y,z)"), the block's size; waiting as a fiber until `ready()` holds
// (checked whenever the scheduler sweeps; no thread able to run is a deadlock naming `what`);
// a barrier over the `count` threads of a named group; aborting with a message.
int current_thread();
int block_threads();
std::string current_thread_name();
void wait_until(std::function<bool()> ready, const std::string& what);
void group_barrier(int group, int count, const std::string& what);
[[noreturn]] void fail(const std::string& what);

// src/hopper.cpp, for the scheduler: a launch's dynamic shared memory (whether `bytes` fits the
// kernel's limit, else the launch error is recorded; the buffer every block of the grid gets),
// and the per-block state of mbarriers, bulk copies and wgmma groups (cleared at the start,
// checked at the end: a block that exits with a copy or an MMA in flight aborts).
bool dynamic_shared_memory_fits(const void* kernel, std::size_t bytes);
void set_dynamic_shared_memory(std::size_t bytes);
void hopper_block_begin();
void hopper_block_end();
// src/wgmma.cpp, for src/hopper.cpp's block hook: checks that no MMA is in flight.
void wgmma_block_end();

}  // namespace gc::emu
