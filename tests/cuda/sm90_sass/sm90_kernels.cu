// The sm_90a kernels whose machine code tests/cuda/sm90_sass/sass_test checks (HGMMA present, no
// spills): the Hopper attention forward at head_dim 64 and 128, as the bench shapes use them, and
// the experts' forward, dX and dW GEMMs at moe_3b's two projection shapes (768 -> 512, 512 -> 768).
#include "cuda/attention_sm90.cuh"
#include "cuda/grouped_gemm_sm90.cuh"

namespace {
struct Shape64 {
  static constexpr int kHeads = 12, kKvHeads = 12, kHeadDim = 64;
  static constexpr float kScale = 0.125f;
};
struct Shape128 {
  static constexpr int kHeads = 24, kKvHeads = 8, kHeadDim = 128;
  static constexpr float kScale = 0.08838834764831845f;
};
}  // namespace

template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape64>(gc::tree::cuda::bf16*, float*,
                                                                       const gc::tree::cuda::bf16*,
                                                                       const gc::tree::cuda::bf16*,
                                                                       const gc::tree::cuda::bf16*, int);
template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape128>(gc::tree::cuda::bf16*, float*,
                                                                        const gc::tree::cuda::bf16*,
                                                                        const gc::tree::cuda::bf16*,
                                                                        const gc::tree::cuda::bf16*, int);

template __global__ void gc::tree::cuda::grouped::sm90::forward_kernel<768, 512>(gc::tree::cuda::bf16*,
                                                                                 const gc::tree::cuda::bf16*,
                                                                                 const gc::tree::cuda::bf16*,
                                                                                 const std::int64_t*, int);
template __global__ void gc::tree::cuda::grouped::sm90::forward_kernel<512, 768>(gc::tree::cuda::bf16*,
                                                                                 const gc::tree::cuda::bf16*,
                                                                                 const gc::tree::cuda::bf16*,
                                                                                 const std::int64_t*, int);
template __global__ void gc::tree::cuda::grouped::sm90::backward_dx_kernel<768, 512, false>(gc::tree::cuda::bf16*,
                                                                                            const gc::tree::cuda::bf16*,
                                                                                            const gc::tree::cuda::bf16*,
                                                                                            const std::int64_t*, int);
template __global__ void gc::tree::cuda::grouped::sm90::backward_dx_kernel<512, 768, true>(gc::tree::cuda::bf16*,
                                                                                           const gc::tree::cuda::bf16*,
                                                                                           const gc::tree::cuda::bf16*,
                                                                                           const std::int64_t*, int);
template __global__ void gc::tree::cuda::grouped::sm90::backward_dw_kernel<768, 512>(float*,
                                                                                     const gc::tree::cuda::bf16*,
                                                                                     const gc::tree::cuda::bf16*,
                                                                                     const std::int64_t*);
template __global__ void gc::tree::cuda::grouped::sm90::backward_dw_kernel<512, 768>(float*,
                                                                                     const gc::tree::cuda::bf16*,
                                                                                     const gc::tree::cuda::bf16*,
                                                                                     const std::int64_t*);
