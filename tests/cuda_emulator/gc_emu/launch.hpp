// CUDA emulator: kernel launches. gc::emu::launch(kernel, grid, block, smem, args...) is what
// gc::tree::cuda::launch (templates/cuda/common.cuh) calls in place of kernel<<<grid, block, smem>>>:
// the arguments are converted to the kernel's parameter types once (as a launch does), checked
// (a non-null pointer argument must point into device memory), and then every thread of every
// block calls the kernel with its own copy of them. Blocks run one after another in x, y, z order;
// the threads of a block are fibers on the calling thread (src/scheduler.cpp). Synchronous: the
// grid has finished when launch returns. A bad configuration or argument is reported the way
// the runtime reports it, through cudaGetLastError.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "gc_emu/runtime.hpp"
#include "gc_emu/types.hpp"

namespace gc::emu {

using GridBody = void (*)(const void* context);

// Runs body(context) once per CUDA thread of the grid (after validating the configuration;
// on a bad one it records cudaErrorInvalidConfiguration and runs nothing).
// `kernel` identifies the kernel (its cudaFuncSetAttribute settings; gc_emu/hopper.hpp).
void run_grid(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_smem, GridBody body, const void* context);

template <typename P>
bool check_argument(const P& value, std::size_t index) {
  if constexpr (std::is_pointer_v<P> && !std::is_function_v<std::remove_pointer_t<P>>) {
    if (value != nullptr && !is_device_range(value, 0)) {
      record_error(cudaErrorIllegalAddress,
                   "kernel argument " + std::to_string(index) + " is a pointer outside device memory");
      return false;
    }
  }
  return true;
}

template <typename Tuple, std::size_t... I>
bool check_arguments(const Tuple& args, std::index_sequence<I...>) {
  return (check_argument(std::get<I>(args), I) && ...);
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t dynamic_smem, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "wrong number of kernel arguments");
  using Arguments = std::tuple<std::decay_t<Params>...>;
  struct Context {
    void (*kernel)(Params...);
    Arguments args;
  };
  const Context context{kernel, Arguments(std::forward<Args>(args)...)};
  if (!check_arguments(context.args, std::index_sequence_for<Params...>{})) return;
  run_grid(reinterpret_cast<const void*>(kernel), grid, block, dynamic_smem, [](const void* c) {
    const Context& ctx = *static_cast<const Context*>(c);
    std::apply(ctx.kernel, ctx.args);  // by-value parameters: each thread gets its own copies
  }, &context);
}

}  // namespace gc::emu
