// The CUDA training engine (engine/cuda_engine.cu, compiled into this test) against the CPU engine
// (engine/engine.hpp) with the default templates/config.hpp and plan.hpp: the same
// initialization, then steps of forward/backward, per-tensor Σ g², clip and AdamW from the same
// state (the CPU's state is uploaded to the GPU before each step, which also checks upload and
// download), comparing losses, gradient norms, moments and parameter updates; a step that is
// not finite stops both engines' updates; under the emulator, a step is queued without a host
// wait.
#include "engine/cuda_engine.cu"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/adamw.hpp"
#include "core/philox.hpp"
#include "cuda_test_util.hpp"
#include "engine/cpu_engine.hpp"

namespace kt = gc::test::kernels;

namespace {

std::vector<double> slice(const std::vector<float>& v, int tensor) {
  return std::vector<double>(v.begin() + gc::tree::kOffsets.at[tensor], v.begin() + gc::tree::kOffsets.at[tensor + 1]);
}

// Relative error of the worst tensor of a flat array, and its name.
double worst_tensor_error(const std::vector<float>& got, const std::vector<float>& ref, std::string* name) {
  double worst = 0.0;
  for (int i = 0; i < gc::tree::kNumParams; ++i) {
    const double e = kt::rel_error(slice(got, i), slice(ref, i));
    if (e >= worst) {
      worst = e;
      *name = gc::tree::kParams[i].name;
    }
  }
  return worst;
}

TEST(CudaEngine, StepsMatchCpuEngine) {
  GC_REQUIRE_GPU();
  const int batch = gc::tree::kMicroBatch, seq_len = gc::tree::kSeqLen, steps = 3;
  const std::size_t total = std::size_t(gc::tree::kOffsets.at[gc::tree::kNumParams]);
  const std::size_t rows = std::size_t(batch) * seq_len;
  const double lr = 1e-2;

  gc::tree::Model<float> model(batch, seq_len);
  std::vector<float> m(total, 0.0f), v(total, 0.0f);
  gc::tree::CpuEngine cpu(model, m, v);
  const std::unique_ptr<gc::tree::Engine> gpu = gc::tree::make_cuda_engine(batch, seq_len);
  EXPECT_NE(gpu->describe().find("CUDA"), std::string::npos) << gpu->describe();

  cpu.initialize(gc::tree::kSeed);
  gpu->initialize(gc::tree::kSeed);
  gpu->prepare_metrics();
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
      inputs[i] = std::int32_t(gc::tree::core::philox_uniform(99, std::uint32_t(2 * step), i) * gc::tree::kVocab) %
                  gc::tree::kVocab;
      targets[i] = std::int32_t(gc::tree::core::philox_uniform(99, std::uint32_t(2 * step + 1), i) * gc::tree::kVocab) %
                   gc::tree::kVocab;
    }
    cpu.zero_grads();
    gpu->zero_grads();
    // Two micro-batches of half weight (the same batch twice: the gradients of one full batch);
    // the GPU keeps their loss on the device until read_step.
    for (int micro = 0; micro < 2; ++micro) {
      cpu.forward_backward(inputs.data(), targets.data(), 0.5);
      gpu->forward_backward(inputs.data(), targets.data(), 0.5);
    }
    // Update ratios: both engines keep the tracked tensors before the step.
    cpu.snapshot_tensors(gc::tree::kUpdateRatioTensors);
    gpu->snapshot_tensors(gc::tree::kUpdateRatioTensors);
    cpu.finish_step(lr, step);
    gpu->finish_step(lr, step);
    const auto sums_cpu = cpu.update_sums(gc::tree::kUpdateRatioTensors);
    const auto sums_gpu = gpu->update_sums(gc::tree::kUpdateRatioTensors);
    for (int i = 0; i < gc::tree::kNumParams; ++i) {
      if (!gc::tree::kUpdateRatioTensors[i]) {
        EXPECT_EQ(sums_gpu[i][0] + sums_gpu[i][1], 0.0) << tag << ": untracked " << gc::tree::kParams[i].name;
        continue;
      }
      // Σ θ² from the same uploaded weights: rounding only. Σ Δθ²: the updates agree to 1e-3 of lr
      // but for elements near zero gradient (below).
      EXPECT_NEAR(sums_gpu[i][1], sums_cpu[i][1], 1e-9 * sums_cpu[i][1])
          << tag << ": Σ θ² of " << gc::tree::kParams[i].name;
      EXPECT_NEAR(sums_gpu[i][0], sums_cpu[i][0], 2e-2 * sums_cpu[i][0])
          << tag << ": Σ Δθ² of " << gc::tree::kParams[i].name;
      EXPECT_GT(sums_cpu[i][0], 0.0) << tag << ": " << gc::tree::kParams[i].name << " moved";
    }
    const gc::tree::StepReadout& on_cpu = cpu.read_step();
    const gc::tree::StepReadout& on_gpu = gpu->read_step();
    const double loss_cpu = on_cpu.verdict.loss, loss_gpu = on_gpu.verdict.loss;
    EXPECT_NEAR(loss_gpu, loss_cpu, 1e-4 * std::fabs(loss_cpu)) << tag;
    EXPECT_GT(loss_cpu, 1.0) << tag;
    ASSERT_EQ(on_gpu.squares.size(), on_cpu.squares.size());
    for (std::size_t i = 0; i < on_cpu.squares.size(); ++i) {
      EXPECT_NEAR(on_gpu.squares[i], on_cpu.squares[i], 2e-4 * on_cpu.squares[i])
          << tag << ": Σ g² of " << gc::tree::kParams[i].name;
    }
    EXPECT_NEAR(on_gpu.verdict.grad_norm, on_cpu.verdict.grad_norm, 1e-4 * on_cpu.verdict.grad_norm) << tag;
    EXPECT_NEAR(on_gpu.verdict.clip, on_cpu.verdict.clip, 1e-4 * on_cpu.verdict.clip) << tag;
    EXPECT_EQ(on_gpu.verdict.stopped_at, 0) << tag;
    EXPECT_EQ(on_cpu.verdict.stopped_at, 0) << tag;

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
  EXPECT_TRUE(std::count(gc::tree::kUpdateRatioTensors, gc::tree::kUpdateRatioTensors + gc::tree::kNumParams, true) >
              0);
}

// Random tokens for step `step` of a test.
void random_batch(int step, std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    inputs[i] = std::int32_t(gc::tree::core::philox_uniform(7, std::uint32_t(2 * step), i) * gc::tree::kVocab) %
                gc::tree::kVocab;
    targets[i] = std::int32_t(gc::tree::core::philox_uniform(7, std::uint32_t(2 * step + 1), i) * gc::tree::kVocab) %
                 gc::tree::kVocab;
  }
}

// A NaN weight makes step 1's loss NaN: neither engine updates anything, and the stop holds for
// the later steps (here one whose weights were repaired), whose values are still read.
TEST(CudaEngine, ANonFiniteStepStopsEveryLaterUpdate) {
  GC_REQUIRE_GPU();
  const int batch = gc::tree::kMicroBatch, seq_len = gc::tree::kSeqLen;
  const std::size_t total = std::size_t(gc::tree::kOffsets.at[gc::tree::kNumParams]);
  gc::tree::Model<float> model(batch, seq_len);
  std::vector<float> m(total, 0.0f), v(total, 0.0f);
  gc::tree::CpuEngine cpu(model, m, v);
  const std::unique_ptr<gc::tree::Engine> gpu = gc::tree::make_cuda_engine(batch, seq_len);
  cpu.initialize(gc::tree::kSeed);
  const std::vector<float> good = model.params;
  std::vector<float> poisoned = good;
  for (int i = 0; i < gc::tree::kNumParams; ++i) {  // every weight of the final norm: every row's logits
    if (std::string(gc::tree::kParams[i].name).find("norm") != std::string::npos && gc::tree::kParams[i].layer < 0) {
      std::fill(poisoned.begin() + gc::tree::kOffsets.at[i], poisoned.begin() + gc::tree::kOffsets.at[i + 1],
                std::nanf(""));
    }
  }
  std::vector<std::int32_t> inputs(std::size_t(batch) * seq_len), targets(inputs.size());
  for (int step = 1; step <= 2; ++step) {
    const std::vector<float>& start = step == 1 ? poisoned : good;
    model.params = start;
    gpu->upload(start.data(), m.data(), v.data());
    random_batch(step, inputs, targets);
    for (gc::tree::Engine* engine : {static_cast<gc::tree::Engine*>(&cpu), gpu.get()}) {
      engine->zero_grads();
      engine->forward_backward(inputs.data(), targets.data(), 1.0);
      engine->finish_step(1e-2, step);
      const gc::tree::StepVerdict& verdict = engine->read_step().verdict;
      EXPECT_EQ(verdict.stopped_at, 1) << engine->describe() << " step " << step;
      EXPECT_EQ(std::isnan(verdict.loss), step == 1) << engine->describe() << " step " << step;
      EXPECT_TRUE(std::isnan(verdict.stopped_loss)) << engine->describe();
    }
    std::vector<float> params(total), gm(total), gv(total);
    gpu->download(params.data(), gm.data(), gv.data());
    const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(params, start)) << "step " << step << ": the GPU's weights changed";
    EXPECT_TRUE(same(model.params, start)) << "step " << step << ": the CPU's weights changed";
    EXPECT_EQ(gm, m) << "step " << step;
    EXPECT_EQ(gv, v) << "step " << step;
    EXPECT_EQ(m, std::vector<float>(total, 0.0f)) << "step " << step << ": the CPU's moments changed";
  }
}

// The engine allocates its gradients at the first initialize (in the layout join and
// split_experts leave), not when it is built: the whole array never exists beside an expert
// block's. The device bytes live after construction exclude them; initialize adds them.
TEST(CudaEngine, GradientsAreAllocatedAtTheFirstInitializeNotAtConstruction) {
  const std::int64_t before = gc::rt::cuda::allocation_stats().live_bytes;
  const std::unique_ptr<gc::tree::Engine> gpu = gc::tree::make_cuda_engine(gc::tree::kMicroBatch, gc::tree::kSeqLen);
  EXPECT_EQ(gpu->gradient_bytes(), 0);
  const std::int64_t built = gc::rt::cuda::allocation_stats().live_bytes;
  gpu->initialize(gc::tree::kSeed);
  EXPECT_EQ(gpu->gradient_bytes(), std::int64_t(sizeof(float)) * gc::tree::kOffsets.at[gc::tree::kNumParams]);
  EXPECT_GE(gc::rt::cuda::allocation_stats().live_bytes - built, gpu->gradient_bytes());
  EXPECT_GT(built, before);
  gpu->initialize(gc::tree::kSeed + 1);  // again: nothing more
  EXPECT_EQ(gpu->gradient_bytes(), std::int64_t(sizeof(float)) * gc::tree::kOffsets.at[gc::tree::kNumParams]);
}

#ifdef GC_CUDA_EMULATOR
// A step (after the first, which sizes cuBLASLt's workspace) is queued without the host waiting
// for the GPU: uploads, forward, backward, norms, the verdict and AdamW; read_step then waits.
TEST(CudaEngine, AStepQueuesWithoutHostWaits) {
  const int batch = gc::tree::kMicroBatch, seq_len = gc::tree::kSeqLen;
  const std::unique_ptr<gc::tree::Engine> gpu = gc::tree::make_cuda_engine(batch, seq_len);
  gpu->initialize(gc::tree::kSeed);
  std::vector<std::int32_t> inputs(std::size_t(batch) * seq_len), targets(inputs.size());
  for (int step = 1; step <= 3; ++step) {
    random_batch(step, inputs, targets);
    const std::int64_t before = gc::emu::host_waits();
    gpu->zero_grads();
    for (int micro = 0; micro < 2; ++micro) gpu->forward_backward(inputs.data(), targets.data(), 0.5);
    gpu->finish_step(1e-3, step);
    if (step > 1) {
      EXPECT_EQ(gc::emu::host_waits(), before) << "step " << step << " made the host wait";
    }
    const gc::tree::StepReadout& read = gpu->read_step();
    EXPECT_GT(gc::emu::host_waits(), before) << "reading waits for the step";
    EXPECT_GT(read.verdict.loss, 1.0);
    EXPECT_GT(read.verdict.grad_norm, 0.0);
  }
}
#endif

}  // namespace
