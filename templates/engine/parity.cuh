// Whole-model parity of the CUDA backend with the CPU backend, shared by ./parity (parity_main.cu)
// and tests/cuda/model_parity_test.cu: the model of model/model_impl.hpp on both backends, on
// the same weights (the plan's initialization with every rank-1 tensor, i.e. the norm gains,
// perturbed so that a kernel ignoring them shows) and the same random tokens and targets. With
// T = bf16 the weights are rounded to bf16 first and the CPU model computes from the rounded
// values, so both sides start from identical numbers.
//
// Errors are relative: ‖cuda − cpu‖₂ / ‖cpu‖₂ per tensor (‖cuda − cpu‖₂ where cpu is all zero), and
// for the logits also the worst row (one token's V logits), so an error confined to a few tokens
// is not averaged away. Every metric is computed by both backends from these activations and
// weights too (engine/metrics_parity.cuh). fp32 is held to 1e-5 (measured under the emulator: under 1.2e-6 on every
// coverage spec); bf16 to 3e-2 (below).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/backend.cuh"
#include "engine/metrics_parity.cuh"
#include "engine/cpu_model.hpp"
#include "plan.hpp"
#include "runtime/cuda/check.hpp"

namespace gc::tree::cuda {

struct ParityReport {
  const char* precision = "";   // "fp32" or "bf16"
  const char* attention = "";   // the CUDA models' attention kernels (Backend::attention_kernels)
  const char* experts = "";     // their expert GEMMs (Backend::expert_kernels; "" in a dense model)
  double loss_cpu = 0.0, loss_cuda = 0.0;
  double loss_cuda_chunked = 0.0;  // the CUDA model with its LM head in chunks of rows / 3 (forward_backward)
  double rel_logits = 0.0;
  double worst_row_logits = 0.0;  // max over rows of the row's relative error
  std::vector<double> rel_grads;  // per parameter tensor, in kParams order (the worse of the two CUDA models)
  MetricsParity metrics;          // every metric on both backends (engine/metrics_parity.cuh)

  double rel_loss() const { return std::fabs(loss_cuda - loss_cpu) / std::fabs(loss_cpu); }
  // The largest gradient error and its tensor's index (0 when there are no tensors).
  int worst_grad() const {
    int worst = 0;
    for (int i = 1; i < int(rel_grads.size()); ++i) worst = rel_grads[i] > rel_grads[worst] ? i : worst;
    return worst;
  }
  double max_rel_grad() const { return rel_grads.empty() ? 0.0 : rel_grads[worst_grad()]; }
  bool pass(double tolerance) const {
    return rel_logits <= tolerance && worst_row_logits <= tolerance && max_rel_grad() <= tolerance &&
           std::fabs(loss_cuda - loss_cpu) <= tolerance * std::fabs(loss_cpu) &&
           std::fabs(loss_cuda_chunked - loss_cpu) <= tolerance * std::fabs(loss_cpu) && metrics.worst <= tolerance &&
           metrics.worst_level <= 1.0;
  }
};

// fp32: 1e-5, about ten times the error measured. bf16 against the fp32 CPU model: each kernel is
// within 1e-2, but the whole model stores bf16 activations at every layer
// boundary and the rounding compounds; a CPU model rounding at the same
// places agrees with the CUDA backend bit for bit, while against fp32 the
// logits differ by about 1e-2 and the worst gradients by about 2e-2
// (measured in the CPU emulation), so the bound is 3e-2.
template <typename T>
constexpr double parity_tolerance() {
  return std::is_same_v<T, float> ? 1e-5 : 3e-2;
}

namespace detail {

inline double relative_error(const std::vector<double>& got, const float* ref, std::size_t n) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    diff += (got[i] - double(ref[i])) * (got[i] - double(ref[i]));
    norm += double(ref[i]) * double(ref[i]);
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The largest relative error of one row of `cols` values.
inline double worst_row_error(const std::vector<double>& got, const float* ref, std::size_t rows, std::size_t cols) {
  double worst = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::vector<double> row(got.begin() + std::ptrdiff_t(r * cols), got.begin() + std::ptrdiff_t((r + 1) * cols));
    worst = std::fmax(worst, relative_error(row, ref + r * cols, cols));
  }
  return worst;
}

template <typename T>
std::vector<double> fetch(const T* device, std::size_t n) {
  std::vector<T> host(n);
  GC_CUDA_CHECK(cudaDeviceSynchronize());
  gc::rt::cuda::copy_to_host(host.data(), device, n * sizeof(T));
  std::vector<double> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = double(to_float(host[i]));
  return out;
}

}  // namespace detail

// One forward and backward of the whole model on both backends (T = float or bf16), batch ×
// seq_len tokens, the CUDA models' attention and experts on the kernels `kernels` picks (parity
// --attention, --experts).
// Needs a CUDA device.
template <typename T>
ParityReport model_parity(int batch, int seq_len, const core::KernelChoices& kernels = {}) {
  using detail::fetch;
  using detail::relative_error;
  const std::int64_t total = kOffsets.at[kNumParams];
  Model<float> cpu(batch, seq_len, kKeepLogits);
  init_parameters(cpu.params.data(), kSeed);
  // Gains at exactly 1 would hide a kernel that ignores them: perturb every rank-1 tensor.
  for (int i = 0; i < kNumParams; ++i) {
    if (kParams[i].rank != 1) continue;
    for (std::int64_t j = 0; j < kParams[i].numel; ++j) {
      cpu.param(i)[j] += float(0.3 * (core::philox_uniform(12345, std::uint32_t(100 + i), std::uint64_t(j)) - 0.5));
    }
  }
  std::vector<std::int32_t> tokens(std::size_t(batch) * seq_len), targets(tokens.size());
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = std::int32_t(core::philox_uniform(777, 1, i) * kVocab) % kVocab;
    targets[i] = std::int32_t(core::philox_uniform(777, 2, i) * kVocab) % kVocab;
  }

  BasicModel<Backend<T>> gpu(batch, seq_len, kKeepLogits);
  gpu.backend().choose_kernels(kernels);
  std::vector<T> weights(static_cast<std::size_t>(total));
  for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = from_float<T>(cpu.params[i]);
  gpu.params.upload(weights.data(), weights.size());
  // The CPU model computes from the same (rounded, under bf16) weights.
  for (std::size_t i = 0; i < weights.size(); ++i) cpu.params[i] = to_float(weights[i]);

  ParityReport report;
  report.precision = std::is_same_v<T, float> ? "fp32" : "bf16";
  report.attention = gpu.backend().attention_kernels();
  report.experts = gpu.backend().expert_kernels();
  cpu.zero_grads();
  gpu.zero_grads();
  cpu.track_logit_moments(true);  // logit_std of a model whose LM head runs in chunks
  gpu.track_logit_moments(true);
  report.loss_cpu = cpu.forward(tokens.data(), targets.data());
  report.loss_cuda = gpu.forward(tokens.data(), targets.data());
  // The metrics, from these activations and weights (fp32 weights on the device: the
  // parameters under fp32, the rounded values under bf16).
  if constexpr (std::is_same_v<T, float>) {
    report.metrics = metrics_parity(cpu, gpu, gpu.params.data(), metric_error_floor<T>());
  } else {
    DeviceBuffer<float> fp32_weights;
    fp32_weights.resize(cpu.params.size());
    fp32_weights.upload(cpu.params.data(), cpu.params.size());
    report.metrics = metrics_parity(cpu, gpu, fp32_weights.data(), metric_error_floor<T>());
  }
  const std::size_t n_logits = std::size_t(cpu.rows()) * kVocab;
  const std::vector<double> logits = fetch(gpu.logits(), n_logits);
  report.rel_logits = relative_error(logits, cpu.logits(), n_logits);
  report.worst_row_logits = detail::worst_row_error(logits, cpu.logits(), std::size_t(cpu.rows()), kVocab);
  cpu.backward();
  gpu.backward();
  // The chunked head (what training runs when N×V is large), in three chunks of rows.
  BasicModel<Backend<T>> chunked(batch, seq_len, std::max(1, cpu.rows() / 3));
  chunked.backend().choose_kernels(kernels);
  chunked.params.upload(weights.data(), weights.size());
  chunked.zero_grads();
  report.loss_cuda_chunked = chunked.forward_backward(tokens.data(), targets.data(), 1.0);
  const std::vector<double> grads = fetch(gpu.grads.data(), std::size_t(total));
  const std::vector<double> chunked_grads = fetch(chunked.grads.data(), std::size_t(total));
  for (int i = 0; i < kNumParams; ++i) {
    const std::vector<double> g(grads.begin() + kOffsets.at[i], grads.begin() + kOffsets.at[i + 1]);
    const std::vector<double> gc(chunked_grads.begin() + kOffsets.at[i], chunked_grads.begin() + kOffsets.at[i + 1]);
    report.rel_grads.push_back(
        std::fmax(relative_error(g, cpu.grad(i), g.size()), relative_error(gc, cpu.grad(i), gc.size())));
  }
  return report;
}

}  // namespace gc::tree::cuda
