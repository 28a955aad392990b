// GC_HD: a function both backends evaluate, on the host and (compiled by nvcc) on the device; the
// one definition the neutral core/ headers and step_verdict.hpp share. Under the CUDA emulator
// device code is host code, so it is empty there as in any host compiler.
#pragma once

#ifdef __CUDACC__
#define GC_HD __host__ __device__
#else
#define GC_HD
#endif
