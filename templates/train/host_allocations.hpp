// How many times this process has called the global operator new. The train
// program replaces operator new with a counting one (train_main.cpp), so its
// summary can show that a training step allocates nothing on the host after
// the first one (buffers, batches and scratch are all reused).
#pragma once

#include <cstdint>

namespace gc::tree {

std::int64_t host_allocations();

}  // namespace gc::tree
