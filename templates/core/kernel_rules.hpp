// Which CUDA kernels a spec gets, as rules written once: the CUDA templates apply them, and
// gcompile includes this header to state the choice in `gcompile explain`
// (compiler/plan/cuda_kernels.cpp) and to size the padding scratch it plans
// (compiler/plan/align_scratch.cpp). Plain constexpr C++ (no CUDA, no knobs), so that the
// compiler and the tree compile the same text.
#pragma once

#include <cstdint>
#include <string_view>

namespace gc::tree::core {

// cuBLASLt's Hopper kernels need each operand's contiguous extent to be a multiple of 8 bf16 (16
// bytes): in bf16 a projection in or out of another width runs on zero-padded copies
// (cuda/aligned_linear.cuh).
inline constexpr int kAlignedWidth = 8;
constexpr std::int64_t aligned_width(std::int64_t n) { return (n + kAlignedWidth - 1) / kAlignedWidth * kAlignedWidth; }
constexpr bool width_is_aligned(std::int64_t n) { return n % kAlignedWidth == 0; }
// The scratch one padded projection of `rows` rows uses: activation elements for x̂ and dx̂ (when in
// is padded), ŷ (when out is) and Ŵ; fp32 elements for the padded dW.
constexpr std::int64_t aligned_act_elems(std::int64_t rows, std::int64_t in, std::int64_t out) {
  const std::int64_t ip = aligned_width(in), op = aligned_width(out);
  return (in != ip ? 2 * rows * ip : 0) + (out != op ? rows * op : 0) + op * ip;
}
constexpr std::int64_t aligned_grad_elems(std::int64_t in, std::int64_t out) {
  return aligned_width(out) * aligned_width(in);
}

// The tensor-core attention kernels (cuda/flash_attention.cuh) take bf16 with a head_dim that is
// a multiple of 16 (the mma's k), at most 128 (their shared-memory tiles).
inline constexpr int kFlashHeadDimStep = 16;
inline constexpr int kFlashMaxHeadDim = 128;
constexpr bool flash_attention_takes(bool bf16, std::int64_t head_dim) {
  return bf16 && head_dim % kFlashHeadDimStep == 0 && head_dim <= kFlashMaxHeadDim;
}

// The Hopper attention kernels (cuda/attention_sm90.cuh forward, cuda/attention_sm90_backward.cuh
// backward: warpgroup MMAs, sm_90a code, compute capability 9.0 only) take bf16 with head_dim 64
// or 128 (their [64][head_dim] shared tiles and m64nDk16 products) and whole GQA groups.
constexpr bool sm90_attention_takes(bool bf16, std::int64_t head_dim, std::int64_t heads, std::int64_t kv_heads) {
  return bf16 && (head_dim == 64 || head_dim == 128) && kv_heads > 0 && heads % kv_heads == 0;
}
// Which tensor-core kernels a run uses for attention and for the experts (train --attention,
// --experts): automatic, the mma.sync kernels (compute capability 8.0+), or the Hopper (wgmma)
// kernels, which only a tree with sm_90a code on a compute capability 9.0 GPU can run.
enum class TensorCoreKernels { automatic, mma, wgmma };
struct KernelChoices {
  TensorCoreKernels attention = TensorCoreKernels::automatic;  // --attention
  TensorCoreKernels experts = TensorCoreKernels::automatic;    // --experts
};
// train's and parity's flags: sets the choice `flag` names (--attention or --experts) to `text`
// (auto, mma or wgmma); false, changing nothing, for another flag or text.
constexpr bool set_kernel_choice(KernelChoices& choices, std::string_view flag, std::string_view text) {
  TensorCoreKernels* choice = flag == "--attention" ? &choices.attention
                              : flag == "--experts" ? &choices.experts
                                                    : nullptr;
  if (choice == nullptr || (text != "auto" && text != "mma" && text != "wgmma")) return false;
  *choice = text == "mma" ? TensorCoreKernels::mma
            : text == "wgmma" ? TensorCoreKernels::wgmma
                              : TensorCoreKernels::automatic;
  return true;
}
// Whether automatic picks the wgmma kernels where they can run. Not yet: they pass the emulator's
// tests (on a GPU only the attention forward's and the grouped GEMMs' self-tests have run, and the
// attention backward and the trees' wgmma paths never), and no GPU has timed them against the
// mma.sync kernels since their last change (docs/performance.md); the kit's attention,
// moe_experts, bench and moe_3b_wgmma rows do, and these flip when they show them faster.
inline constexpr bool kWgmmaAttentionByDefault = false;
inline constexpr bool kWgmmaExpertsByDefault = false;

// The grouped expert GEMM (cuda/grouped_gemm.cuh) takes bf16 projections in -> out in whole
// 64-column tiles on both sides.
inline constexpr int kGroupedGemmTile = 64;
constexpr bool grouped_gemm_takes(bool bf16, std::int64_t in, std::int64_t out) {
  return bf16 && in % kGroupedGemmTile == 0 && out % kGroupedGemmTile == 0;
}
// Its Hopper version (cuda/grouped_gemm_sm90.cuh: warpgroup MMAs, sm_90a) takes the experts'
// projections d_model -> expert_d_ff and back, forward, dX and dW, when both are whole 128-column
// tiles (its output tiles are 128 wide; its K stages 64 deep).
inline constexpr int kSm90GroupedGemmTile = 128;
constexpr bool sm90_grouped_gemm_takes(bool bf16, std::int64_t d_model, std::int64_t expert_d_ff) {
  return bf16 && d_model % kSm90GroupedGemmTile == 0 && expert_d_ff % kSm90GroupedGemmTile == 0;
}

}  // namespace gc::tree::core
