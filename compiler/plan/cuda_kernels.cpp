#include "plan/cuda_kernels.hpp"

#include <cstdint>
#include <utility>

#include "common/text.hpp"
#include "core/kernel_rules.hpp"  // templates/core: the rules the tree applies

namespace gc {
namespace {

std::string str(std::int64_t v) { return std::to_string(v); }

// templates/cuda/flash_attention.cuh, flash_attention_supported<S, T>().
KernelChoice attention(const Spec& spec) {
  const std::int64_t hd = spec.model.head_dim;
  const bool bf16 = spec.train.precision == Precision::bf16;
  if (tree::core::flash_attention_takes(bf16, hd)) {
    return {"attention", "cuda/flash_attention.cuh: tensor cores (mma.sync m16n8k16), forward and backward",
            "bf16, head_dim " + str(hd)};
  }
  return {"attention", "cuda/attention.cuh: the reference kernels (no tensor cores)",
          bf16 ? "head_dim " + str(hd) + " is not a multiple of " + str(tree::core::kFlashHeadDimStep) + " up to " +
                     str(tree::core::kFlashMaxHeadDim)
               : "fp32"};
}

const char* const kAutoKeepsMma = "; auto keeps mma.sync until the GPU kit times these faster";

// templates/cuda/attention_sm90.cuh, wgmma_attention_chosen<S, T>(): the Hopper kernels, where
// train --attention picks them (a compute capability 9.0 GPU and a tree with sm_90a code).
bool hopper_attention(const Spec& spec, KernelChoice& choice) {
  const ModelSpec& m = spec.model;
  if (!tree::core::sm90_attention_takes(spec.train.precision == Precision::bf16, m.head_dim, m.n_heads,
                                        m.n_kv_heads)) {
    return false;
  }
  choice = {"sm_90a attn",
            "cuda/attention_sm90.cuh, cuda/attention_sm90_backward.cuh: warpgroup MMAs (wgmma), forward and backward",
            "bf16, head_dim " + str(m.head_dim) + ": on a compute capability 9.0 GPU with train --attention wgmma" +
                (tree::core::kWgmmaAttentionByDefault ? " or auto" : kAutoKeepsMma)};
  return true;
}

KernelChoice projections(const Spec& spec) {
  const std::vector<std::string> padded = unaligned_widths(spec);
  std::string why = spec.train.precision == Precision::bf16 ? "bf16" : "fp32";
  if (!padded.empty()) {
    why += "; a projection in or out of a width not a multiple of " + str(tree::core::kAlignedWidth) +
           " runs on zero-padded copies (cuda/aligned_linear.cuh):";
    why += " " + join(padded, ", ");
  }
  return {"projections", "cuBLASLt (runtime/cuda/blaslt.hpp)", why};
}

// templates/cuda/expert_linear.cuh: core::grouped_gemm_takes(bf16, d_model, expert_d_ff).
KernelChoice experts(const Spec& spec) {
  const std::int64_t d = spec.model.d_model, f = spec.moe.expert_d_ff;
  const bool bf16 = spec.train.precision == Precision::bf16;
  const std::string tile = str(tree::core::kGroupedGemmTile);
  if (tree::core::grouped_gemm_takes(bf16, d, f)) {
    return {"experts", "cuda/grouped_gemm.cuh: one launch per projection and direction for every expert (mma.sync)",
            "bf16, d_model " + str(d) + " and expert_d_ff " + str(f) + " multiples of " + tile};
  }
  return {"experts", "cuda/expert_linear.cuh: the plain kernels (reference speed)",
          bf16 ? "d_model " + str(d) + " or expert_d_ff " + str(f) + " is not a multiple of " + tile : "fp32"};
}

// templates/cuda/expert_linear.cuh, wgmma_experts_chosen<T>(): the experts' Hopper GEMMs, where
// train --experts picks them.
bool hopper_experts(const Spec& spec, KernelChoice& choice) {
  const std::int64_t d = spec.model.d_model, f = spec.moe.expert_d_ff;
  if (spec.model.arch != Arch::moe ||
      !tree::core::sm90_grouped_gemm_takes(spec.train.precision == Precision::bf16, d, f)) {
    return false;
  }
  choice = {"sm_90a exp", "cuda/grouped_gemm_sm90.cuh: the experts' forward, dX and dW on warpgroup MMAs (wgmma)",
            "bf16, d_model " + str(d) + " and expert_d_ff " + str(f) + " multiples of " +
                str(tree::core::kSm90GroupedGemmTile) + ": on a compute capability 9.0 GPU with train --experts wgmma" +
                (tree::core::kWgmmaExpertsByDefault ? " or auto" : kAutoKeepsMma)};
  return true;
}

}  // namespace

std::vector<std::string> unaligned_widths(const Spec& spec) {
  if (spec.train.precision != Precision::bf16) return {};
  const ModelSpec& m = spec.model;
  // The widths of plan/align_scratch.cpp's calls: a projection in or out of one of these is padded.
  const std::vector<std::pair<std::string, std::int64_t>> widths = {
      {"d_model", m.d_model},
      {"n_heads·head_dim", m.n_heads * m.head_dim},
      {"n_kv_heads·head_dim", m.n_kv_heads * m.head_dim},
      {"vocab_size", m.vocab_size},
      {"n_heads (headwise gate)", m.gated_attention == GatedAttention::headwise ? m.n_heads : 0},
      {"n_experts (router)", m.arch == Arch::moe ? spec.moe.n_experts : 0},
      {"d_ff", m.arch == Arch::moe ? spec.moe.dense_d_ff : m.d_ff},
      {"shared experts' d_ff", m.arch == Arch::moe ? spec.moe.n_shared_experts * spec.moe.shared_d_ff : 0},
  };
  std::vector<std::string> out;
  for (const auto& [name, w] : widths) {
    if (w > 0 && !tree::core::width_is_aligned(w)) out.push_back(name + " " + str(w));
  }
  return out;
}

std::vector<KernelChoice> cuda_kernels(const Spec& spec) {
  std::vector<KernelChoice> out = {attention(spec)};
  KernelChoice hopper;
  if (hopper_attention(spec, hopper)) out.push_back(hopper);
  out.push_back(projections(spec));
  if (spec.model.arch == Arch::moe) out.push_back(experts(spec));
  if (hopper_experts(spec, hopper)) out.push_back(hopper);
  return out;
}

}  // namespace gc
