// Where a training step runs. The trainer keeps the run's state on the host
// (fp32 parameters, AdamW moments: what checkpoints and metrics read); an
// engine owns the step itself: forward and backward over a micro-batch,
// per-tensor gradient sums of squares, the AdamW update.
//
//   CpuEngine   works on the host state in place (nothing to copy).
//   CUDA        cuda/engine.cu: fp32 master weights, moments and gradients on
//               the GPU (bf16 working weights under precision "bf16"),
//               initialized there; the host state is refreshed by download()
//               before a checkpoint, metrics or the sample, and pushed by
//               upload() after a resume.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "cpu/adamw.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"
#include "train/step_verdict.hpp"
#include "train/zero.hpp"

namespace gcm {

// What read_step returns: the last finished step's verdict (loss, gradient norm, clip, stop) and
// each tensor's Σ g² over the global batch before clipping (kParams order).
struct StepReadout {
  StepVerdict verdict;
  std::vector<double> squares;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string describe() const = 0;
  // Initial parameters from the plan's init rules (Philox stream i for tensor
  // i: the same weights on every backend); moments start at zero.
  virtual void initialize(std::uint64_t seed) = 0;
  // Host state → engine (after init or resume).
  virtual void upload(const float* params, const float* m, const float* v) = 0;
  // Engine → host state. m and v may be null (parameters only).
  virtual void download(float* params, float* m, float* v) = 0;
  // One tensor's parameters to the host (update-ratio tracking).
  virtual void download_tensor(int i, float* out) = 0;
  // Starts a step: zero gradients and step loss.
  virtual void zero_grads() = 0;
  // One micro-batch: adds dL/dθ · loss_scale to the gradients, L the mean
  // cross-entropy + the MoE balancing loss, and loss_scale · (mean cross-entropy) to the step's
  // loss (on a GPU without waiting for the forward pass: the sum stays on the device).
  virtual void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) = 0;
  // The balancing-loss part of the last forward_backward (0 for a dense model).
  virtual double last_aux_loss() const { return 0.0; }
  // Mean cross-entropy, no gradients (evaluation; no balancing loss).
  virtual double forward_loss(const std::int32_t* inputs, const std::int32_t* targets) = 0;
  // While on, forward_loss also sums the logits' moments (the logit_std metric of a model
  // that does not keep its logits: BasicModel::track_logit_moments).
  virtual void track_logit_moments(bool on) = 0;
  // After forward_loss: the activations of that batch as a host model holds
  // them, for the activation metrics. Returns the model to read (on the CPU,
  // the engine's own; on a GPU, `host` after copying every forward buffer).
  virtual const Model<float>& activations(Model<float>& host) = 0;
  // Ends step t (t ≥ 1) after its micro-batches (and reduce_grads): the step's loss summed over
  // the ranks, each tensor's Σ g² (fixed summation order: repeatable), the verdict of
  // train/step_verdict.hpp (global norm, clip multiplier for max norm kGradClip, stop), and
  // AdamW with η = lr · lr_mult on every tensor, unless the run has stopped. The CUDA engine
  // queues all of it on the GPU and returns without waiting.
  virtual void finish_step(double lr, std::int64_t t) = 0;
  // The last finish_step's values (on a GPU this waits for the step). The engine's own buffer,
  // valid until the next finish_step (no allocation per step).
  virtual const StepReadout& read_step() = 0;
  // Bytes of the model's buffers besides parameters and gradients.
  virtual std::int64_t model_buffer_bytes() const = 0;
  // Mixture of experts (nothing for a dense model; model/moe_block.hpp): zero
  // the step's expert loads, apply the aux_free bias update after the step,
  // take the routing statistics since the previous take, and the selection
  // biases a checkpoint keeps (one vector per MoE layer).
  virtual void moe_begin_step() {}
  virtual void moe_end_step() {}
  virtual std::vector<MoeLayerStats> moe_take_stats() { return {}; }
  virtual std::vector<std::vector<float>> moe_biases() const { return {}; }
  virtual void set_moe_biases(const std::vector<std::vector<float>>&) {}
  // Data parallelism (train/zero.hpp, docs/distributed.md). Every rank calls
  // these in the same order. join: once, right after construction (before
  // initialize or upload) when the job has several ranks; zero_stage 1 shards
  // the optimizer state. overlap_next_backward: before a rank's last
  // micro-batch of a step (the CUDA engine then reduces gradients in buckets
  // while that backward pass runs). reduce_grads: after the step's
  // micro-batches: the Σ over ranks of the gradients (ZeRO-1: of this rank's
  // shard), after which finish_step sees the global batch.
  // Under ZeRO-1 the state is sharded(): upload keeps the rank's shard, the
  // moments reach rank 0 through gather_moments (m and v whole arrays there,
  // nullptr on the other ranks), and on a GPU download(params, nullptr,
  // nullptr) and download_tensor are collectives as well (download fills rank
  // 0's params only).
  virtual void join(const gc::rt::Comm& comm, int zero_stage) = 0;
  virtual void overlap_next_backward() {}
  virtual void reduce_grads() = 0;
  virtual bool sharded() const { return false; }
  virtual void gather_moments(float*, float*) {}
  // Gradient reductions a step issues (the CUDA engine's buckets; 0 in one process).
  virtual int last_step_reductions() const { return 0; }
  // Bytes of AdamW moments this rank holds (all of them, or its ZeRO-1 shard).
  virtual std::int64_t optimizer_bytes() const = 0;
  // Σ over ranks of the step's expert loads (aux_free's update and the routing
  // records see the whole global batch).
  virtual void moe_allreduce_loads(const gc::rt::Comm&) {}
  // Device memory: in use on the GPU (cudaMemGetInfo: ours, the CUDA context,
  // libraries), the peak of our own allocations, and how many we made.
  virtual std::int64_t device_used_bytes() const { return 0; }
  virtual std::int64_t device_allocated_peak() const { return 0; }
  virtual std::int64_t device_allocations() const { return 0; }
};

// The CPU engine: the trainer's host model and moments are the state.
class CpuEngine final : public Engine {
 public:
  CpuEngine(Model<float>& model, std::vector<float>& m, std::vector<float>& v)
      : model_(model), m_(m), v_(v) {
    readout_.squares.resize(std::size_t(kNumParams));
  }
  // Under ZeRO-1 the moments live in zero_ (m and v then exist only while a checkpoint is loaded
  // or saved).
  std::string describe() const override { return "CPU backend"; }
  void initialize(std::uint64_t seed) override { init_parameters(model_.params.data(), seed); }
  void upload(const float*, const float* m, const float* v) override {
    if (zero_) zero_->keep_shard(m, v);
  }
  void download(float*, float*, float*) override {}  // the host model and moments are the state
  void gather_moments(float* m, float* v) override { zero_->gather_moments(m, v); }
  void download_tensor(int i, float* out) override {
    std::copy(model_.param(i), model_.param(i) + kParams[i].numel, out);
  }
  void zero_grads() override {
    model_.zero_grads();
    step_loss_ = 0.0;
  }
  void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) override {
    const double objective = model_.forward_backward(inputs, targets, loss_scale);
    step_loss_ += loss_scale * (objective - model_.aux_loss());
  }
  double last_aux_loss() const override { return model_.aux_loss(); }
  double forward_loss(const std::int32_t* inputs, const std::int32_t* targets) override {
    return model_.forward(inputs, targets) - model_.aux_loss();
  }
  std::int64_t model_buffer_bytes() const override { return model_.buffer_bytes(); }
  void track_logit_moments(bool on) override { model_.track_logit_moments(on); }
  const Model<float>& activations(Model<float>&) override { return model_; }
  void join(const gc::rt::Comm& comm, int zero_stage) override {
    comm_ = &comm;
    if (zero_stage == 1) zero_ = std::make_unique<ZeroOneOptimizer>(comm);
  }
  // ZeRO-1: this rank's shard of the sum and every tensor's global Σ g²; else Σ of everything.
  void reduce_grads() override {
    if (zero_) {
      zero_->reduce_gradients(model_.grads.data());
    } else {
      comm_->allreduce_sum(model_.grads.data(), kOffsets.at[kNumParams]);
    }
  }
  bool sharded() const override { return zero_ != nullptr; }
  int last_step_reductions() const override { return comm_ != nullptr ? 1 : 0; }  // one MPI collective
  std::int64_t optimizer_bytes() const override {
    return zero_ ? zero_->moment_bytes() : std::int64_t(2 * kOffsets.at[kNumParams] * 4);
  }
  void moe_allreduce_loads(const gc::rt::Comm& comm) override {
    sum_moe_loads(model_, [&](std::int64_t* loads, std::int64_t n) { comm.allreduce_sum(loads, n); });
  }
  void moe_begin_step() override {
    if constexpr (kMoe) {
      begin_moe_step(model_);
    }
  }
  void moe_end_step() override {
    if constexpr (kMoe) {
      end_moe_step(model_);
    }
  }
  std::vector<MoeLayerStats> moe_take_stats() override {
    if constexpr (kMoe) {
      return take_moe_stats(model_, [this](int l) {
        const auto& scores = model_.moe_layer(l).scores;
        return router_entropy(scores.data(), std::int64_t(scores.size()) / kExperts);
      });
    }
    return {};
  }
  std::vector<std::vector<float>> moe_biases() const override { return gcm::moe_biases(model_); }
  void set_moe_biases(const std::vector<std::vector<float>>& biases) override { gcm::set_moe_biases(model_, biases); }
  void finish_step(double lr, std::int64_t t) override {
    double loss = step_loss_;
    if (comm_ != nullptr) comm_->allreduce_sum(&loss, 1);
    if (zero_) {
      readout_.squares = zero_->squares();  // reduce_grads summed them over the shards
    } else {
      for (int i = 0; i < kNumParams; ++i) {
        readout_.squares[std::size_t(i)] = cpu::sum_of_squares(model_.grad(i), kParams[i].numel);
      }
    }
    StepVerdict& verdict = readout_.verdict;
    judge_step(verdict, loss, readout_.squares.data(), kNumParams, kGradClip, t);
    if (verdict.stopped_at != 0) return;
    if (zero_) {
      zero_->step(model_.params.data(), lr, verdict.clip, t);
      return;
    }
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, t};
      cpu::adamw_step(model_.param(i), m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i], model_.grad(i),
                      p.numel, hp, verdict.clip);
    }
  }
  const StepReadout& read_step() override { return readout_; }

 private:
  Model<float>& model_;
  std::vector<float>& m_;
  std::vector<float>& v_;
  StepReadout readout_;
  double step_loss_ = 0.0;  // Σ loss_scale · cross-entropy since zero_grads
  const gc::rt::Comm* comm_ = nullptr;        // set by join (a job of several ranks)
  std::unique_ptr<ZeroOneOptimizer> zero_;    // distributed.zero_stage = 1
};

// Defined in cuda/engine.cu, so only in a tree built with the CUDA backend
// (GC_HAVE_CUDA; callers guard on it). make_cuda_engine throws, naming the
// reason, when no GPU is usable.
std::unique_ptr<Engine> make_cuda_engine(int micro_batch, int seq_len);
// Whether the tree's CUDA backend was built with NCCL (multi-process training on GPUs).
bool cuda_has_nccl();
// Whether a GPU that can run this tree's kernels (compute capability 8.0 or
// newer, with kernels built for it: GC_CUDA_ARCHITECTURES) is present.
bool cuda_available();

}  // namespace gcm
