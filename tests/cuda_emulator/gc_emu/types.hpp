// CUDA emulator: the runtime's plain types (dim3, error codes, memcpy kinds, data types,
// device properties). Values follow the CUDA 12 headers so that printed codes mean the same.
#pragma once

#include <cstddef>

struct uint3 {
  unsigned x, y, z;
};

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorNotSupported = 801,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

// The default stream (nullptr) runs each operation when it is called; created streams queue
// theirs (gc_emu/runtime.hpp).
typedef struct CUstream_st* cudaStream_t;
inline constexpr unsigned cudaStreamDefault = 0x0, cudaStreamNonBlocking = 0x1;
// Events: kernels and most copies have completed when one is recorded; waiting on one also runs
// the deferred copies from page-locked memory queued before it (gc_emu/runtime.hpp).
typedef struct CUevent_st* cudaEvent_t;
inline constexpr unsigned cudaEventDefault = 0x0, cudaEventDisableTiming = 0x2;

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
  cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

struct cudaFuncAttributes {
  int binaryVersion;
  int ptxVersion;
  int numRegs;
  int maxThreadsPerBlock;
};

struct cudaUUID_t {
  char bytes[16];
};

struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;  // which physical device (GC_CUDA_EMULATOR_GPU_PER_RANK, runtime.cpp)
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  std::size_t sharedMemPerBlockOptin;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int multiProcessorCount;
  int major;
  int minor;
};
