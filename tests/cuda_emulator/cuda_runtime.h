// CUDA emulator (tests/cuda_emulator/README.md): stands in for <cuda_runtime.h> when the CUDA
// sources are compiled by the host compiler with -DGC_CUDA_EMULATOR and this directory first on
// the include path. Kernels then run on the CPU, one fiber per CUDA thread.
#pragma once

#ifndef GC_CUDA_EMULATOR
#error "the CUDA emulator's headers need -DGC_CUDA_EMULATOR"
#endif

#include "gc_emu/device.hpp"
#include "gc_emu/launch.hpp"
#include "gc_emu/runtime.hpp"
#include "gc_emu/types.hpp"
