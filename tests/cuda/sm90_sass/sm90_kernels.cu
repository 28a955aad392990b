// The sm_90a kernels whose machine code tests/cuda/sm90_sass/sass_test checks (HGMMA present, no
// spills, no serialized wgmma): the Hopper attention forward and the backward's dK/dV and dQ
// kernels (each with 1 and 2 warpgroups a block) at head_dim 64 and 128, as the bench shapes use them, and the experts' forward, dX and dW
// GEMMs at moe_3b's two projection shapes (768 -> 512, 512 -> 768).
#include "cuda/attention_sm90.cuh"
#include "cuda/attention_sm90_backward.cuh"
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

using gc::tree::cuda::bf16;

template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape64, 1>(bf16*, float*, const bf16*, const bf16*,
                                                                          const bf16*, int);
template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape64, 2>(bf16*, float*, const bf16*, const bf16*,
                                                                          const bf16*, int);
template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape128, 1>(bf16*, float*, const bf16*, const bf16*,
                                                                           const bf16*, int);
template __global__ void gc::tree::cuda::sm90::forward_kernel<Shape128, 2>(bf16*, float*, const bf16*, const bf16*,
                                                                           const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dkdv_kernel<Shape64, 1>(bf16*, bf16*, const bf16*, const float*,
                                                                                  const float*, const bf16*,
                                                                                  const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dq_kernel<Shape64, 1>(bf16*, const bf16*, const float*,
                                                                                const float*, const bf16*,
                                                                                const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dkdv_kernel<Shape64, 2>(bf16*, bf16*, const bf16*, const float*,
                                                                                  const float*, const bf16*,
                                                                                  const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dq_kernel<Shape64, 2>(bf16*, const bf16*, const float*,
                                                                                const float*, const bf16*,
                                                                                const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dkdv_kernel<Shape128, 1>(bf16*, bf16*, const bf16*, const float*,
                                                                                  const float*, const bf16*,
                                                                                  const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dq_kernel<Shape128, 1>(bf16*, const bf16*, const float*,
                                                                                const float*, const bf16*,
                                                                                const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dkdv_kernel<Shape128, 2>(bf16*, bf16*, const bf16*, const float*,
                                                                                  const float*, const bf16*,
                                                                                  const bf16*, const bf16*, int);
template __global__ void gc::tree::cuda::sm90::backward_dq_kernel<Shape128, 2>(bf16*, const bf16*, const float*,
                                                                                const float*, const bf16*,
                                                                                const bf16*, const bf16*, int);

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
