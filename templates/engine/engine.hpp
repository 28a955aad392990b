// Where a training step runs. The trainer keeps the run's state on the host
// (fp32 parameters, AdamW moments: what checkpoints and metrics read); an
// engine owns the step itself: forward and backward over a micro-batch,
// per-tensor gradient sums of squares, the AdamW update.
//
//   CpuEngine   engine/cpu_engine.hpp: works on the host state in place
//               (nothing to copy).
//   CudaEngine  engine/cuda_engine.cu: fp32 master weights, moments and
//               gradients on the GPU (bf16 working weights under precision
//               "bf16"), initialized there; the host state is refreshed by
//               download() before a checkpoint, metrics or the sample, and
//               pushed by upload() after a resume.
//
// The interface comes in the four parts a reader looks for (EngineStep,
// EngineState, EngineDistribution, EngineTelemetry); ModelEngine implements
// what both engines do the same way on their BasicModel (the loss without
// the balancing term, the MoE hooks).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/kernel_rules.hpp"
#include "metrics/activation_metrics.hpp"
#include "metrics/weight_stats.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "profile/step_profile.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "step_verdict.hpp"

namespace gc::tree {

// What read_step returns: the last finished step's verdict (loss, gradient norm, clip, stop) and
// each tensor's Σ g² over the global batch before clipping (kParams order).
struct StepReadout {
  StepVerdict verdict;
  std::vector<double> squares;
};

// The step: what the training loop calls for every step, in this order: zero_grads,
// moe_begin_step, forward_backward per micro-batch, (reduce_grads), finish_step, moe_end_step.
class EngineStep {
 public:
  virtual ~EngineStep() = default;
  // Starts a step: zero gradients and step loss.
  virtual void zero_grads() = 0;
  // One micro-batch: adds dL/dθ · loss_scale to the gradients, L the mean
  // cross-entropy + the MoE balancing loss, and loss_scale · (mean cross-entropy) to the step's
  // loss (on a GPU without waiting for the forward pass: the sum stays on the device).
  virtual void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) = 0;
  // The balancing-loss part of the last forward (0 for a dense model), read on the host.
  virtual double last_aux_loss() const = 0;
  // The step's balancing loss: Σ over the micro-batches of loss_scale · L_aux, summed over the
  // ranks (after finish_step; on a GPU a read that waits, so the trainer asks at read steps only).
  virtual double step_aux_loss() = 0;
  // Mean cross-entropy, no gradients (evaluation; no balancing loss).
  virtual double forward_loss(const std::int32_t* inputs, const std::int32_t* targets) = 0;
  // Ends step t (t ≥ 1) after its micro-batches (and reduce_grads): the step's loss summed over
  // the ranks, each tensor's Σ g² (fixed summation order: repeatable), the verdict of
  // step_verdict.hpp (global norm, clip multiplier for max norm kGradClip, stop), and
  // AdamW with η = lr · lr_mult on every tensor, unless the run has stopped. The CUDA engine
  // queues all of it on the GPU and returns without waiting.
  virtual void finish_step(double lr, std::int64_t t) = 0;
  // The last finish_step's values (on a GPU this waits for the step). The engine's own buffer,
  // valid until the next finish_step (no allocation per step).
  virtual const StepReadout& read_step() = 0;
  // Mixture of experts (nothing for a dense model; model/moe_steps.hpp): zero the step's expert
  // loads; apply the aux_free bias update after the step.
  virtual void moe_begin_step() = 0;
  virtual void moe_end_step() = 0;
};

// State transfer between the engine and the trainer's host state (checkpoints, metrics, sample).
class EngineState {
 public:
  virtual ~EngineState() = default;
  // Initial parameters from the plan's init rules (Philox stream i for tensor
  // i: the same weights on every backend); moments start at zero.
  virtual void initialize(std::uint64_t seed) = 0;
  // Host state → engine (after init or resume).
  virtual void upload(const float* params, const float* m, const float* v) = 0;
  // Engine → host state. m and v may be null (parameters only). When expert_weights_split(), a
  // collective of every rank that fills rank 0's params only (nullptr elsewhere).
  virtual void download(float* params, float* m, float* v) = 0;
  // Whether a rank holds its own experts' weights only (expert parallelism, both engines): download
  // then gathers the whole parameters to rank 0, and every forward, evaluation included,
  // exchanges the experts inside a group (so a group's ranks evaluate together).
  virtual bool expert_weights_split() const { return false; }
  // Under ZeRO-1: the moments reach rank 0 (m and v whole arrays there, nullptr elsewhere).
  virtual void gather_moments(float*, float*) {}
  // The aux_free selection biases a checkpoint keeps (one vector per MoE layer).
  virtual std::vector<std::vector<float>> moe_biases() const = 0;
  virtual void set_moe_biases(const std::vector<std::vector<float>>&) = 0;
};

// Data parallelism (engine/zero.hpp, docs/distributed.md). Every rank calls
// these in the same order. join: once, right after construction (before
// initialize or upload) when the job has several ranks; zero_stage 1 shards
// the optimizer state. overlap_next_backward: before a rank's last
// micro-batch of a step (the CUDA engine then reduces gradients in buckets
// while that backward pass runs). reduce_grads: after the step's
// micro-batches: the Σ over ranks of the gradients (ZeRO-1: of this rank's
// shard), after which finish_step sees the global batch.
// Under ZeRO-1 the state is sharded(): upload keeps the rank's shard, the
// moments reach rank 0 through gather_moments, and on a GPU download(params,
// nullptr, nullptr) and update_sums are collectives as well (download fills
// rank 0's params only). Expert parallelism without ZeRO-1 is sharded() too:
// a rank holds its expert block's moments (and on a GPU masters: split_experts).
class EngineDistribution {
 public:
  virtual ~EngineDistribution() = default;
  virtual void join(const gc::rt::Comm& comm, int zero_stage) = 0;
  virtual void overlap_next_backward() {}
  virtual void reduce_grads() = 0;
  virtual bool sharded() const { return false; }
  // A fingerprint of this rank's parameters (core/fingerprint.hpp), which every data-parallel
  // rank holds whole and alike: the trainer compares them at each save and at the end.
  virtual std::uint64_t replica_fingerprint() = 0;
  // Gradient reductions a step issues (the CUDA engine's buckets; 0 in one process).
  virtual int last_step_reductions() const { return 0; }
  // Σ over ranks of the step's expert loads (aux_free's update and the routing
  // records see the whole global batch).
  virtual void moe_allreduce_loads(const gc::rt::Comm&) = 0;
  // Expert parallelism (distributed.expert_parallel): after join, the MoE layers' experts are
  // split over groups of group_ranks consecutive ranks (engine/expert_groups.hpp on the CPU,
  // engine/nccl_expert_exchange.cuh on GPUs; an engine without it refuses), a rank's experts
  // receiving at most receive_factor times its own assignments (0: the dropless worst case), over
  // the route `route` picks (model/expert_parallel.hpp).
  virtual void split_experts(int /*group_ranks*/, double /*receive_factor*/, RouteChoice /*route*/) {
    throw gc::rt::RuntimeError("train", "this engine cannot split experts (distributed.expert_parallel): on GPUs "
                                        "it needs a tree built with NCCL");
  }
  // What the expert exchanges moved: bytes this rank sent to other ranks, seconds inside them,
  // how many (the summary record; zeros without expert parallelism).
  struct ExchangeTotals {
    std::int64_t bytes_sent = 0;
    double seconds = 0.0;
    std::int64_t exchanges = 0;
  };
  virtual ExchangeTotals expert_exchange_totals() const { return {}; }
  // The training watchdog's hooks (runtime/watchdog.hpp), called from its thread: abort every
  // communicator (a rank blocked in a collective returns), or name an asynchronous error (""
  // when none). Without communicators of its own (MPI on the CPU): nothing to do.
  virtual void abort_communicators() {}
  virtual std::string communicator_error() { return {}; }
};

// What the metrics, the logs and the summary record read.
class EngineTelemetry {
 public:
  virtual ~EngineTelemetry() = default;
  virtual std::string describe() const = 0;
  // While on, forward_loss also sums the logits' moments (the logit_std metric of a model
  // that does not keep its logits: BasicModel::track_logit_moments).
  virtual void track_logit_moments(bool on) = 0;
  // Allocates the metrics' scratch (on a GPU: device memory, metrics/device_scratch.hpp), here
  // and not in the loop: for the spec's metrics (train), or for every metric (./analyze).
  virtual void prepare_metrics(bool /*every_metric*/ = false) {}
  // After forward_loss: that batch's activation metrics added to `into`, computed where the
  // activations lie (on a GPU, reduced on the device: a few numbers per layer come back).
  virtual void measure_activations(metrics::ActivationMetrics& into) = 0;
  // After forward_loss with a model that keeps every row's logits: those logits [N, V] readable
  // on the host (the anchor task's accuracies; its vocabulary is small). `staging` may hold them.
  virtual const float* logits_on_host(std::vector<float>& staging) = 0;
  // The weight metrics' view of the current weights where they lie (metrics/weight_stats.hpp),
  // or nullptr when they must be read from the host state (the CPU backend, whose host state is
  // the engine's; a GPU whose fp32 masters are sharded by ZeRO-1 under bf16).
  virtual metrics::WeightStats* weight_stats() { return nullptr; }
  // Whether measuring the weights is a collective (ZeRO-1 under bf16 on GPUs: each tensor is
  // assembled from the ranks' shards), so that every rank runs weight_records when rank 0 does.
  virtual bool weight_metrics_collective() const { return false; }
  // Update ratios: snapshot_tensors(mask) before finish_step keeps the tensors `mask` selects;
  // update_sums(mask) after it returns for each tensor (kParams order, zero outside the mask)
  // Σ (θ_after − θ_before)² and Σ θ_before² over the whole tensor (under ZeRO-1 every rank calls
  // it: the shards' sums are added over the ranks).
  virtual void snapshot_tensors(const bool* mask) = 0;
  virtual std::vector<std::array<double, 2>> update_sums(const bool* mask) = 0;
  // Each tensor's Σ g² of the gradients accumulated since zero_grads, without a step (./analyze:
  // the gradient norms of the validation loss). One process only.
  virtual std::vector<double> gradient_squares() = 0;
  // MoE: the loads since moe_begin_step join the routing-record window (./analyze, which
  // routes without stepping: no bias update). Nothing for a dense model.
  virtual void moe_accumulate_window() = 0;
  // The routing statistics since the previous take (MoE; empty for a dense model).
  virtual std::vector<MoeLayerStats> moe_take_stats() = 0;
  // Bytes of the model's buffers besides parameters and gradients.
  virtual std::int64_t model_buffer_bytes() const = 0;
  // Bytes of AdamW moments this rank holds (all of them, its ZeRO-1 shard, or under expert
  // parallelism its expert block's: model/state_layout.hpp).
  virtual std::int64_t optimizer_bytes() const = 0;
  // Bytes of gradients this rank holds (all of them, or its expert block's).
  virtual std::int64_t gradient_bytes() const = 0;
  // Bytes of working weights this rank holds (all of them, or with expert_weights_split() its
  // expert block's).
  virtual std::int64_t weight_bytes() const = 0;
  // Device memory: in use on the GPU (cudaMemGetInfo: ours, the CUDA context,
  // libraries), the peak of our own allocations, and how many we made.
  virtual std::int64_t device_used_bytes() const { return 0; }
  virtual std::int64_t device_allocated_peak() const { return 0; }
  virtual std::int64_t device_allocations() const { return 0; }
  // Bytes this process has copied from the device to the host so far (0 on the CPU).
  virtual std::int64_t device_to_host_bytes() const { return 0; }
  // Device → host copies so far (each waits for the GPU); 0 on the CPU.
  virtual std::int64_t device_to_host_copies() const { return 0; }
  // The step profile (train --profile; profile/step_profile.hpp): a clock where this engine's
  // work runs, and the recorder its model's ops report to (null: not profiling).
  virtual std::unique_ptr<profile::Clock> make_profile_clock() = 0;
  virtual void attach_profiler(profile::Recorder* recorder) = 0;
};

class Engine : public EngineStep, public EngineState, public EngineDistribution, public EngineTelemetry {};

// What both engines do alike on their model M (a BasicModel on the CPU or the CUDA backend).
// Ops: the backend's statistics for the activation metrics (cpu::MetricOps or
// cuda::MetricOps).
template <typename M, typename Ops>
class ModelEngine : public Engine {
 public:
  void measure_activations(metrics::ActivationMetrics& into) override { into.add_batch(model(), metric_ops()); }
  const float* logits_on_host(std::vector<float>& staging) override {
    if (!model().keeps_logits()) {  // the anchor task's vocabulary is small: this does not happen
      throw gc::rt::RuntimeError("anchor evaluation needs every row's logits, but the LM head runs in chunks of " +
                                 std::to_string(model().head_rows()) + " rows");
    }
    return logits_of(staging);
  }
  double last_aux_loss() const override { return model().aux_loss(); }
  double forward_loss(const std::int32_t* inputs, const std::int32_t* targets) override {
    return model().forward(inputs, targets) - model().aux_loss();
  }
  std::int64_t model_buffer_bytes() const override { return model().buffer_bytes(); }
  void track_logit_moments(bool on) override { model().track_logit_moments(on); }
  void attach_profiler(profile::Recorder* recorder) override { model().backend().profiler = recorder; }
  void moe_begin_step() override {
    if constexpr (kMoe) {
      begin_moe_step(model());
    }
  }
  void moe_end_step() override {
    if constexpr (kMoe) {
      end_moe_step(model());
    }
  }
  std::vector<MoeLayerStats> moe_take_stats() override {
    if constexpr (kMoe) {
      return take_moe_stats(model(), [this](int l) {
        const auto& scores = model().moe_layer(l).scores;  // [N, E], fp32 on both backends
        return metric_ops().router_entropy(scores.data(), std::int64_t(scores.size()) / kExperts, kExperts);
      });
    }
    return {};
  }
  void moe_accumulate_window() override {
    if constexpr (kMoe) {
      accumulate_moe_window(model());
    }
  }
  void moe_allreduce_loads(const gc::rt::Comm& comm) override {
    sum_moe_loads(model(), [&](double* tally, std::int64_t n) { comm.allreduce_sum(tally, n); });
  }
  std::vector<std::vector<float>> moe_biases() const override { return gc::tree::moe_biases(model()); }
  void set_moe_biases(const std::vector<std::vector<float>>& biases) override {
    gc::tree::set_moe_biases(model(), biases);
  }

 protected:
  virtual M& model() = 0;
  virtual const M& model() const = 0;
  virtual Ops& metric_ops() = 0;
  // The model's logits [N, V] on the host (keeps_logits()).
  virtual const float* logits_of(std::vector<float>& staging) = 0;
};

// Defined in engine/cuda_engine.cu, so only in a tree built with the CUDA backend
// (GC_HAVE_CUDA; callers guard on it). make_cuda_engine throws, naming the
// reason, when no GPU is usable, or when `kernels` asks for kernels that cannot run there.
std::unique_ptr<Engine> make_cuda_engine(int micro_batch, int seq_len, const core::KernelChoices& kernels = {});
// Whether the tree's CUDA backend was built with NCCL (multi-process training on GPUs).
bool cuda_has_nccl();
// Whether a GPU that can run this tree's kernels (compute capability 8.0 or
// newer, with kernels built for it: GC_CUDA_ARCHITECTURES) is present.
bool cuda_available();

}  // namespace gc::tree
