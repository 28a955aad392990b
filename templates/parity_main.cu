// ./parity: the whole model on the CUDA backend against the CPU backend, on
// the same weights (the plan's initialization, norm gains perturbed so that
// they matter) and the same random tokens. Prints one JSON object:
//
//   {"precision": "fp32", "attention": "reference attention", "experts": "", "loss_cpu": x, "loss_cuda": x,
//    "loss_cuda_chunked": x, "max_rel_logits": x, "worst_row_logits": x, "max_rel_grad": x,
//    "worst_tensor": "...", "metrics_compared": n, "metrics_worst": x, "metrics_worst_at": "metric/key",
//    "heatmap_worst_level": n, "tolerance": x, "pass": true}
//
// Relative errors are ‖cuda − cpu‖₂ / ‖cpu‖₂ per tensor (engine/parity.cuh, which
// tests/cuda/model_parity_test.cu runs too), and for the logits also the worst
// row; gradients are checked for the CUDA model with every row's logits and for one whose LM
// head runs in three chunks (forward_backward, as training runs it). The tolerance is 1e-5 for fp32; 3e-2 for bf16, whose rounding compounds
// over the layers (parity.cuh; override with --tolerance X).
// --attention and --experts (auto|mma|wgmma) pick the CUDA models' kernels as train's flags do.
// Exit status 0 when every error is within it, 1 otherwise, 2 on bad flags.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>

#include "config.hpp"
#include "cuda/backend.cuh"
#include "engine/parity.cuh"
#include "runtime/cuda/check.hpp"

namespace {

using ComputeType = std::conditional_t<gc::tree::kPrecision == gc::tree::Precision::bf16, gc::tree::cuda::bf16, float>;

int run(double tolerance, const gc::tree::core::KernelChoices& kernels) {
  const std::string unusable = gc::tree::cuda::unusable_device_reason();
  if (!unusable.empty()) {
    std::fprintf(stderr, "parity: error: %s\n", unusable.c_str());
    return 1;
  }
  const int batch = 2, seq_len = gc::tree::kSeqLen < 96 ? gc::tree::kSeqLen : 96;
  const gc::tree::cuda::ParityReport r = gc::tree::cuda::model_parity<ComputeType>(batch, seq_len, kernels);
  const bool pass = r.pass(tolerance);
  std::printf(
      "{\"precision\": \"%s\", \"attention\": \"%s\", \"experts\": \"%s\", \"loss_cpu\": %.9g, \"loss_cuda\": %.9g, "
      "\"loss_cuda_chunked\": %.9g, "
      "\"max_rel_logits\": %.3g, "
      "\"worst_row_logits\": %.3g, \"max_rel_grad\": %.3g, \"worst_tensor\": \"%s\", \"metrics_compared\": %d, "
      "\"metrics_worst\": %.3g, \"metrics_worst_at\": \"%s\", \"metrics_worst_values\": [%.9g, %.9g], "
      "\"heatmap_worst_level\": %.0f, \"tolerance\": %g, "
      "\"pass\": %s}\n",
      r.precision, r.attention, r.experts, r.loss_cpu, r.loss_cuda, r.loss_cuda_chunked, r.rel_logits,
      r.worst_row_logits, r.max_rel_grad(),
      gc::tree::kParams[r.worst_grad()].name, r.metrics.numbers, r.metrics.worst, r.metrics.where.c_str(),
      r.metrics.got, r.metrics.ref, r.metrics.worst_level, tolerance, pass ? "true" : "false");
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  double tolerance = gc::tree::cuda::parity_tolerance<ComputeType>();
  gc::tree::core::KernelChoices kernels;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tolerance") == 0 && i + 1 < argc) {
      char* end = nullptr;
      tolerance = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(tolerance > 0.0)) {
        std::fprintf(stderr, "parity: error: --tolerance needs a positive number\n");
        return 2;
      }
    } else if ((std::strcmp(argv[i], "--attention") == 0 || std::strcmp(argv[i], "--experts") == 0) && i + 1 < argc) {
      const char* flag = argv[i];
      if (!gc::tree::core::set_kernel_choice(kernels, flag, argv[++i])) {
        std::fprintf(stderr, "parity: error: %s needs auto, mma or wgmma\n", flag);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: parity [--tolerance X] [--attention auto|mma|wgmma] [--experts auto|mma|wgmma]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  try {
    return run(tolerance, kernels);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: error: %s\n", e.what());
    return 1;
  }
}
