// The CUDA training engine (cuda/engine.cu, compiled into this test) against the CPU engine
// (train/engine.hpp) with the default templates/config.hpp and plan.hpp: the same
// initialization, then steps of forward/backward, per-tensor Σ g², clip and AdamW from the same
// state (the CPU's state is uploaded to the GPU before each step, which also checks upload and
// download), comparing losses, gradient norms, moments and parameter updates.
#include "cuda/engine.cu"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/adamw.hpp"
#include "cpu/philox.hpp"
#include "cuda_test_util.hpp"
#include "train/engine.hpp"

namespace {

std::vector<double> slice(const std::vector<float>& v, int tensor) {
  return std::vector<double>(v.begin() + gcm::kOffsets.at[tensor], v.begin() + gcm::kOffsets.at[tensor + 1]);
}

// Relative error of the worst tensor of a flat array, and its name.
double worst_tensor_error(const std::vector<float>& got, const std::vector<float>& ref, std::string* name) {
  double worst = 0.0;
  for (int i = 0; i < gcm::kNumParams; ++i) {
    const double e = kt::rel_error(slice(got, i), slice(ref, i));
    if (e >= worst) {
      worst = e;
      *name = gcm::kParams[i].name;
    }
  }
  return worst;
}

TEST(CudaEngine, StepsMatchCpuEngine) {
  GC_REQUIRE_GPU();
  const int batch = gcm::kMicroBatch, seq_len = gcm::kSeqLen, steps = 3;
  const std::size_t total = std::size_t(gcm::kOffsets.at[gcm::kNumParams]);
  const std::size_t rows = std::size_t(batch) * seq_len;
  const double lr = 1e-2;

  gcm::Model<float> model(batch, seq_len);
  std::vector<float> m(total, 0.0f), v(total, 0.0f);
  gcm::CpuEngine cpu(model, m, v);
  const std::unique_ptr<gcm::Engine> gpu = gcm::make_cuda_engine(batch, seq_len);
  EXPECT_NE(gpu->describe().find("CUDA"), std::string::npos) << gpu->describe();

  cpu.initialize(gcm::kSeed);
  gpu->initialize(gcm::kSeed);
  std::vector<float> params(total), gm(total), gv(total);
  gpu->download(params.data(), gm.data(), gv.data());
  std::string name;
  EXPECT_LT(worst_tensor_error(params, model.params, &name), 1e-6) << "initialization of " << name;
  EXPECT_EQ(gm, m) << "initial first moments";
  EXPECT_EQ(gv, v) << "initial second moments";

  for (int step = 1; step <= steps; ++step) {
    const std::string tag = "step " + std::to_string(step);
    gpu->upload(model.params.data(), m.data(), v.data());
    const std::vector<float> before = model.params;
    std::vector<std::int32_t> inputs(rows), targets(rows);
    for (std::size_t i = 0; i < rows; ++i) {
      inputs[i] = std::int32_t(gcm::philox_uniform(99, std::uint32_t(2 * step), i) * gcm::kVocab) % gcm::kVocab;
      targets[i] = std::int32_t(gcm::philox_uniform(99, std::uint32_t(2 * step + 1), i) * gcm::kVocab) % gcm::kVocab;
    }
    cpu.zero_grads();
    gpu->zero_grads();
    // Two micro-batches of half weight (the same batch twice: the gradients of one full batch);
    // the GPU keeps their loss on the device until take_step_loss.
    for (int micro = 0; micro < 2; ++micro) {
      cpu.forward_backward(inputs.data(), targets.data(), 0.5);
      gpu->forward_backward(inputs.data(), targets.data(), 0.5);
    }
    const double loss_cpu = cpu.take_step_loss(), loss_gpu = gpu->take_step_loss();
    EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << tag;
    EXPECT_GT(loss_cpu, 1.0) << tag;
    EXPECT_EQ(gpu->take_step_loss(), 0.0) << tag << ": the accumulator restarts";

    const std::vector<double> sq_cpu = cpu.grad_squares(), sq_gpu = gpu->grad_squares();
    ASSERT_EQ(sq_gpu.size(), sq_cpu.size());
    double norm_sq = 0.0;
    for (std::size_t i = 0; i < sq_cpu.size(); ++i) {
      EXPECT_NEAR(sq_gpu[i], sq_cpu[i], 2e-4 * sq_cpu[i]) << tag << ": Σ g² of " << gcm::kParams[i].name;
      norm_sq += sq_cpu[i];
    }
    const double clip = gcm::cpu::clip_scale(std::sqrt(norm_sq), gcm::kGradClip);
    cpu.adamw_step(lr, clip, step);
    gpu->adamw_step(lr, clip, step);

    gpu->download(params.data(), gm.data(), gv.data());
    // The moments are linear and quadratic in the gradients: the gradients' ~1e-6.
    EXPECT_LT(worst_tensor_error(gm, m, &name), 1e-4) << tag << ": first moments of " << name;
    EXPECT_LT(worst_tensor_error(gv, v, &name), 1e-4) << tag << ": second moments of " << name;
    // AdamW's update m̂ / (√v̂ + ε) is ±lr for any gradient well above ε, so an element whose
    // gradient lies within the backends' rounding difference of zero may move differently
    // (by up to 2·lr). Every other element's update must agree to 1e-3 of lr; a wrong lr
    // multiplier, decay, clip or bias correction would move (nearly) all of them.
    std::size_t differ = 0;
    for (std::size_t i = 0; i < total; ++i) {
      const double du_gpu = double(params[i]) - before[i], du_cpu = double(model.params[i]) - before[i];
      differ += std::fabs(du_gpu - du_cpu) > 1e-3 * lr;
    }
    std::printf("[kernel-error] %-48s %zu of %zu\n", ("cuda engine " + tag + " updates differing").c_str(), differ,
                total);
    EXPECT_LE(differ, total / 1000) << tag << ": parameter updates";
  }

  std::vector<float> first(std::size_t(gcm::kParams[0].numel));
  gpu->download_tensor(0, first.data());
  EXPECT_EQ(first, std::vector<float>(params.begin(), params.begin() + gcm::kOffsets.at[1]));
}

}  // namespace
