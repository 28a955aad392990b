// CUDA emulator: device memory, errors and device queries (gc_emu/runtime.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "gc_emu/runtime.hpp"
#include "internal.hpp"

namespace gc::emu {
namespace {

constexpr std::size_t kAlignment = 256;  // cudaMalloc's guarantee
constexpr std::size_t kNominalTotal = std::size_t(80) << 30;

struct PendingCopy {
  void* dst;
  const void* src;
  std::size_t bytes;
  std::uint64_t sequence;  // in queue order
};

struct Memory {
  std::map<const char*, std::size_t> allocations;  // base → bytes
  std::size_t in_use = 0;
  cudaError_t last_error = cudaSuccess;
  std::map<const char*, std::size_t> pinned;  // cudaMallocHost: base → bytes
  std::vector<PendingCopy> pending;           // deferred host→device copies, oldest first
  std::uint64_t next_sequence = 1;
};

Memory& memory() {
  static Memory m;
  return m;
}

// The allocation of `allocations` (base → bytes) containing [p, p + bytes), or end().
std::map<const char*, std::size_t>::const_iterator find_in(const std::map<const char*, std::size_t>& allocations,
                                                           const void* ptr, std::size_t bytes) {
  const char* p = static_cast<const char*>(ptr);
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return allocations.end();
  --it;
  const std::size_t offset = std::size_t(p - it->first);
  if (offset > it->second || bytes > it->second - offset) return allocations.end();
  return it;
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

cudaError_t check_range(const void* p, std::size_t bytes, const char* call, const char* which) {
  if (is_device_range(p, bytes)) return cudaSuccess;
  return record_error(cudaErrorInvalidValue, std::string(call) + ": " + which + " [" + hex(p) + ", +" +
                                                 std::to_string(bytes) + ") is not inside one device allocation");
}

cudaError_t check_host(const void* p, const char* call, const char* which) {
  if (!is_device_range(p, 0)) return cudaSuccess;
  return record_error(cudaErrorInvalidValue, std::string(call) + ": " + which + " " + hex(p) +
                                                 " is device memory, but the copy kind says host");
}

}  // namespace

bool is_device_range(const void* ptr, std::size_t bytes) {
  return ptr != nullptr && find_in(memory().allocations, ptr, bytes) != memory().allocations.end();
}

cudaError_t record_error(cudaError_t error, const std::string& what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "gcompile CUDA emulator: %s (%s)\n", what.c_str(), cudaGetErrorName(error));
    memory().last_error = error;
  }
  return error;
}

std::size_t device_bytes_in_use() { return memory().in_use; }

// Runs the pending copies queued up to `sequence` (all of them by default).
void run_pending_copies_until(std::uint64_t sequence) {
  auto& pending = memory().pending;
  std::size_t done = 0;
  while (done < pending.size() && pending[done].sequence <= sequence) {
    std::memmove(pending[done].dst, pending[done].src, pending[done].bytes);
    ++done;
  }
  pending.erase(pending.begin(), pending.begin() + std::ptrdiff_t(done));
}

// Every default-stream operation: first what the legacy default stream waits for, the work
// queued on blocking streams (src/streams.cpp), then the deferred copies.
void run_pending_copies() {
  drain_blocking_streams();
  run_pending_copies_until(~std::uint64_t(0));
}

std::uint64_t last_queued_sequence() { return memory().next_sequence - 1; }

bool is_pinned_range(const void* ptr, std::size_t bytes) {
  return ptr != nullptr && find_in(memory().pinned, ptr, bytes) != memory().pinned.end();
}

}  // namespace gc::emu

cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  gc::emu::count_host_wait();
  if (ptr == nullptr) return gc::emu::record_error(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  const std::size_t rounded = (bytes + gc::emu::kAlignment - 1) / gc::emu::kAlignment * gc::emu::kAlignment;
  void* p = std::aligned_alloc(gc::emu::kAlignment, rounded);
  if (p == nullptr) return gc::emu::record_error(cudaErrorMemoryAllocation, "cudaMalloc: out of memory");
  std::memset(p, 0xff, rounded);  // NaN in float, bf16 and double: unwritten outputs show
  gc::emu::memory().allocations.emplace(static_cast<const char*>(p), bytes);
  gc::emu::memory().in_use += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  gc::emu::count_host_wait();
  // cudaFree waits for the device: what every stream queued runs first, so work queued before a
  // free never reads or writes freed memory (as on a GPU) and a teardown that frees while a
  // collective is queued meets that collective here (issue 41).
  gc::emu::drain_all_streams();
  gc::emu::run_pending_copies();
  if (ptr == nullptr) return cudaSuccess;
  auto& m = gc::emu::memory();
  const auto it = m.allocations.find(static_cast<const char*>(ptr));
  if (it == m.allocations.end()) {
    return gc::emu::record_error(cudaErrorInvalidValue, "cudaFree: " + gc::emu::hex(ptr) + " is not an allocation");
  }
  m.in_use -= it->second;
  m.allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

namespace gc::emu {

namespace {
std::int64_t host_wait_count = 0;
}  // namespace

void count_host_wait() { ++host_wait_count; }
std::int64_t host_waits() { return host_wait_count; }

}  // namespace gc::emu

namespace gc::emu {
namespace {

// Checks a copy's kind and ranges (cudaMemcpyDefault resolved by where the pointers lie).
cudaError_t check_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, const char* call) {
  if (kind == cudaMemcpyDefault) {
    kind = is_device_range(dst, 0) ? (is_device_range(src, 0) ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                   : (is_device_range(src, 0) ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice) {
    return record_error(cudaErrorInvalidMemcpyDirection, std::string(call) + ": bad kind");
  }
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  cudaError_t e = dst_device ? check_range(dst, bytes, call, "destination") : check_host(dst, call, "destination");
  if (e != cudaSuccess) return e;
  return src_device ? check_range(src, bytes, call, "source") : check_host(src, call, "source");
}

}  // namespace

cudaError_t enqueue_copy(cudaStream_t stream, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
  if (e != cudaSuccess) return e;
  return enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
}

}  // namespace gc::emu

namespace {

cudaError_t copy_now(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  gc::emu::run_pending_copies();
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = gc::emu::check_copy(dst, src, bytes, kind, "cudaMemcpy");
  if (e != cudaSuccess) return e;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t memset_now(void* ptr, int value, std::size_t bytes) {
  gc::emu::run_pending_copies();
  if (bytes == 0) return cudaSuccess;
  const cudaError_t e = gc::emu::check_range(ptr, bytes, "cudaMemset", "range");
  if (e != cudaSuccess) return e;
  std::memset(ptr, value, bytes);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  gc::emu::count_host_wait();
  return copy_now(dst, src, bytes, kind);
}

// On the default stream: device-to-device copies and copies from page-locked memory do not make
// the host wait; a copy to or from pageable host memory does (as on a GPU, where it is staged).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (stream != nullptr) {  // a created stream: checked now, run in that stream's order
    return gc::emu::enqueue_copy(stream, dst, src, bytes, kind);
  }
  const bool to_device =
      kind == cudaMemcpyHostToDevice || (kind == cudaMemcpyDefault && gc::emu::is_device_range(dst, 0));
  if (kind == cudaMemcpyDeviceToDevice) return copy_now(dst, src, bytes, kind);
  if (bytes == 0 || !to_device || !gc::emu::is_pinned_range(src, bytes)) return cudaMemcpy(dst, src, bytes, kind);
  const cudaError_t e = gc::emu::check_range(dst, bytes, "cudaMemcpyAsync", "destination");
  if (e != cudaSuccess) return e;
  gc::emu::memory().pending.push_back({dst, src, bytes, gc::emu::memory().next_sequence++});
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, std::size_t bytes) {
  gc::emu::count_host_wait();
  return memset_now(ptr, value, bytes);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, std::size_t bytes, cudaStream_t stream) {
  if (stream == nullptr) return memset_now(ptr, value, bytes);
  const cudaError_t e = gc::emu::check_range(ptr, bytes, "cudaMemsetAsync", "range");
  if (e != cudaSuccess) return e;
  return gc::emu::enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
}

cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  gc::emu::count_host_wait();
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (*ptr == nullptr) return gc::emu::record_error(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory");
  gc::emu::memory().pinned[static_cast<const char*>(*ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  gc::emu::count_host_wait();
  gc::emu::run_pending_copies();  // (freeing a source with a copy in flight is a bug on a GPU)
  gc::emu::memory().pinned.erase(static_cast<const char*>(ptr));
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = gc::emu::memory().last_error;
  gc::emu::memory().last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return gc::emu::memory().last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorNotSupported: return "operation not supported";
  }
  return "unknown error";
}

namespace {
// GC_CUDA_EMULATOR_DEVICES=N (default 1): N identical devices (0: none, for the no-GPU path;
// 2 or more: one per rank of a data-parallel job on one machine).
int emulated_devices() {
  const char* env = std::getenv("GC_CUDA_EMULATOR_DEVICES");
  if (env == nullptr || *env == '\0') return 1;
  return std::max(0, std::atoi(env));
}

// The physical GPU behind visible device d: d itself, as when every process sees every GPU; with
// GC_CUDA_EMULATOR_GPU_PER_RANK=1, d + the process's local rank (OMPI_COMM_WORLD_LOCAL_RANK), as
// when the launcher gives each rank its own GPUs (srun --gpus-per-task, CUDA_VISIBLE_DEVICES per
// rank). It names the device's UUID, which is how ranks find out that they share a GPU.
int physical_device(int device) {
  const char* per_rank = std::getenv("GC_CUDA_EMULATOR_GPU_PER_RANK");
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (per_rank == nullptr || std::strcmp(per_rank, "1") != 0 || local == nullptr) return device;
  return device + std::atoi(local);
}
}  // namespace

cudaError_t cudaGetDeviceCount(int* count) {
  *count = emulated_devices();
  return *count > 0 ? cudaSuccess : gc::emu::record_error(cudaErrorNoDevice, "GC_CUDA_EMULATOR_DEVICES=0");
}

namespace {
int current_device = 0;
}  // namespace

cudaError_t cudaGetDevice(int* device) {
  if (emulated_devices() == 0) return gc::emu::record_error(cudaErrorNoDevice, "GC_CUDA_EMULATOR_DEVICES=0");
  *device = current_device;
  return cudaSuccess;
}

// The devices share one emulated memory: a device number only has to be valid.
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= emulated_devices()) {
    return gc::emu::record_error(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ")");
  }
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= emulated_devices()) {
    return gc::emu::record_error(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(device) + ")");
  }
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "gcompile CUDA emulator (CPU)");
  char uuid[17] = {};
  std::snprintf(uuid, sizeof uuid, "gc-emu-gpu-%05d", physical_device(device));
  std::memcpy(prop->uuid.bytes, uuid, 16);
  prop->totalGlobalMem = gc::emu::kNominalTotal;
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->multiProcessorCount = 1;
  prop->major = 9;
  prop->minor = 0;
  const char* cc = std::getenv("GC_CUDA_EMULATOR_CC");
  if (cc != nullptr && std::sscanf(cc, "%d.%d", &prop->major, &prop->minor) != 2) {
    return gc::emu::record_error(cudaErrorInvalidValue,
                                 std::string("GC_CUDA_EMULATOR_CC=") + cc + " (want MAJOR.MINOR)");
  }
  return cudaSuccess;
}

cudaError_t emulated_kernel_image() {
  const char* none = std::getenv("GC_CUDA_EMULATOR_NO_KERNEL_IMAGE");
  if (none != nullptr && std::strcmp(none, "1") == 0) {
    return gc::emu::record_error(cudaErrorNoKernelImageForDevice, "GC_CUDA_EMULATOR_NO_KERNEL_IMAGE=1");
  }
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(std::size_t* free, std::size_t* total) {
  *total = gc::emu::kNominalTotal;
  *free = gc::emu::kNominalTotal - gc::emu::device_bytes_in_use();
  return cudaSuccess;
}
