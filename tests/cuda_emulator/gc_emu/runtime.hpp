// CUDA emulator: the runtime API the project calls (src/runtime.cpp). "Device" memory is host
// memory the emulator allocated and tracks: cudaMalloc fills it with 0xff bytes (NaN in float,
// bf16 and double), copies and memsets must stay inside one allocation and name the right
// direction, and every failure is recorded as the sticky error cudaGetLastError returns (with the
// reason printed to stderr). The default stream is synchronous: kernels, cuBLASLt calls and
// copies on it have completed when the call returns (except the deferred uploads below).
// Created streams queue their work (see cudaStreamCreateWithFlags).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "gc_emu/types.hpp"

cudaError_t cudaMalloc(void** ptr, std::size_t bytes);
template <typename T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind);
// From page-locked host memory (cudaMallocHost) to the device, the copy is checked now but runs
// only at the next stream operation or at a synchronization that covers it (cudaEventSynchronize
// of an event recorded after it), reading the host bytes then, as a GPU may: a host that reuses
// the source too early sends the new bytes. Every other copy runs at once.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream = nullptr);
// Page-locked host memory: host memory the emulator tracks (copies from it may be deferred).
cudaError_t cudaMallocHost(void** ptr, std::size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
// Events (see types.hpp): create, record and destroy are checked for a live event; synchronize
// runs the deferred copies queued before the event's record.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventCreate(cudaEvent_t* event);
// Milliseconds of host time between the two records (everything before a record has run).
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop);
// Streams (src/streams.cpp). A created stream queues its operations (cudaMemcpyAsync,
// cudaMemsetAsync, the emulated NCCL's collectives: nccl.h) and runs them in order only when
// something waits for them: cudaStreamWaitEvent or cudaEventSynchronize on an event recorded on
// it after them, cudaStreamSynchronize, cudaDeviceSynchronize or cudaStreamDestroy; a stream
// created without cudaStreamNonBlocking also before the next default-stream operation (the
// legacy default stream's implicit synchronization). Work is therefore as late as a GPU may run
// it: a consumer that does not wait for a stream reads the buffer before its work lands.
// Kernels always run on the default stream (gc::tree::cuda::launch has no stream argument).
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
// The event's stream runs up to the event's record (on the default stream nothing is left to run).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
// One device, unless the environment sets GC_CUDA_EMULATOR_DEVICES=N: 0 tests the no-GPU path,
// 2 or more give each rank of a data-parallel job its own device number (all share one memory).
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
// Compute capability 9.0, or GC_CUDA_EMULATOR_CC=MAJOR.MINOR (to test the checks for older GPUs).
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
// total: a nominal 80 GiB; free: total minus the bytes currently allocated.
cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total);

// Every kernel has an "image" for the emulated device, unless
// GC_CUDA_EMULATOR_NO_KERNEL_IMAGE=1 (a build for other architectures).
cudaError_t emulated_kernel_image();
template <typename Kernel>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, Kernel*) {
  *attr = cudaFuncAttributes{90, 90, 32, 1024};
  return emulated_kernel_image();
}

namespace gc::emu {
cudaError_t set_function_attribute(const void* kernel, cudaFuncAttribute attribute, int value);
}
// cudaFuncAttributeMaxDynamicSharedMemorySize is kept per kernel and checked at launch (more than
// 48 KiB of dynamic shared memory needs it; at most 227 KiB; gc_emu/hopper.hpp); the carveout is
// accepted and ignored.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  return gc::emu::set_function_attribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

namespace gc::emu {

// Whether [ptr, ptr + bytes) lies inside one live device allocation (bytes may be 0: then ptr
// may also be the allocation's end).
bool is_device_range(const void* ptr, std::size_t bytes);
// Records `error` as the sticky last error and prints "gcompile CUDA emulator: <what>".
cudaError_t record_error(cudaError_t error, const std::string& what);
// Bytes allocated by cudaMalloc and not yet freed.
std::size_t device_bytes_in_use();
// Runs the host→device copies from page-locked memory still pending (see cudaMemcpyAsync): every
// stream operation (a launch, another copy or memset, a cuBLASLt matmul, a synchronization) calls
// it first, as the stream would have run them before.
void run_pending_copies();
// Runs `op` now on the default stream (stream == nullptr), else queues it on the created stream
// (an error for a stream that is not live).
cudaError_t enqueue(cudaStream_t stream, std::function<void()> op);

}  // namespace gc::emu

namespace gc::emu {

// Calls made so far after which a real GPU's host waits for the device work queued before them:
// cudaMemcpy (either direction), cudaMemset, cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaMalloc, cudaFree, cudaMallocHost and cudaFreeHost. (cudaEventSynchronize is left out: the
// pinned uploads wait on events recorded several uploads earlier, which a GPU has long passed.)
// Tests use it to check that a training step queues its work without stalls.
std::int64_t host_waits();

}  // namespace gc::emu
