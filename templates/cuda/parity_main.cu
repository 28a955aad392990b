// ./parity: the whole model on the CUDA backend against the CPU backend, on
// the same weights (the plan's initialization, norm gains perturbed so that
// they matter) and the same random tokens. Prints one JSON object:
//
//   {"precision": "fp32", "loss_cpu": x, "loss_cuda": x, "rel_logits": x,
//    "rel_grad_max": x, "worst_tensor": "...", "tolerance": x, "pass": true}
//
// Relative errors are ‖cuda − cpu‖₂ / ‖cpu‖₂ per tensor. The tolerance is the
// issue's: 1e-4 for fp32, 1e-2 for bf16 (override with --tolerance X).
// Exit status 0 when every error is within it, 1 otherwise, 2 on bad flags.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/backend.cuh"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/cuda/check.hpp"

namespace {

using ComputeType = std::conditional_t<gcm::kPrecision == gcm::Precision::bf16, gcm::cuda::bf16, float>;
using CudaModel = gcm::BasicModel<gcm::cuda::Backend<ComputeType>>;

double relative_error(const std::vector<double>& got, const float* ref, std::size_t n) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (got[i] - double(ref[i])) * (got[i] - double(ref[i]));
    norm += double(ref[i]) * double(ref[i]);
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

template <typename T>
std::vector<double> fetch(const T* device, std::size_t n) {
  std::vector<T> host(n);
  GC_CUDA_CHECK(cudaDeviceSynchronize());
  GC_CUDA_CHECK(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = double(gcm::cuda::to_float(host[i]));
  return out;
}

int run(double tolerance) {
  if (gc::rt::cuda::device_count() == 0) {
    std::fprintf(stderr, "parity: error: no CUDA device is available\n");
    return 1;
  }
  const int batch = 2, seq_len = gcm::kSeqLen < 96 ? gcm::kSeqLen : 96;
  const std::int64_t total = gcm::kOffsets.at[gcm::kNumParams];
  gcm::Model<float> cpu(batch, seq_len);
  gcm::init_parameters(cpu.params.data(), gcm::kSeed);
  // Gains at exactly 1 would hide a kernel that ignores them: perturb every rank-1 tensor.
  for (int i = 0; i < gcm::kNumParams; ++i) {
    if (gcm::kParams[i].rank != 1) continue;
    for (std::int64_t j = 0; j < gcm::kParams[i].numel; ++j) {
      cpu.param(i)[j] += float(0.3 * (gcm::philox_uniform(12345, std::uint32_t(100 + i), std::uint64_t(j)) - 0.5));
    }
  }
  std::vector<std::int32_t> tokens(std::size_t(batch) * seq_len), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = std::int32_t(gcm::philox_uniform(777, 1, i) * gcm::kVocab) % gcm::kVocab;
    targets[i] = std::int32_t(gcm::philox_uniform(777, 2, i) * gcm::kVocab) % gcm::kVocab;
  }

  CudaModel gpu(batch, seq_len);
  std::vector<ComputeType> weights(static_cast<std::size_t>(total));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = gcm::cuda::from_float<ComputeType>(cpu.params[i]);
  gpu.params.upload(weights.data(), weights.size());
  // The CPU model computes from the same (rounded, under bf16) weights.
  for (std::size_t i = 0; i < weights.size(); ++i) cpu.params[i] = gcm::cuda::to_float(weights[i]);

  cpu.zero_grads();
  gpu.zero_grads();
  const double loss_cpu = cpu.forward(tokens.data(), targets.data());
  const double loss_cuda = gpu.forward(tokens.data(), targets.data());
  const std::size_t n_logits = std::size_t(cpu.rows()) * gcm::kVocab;
  const double rel_logits = relative_error(fetch(gpu.logits(), n_logits), cpu.logits(), n_logits);
  cpu.backward();
  gpu.backward();
  const std::vector<double> grads = fetch(gpu.grads.data(), std::size_t(total));
  double worst = 0.0;
  std::string worst_tensor;
  for (int i = 0; i < gcm::kNumParams; ++i) {
    const std::vector<double> g(grads.begin() + gcm::kOffsets.at[i], grads.begin() + gcm::kOffsets.at[i + 1]);
    const double e = relative_error(g, cpu.grad(i), g.size());
    if (e >= worst) {
      worst = e;
      worst_tensor = gcm::kParams[i].name;
    }
  }
  const bool pass = rel_logits <= tolerance && worst <= tolerance &&
                    std::fabs(loss_cuda - loss_cpu) <= tolerance * std::fabs(loss_cpu);
  std::printf(
      "{\"precision\": \"%s\", \"loss_cpu\": %.9g, \"loss_cuda\": %.9g, \"rel_logits\": %.3g, \"rel_grad_max\": %.3g, "
      "\"worst_tensor\": \"%s\", \"tolerance\": %g, \"pass\": %s}\n",
      std::is_same_v<ComputeType, float> ? "fp32" : "bf16", loss_cpu, loss_cuda, rel_logits, worst,
      worst_tensor.c_str(), tolerance, pass ? "true" : "false");
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  double tolerance = std::is_same_v<ComputeType, float> ? 1e-4 : 1e-2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tolerance") == 0 && i + 1 < argc) {
      char* end = nullptr;
      tolerance = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(tolerance > 0.0)) {
        std::fprintf(stderr, "parity: error: --tolerance needs a positive number\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: parity [--tolerance X]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  try {
    return run(tolerance);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parity: error: %s\n", e.what());
    return 1;
  }
}
