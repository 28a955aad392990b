// CUDA emulator: what its source files share (not part of the stand-in API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "gc_emu/types.hpp"

namespace gc_emu {

// src/runtime.cpp: the deferred host→device copies from page-locked memory.
void run_pending_copies_until(std::uint64_t sequence);
std::uint64_t last_queued_sequence();
bool is_pinned_range(const void* ptr, std::size_t bytes);
// A checked copy run in `stream`'s order (a created stream).
cudaError_t enqueue_copy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);

// src/streams.cpp: runs what every blocking created stream has queued (the legacy default
// stream waits for it before each of its operations).
void drain_blocking_streams();

// src/runtime.cpp: host_waits()'s counter (a call that makes a GPU's host wait adds one).
void count_host_wait();

}  // namespace gc_emu
