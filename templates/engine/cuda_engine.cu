// The CUDA training engine (engine/engine.hpp): the model of model/model_impl.hpp on the CUDA
// backend, plus fp32 master weights, AdamW moments and the fused multi-tensor AdamW on the device.
//
// precision "fp32": the model's parameters are the master weights (no copy; under expert
// parallelism the block's masters are apart). precision "bf16": the model computes with bf16
// working weights, rewritten from the fp32 masters after each update; gradients, moments and
// every reduction stay fp32.
//
// A step waits for nothing: the loss accumulates on the device, finish_step queues the gradient
// norms, the step's verdict (norm, clip, stop: step_verdict.hpp) and AdamW reading it, and the
// host reads the values back (read_step) only when it logs, records or saves.
//
// Data parallelism (join; docs/distributed.md), over NCCL:
//   zero_stage 0  every rank holds the whole state; during a rank's last micro-batch the gradients
//                 are all-reduced in buckets of whole layers (≥ distributed.bucket_mb, last layer
//                 first; the final norm and LM head before them) on a second stream as the backward
//                 queues them; the embedding follows. The default stream waits for the reduction.
//   zero_stage 1  engine/zero.hpp's ZeroShards: a rank holds the moments (and under bf16 the
//                 masters) of its shard; the same buckets are reduced to their parts' owners (one
//                 ncclReduce per owner, in a group), AdamW runs on the shard, and the parameters
//                 are all-gathered (NCCL's equal blocks: the flat arrays get a zero tail).
//   expert_parallel G  the MoE rows are exchanged inside groups (engine/nccl_expert_exchange.cuh);
//                 a rank holds the working weights, gradients, fp32 masters and moments of its
//                 own expert block only (model/state_layout.hpp; under ZeRO-1 the masters and
//                 moments of its shard of it over the block's owners, who then all-gather it
//                 through the spent gradients), written into the working weights after AdamW.
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/adamw.cuh"
#include "cuda/backend.cuh"
#include "cuda/fingerprint.cuh"
#include "cuda/init.cuh"
#include "cuda/metric_ops.cuh"
#include "cuda/profile_clock.cuh"
#include "cuda/update_ratio.cuh"
#include "cuda/weight_stats.cuh"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda/check.hpp"
#include "engine/nccl_expert_exchange.cuh"
#include "runtime/cuda/nccl_comm.hpp"
#include "runtime/error.hpp"
#include "engine/device_choice.cuh"
#include "engine/engine.hpp"
#include "engine/gradient_buckets.cuh"
#include "engine/state_parts.hpp"
#include "engine/update_parts.cuh"
#include "engine/zero.hpp"

namespace gc::tree {

namespace {

using gc::rt::cuda::DeviceBuffer;

using ComputeType = std::conditional_t<kPrecision == Precision::bf16, cuda::bf16, float>;
using CudaModel = BasicModel<cuda::Backend<ComputeType>>;
inline constexpr bool kSeparateMaster = !std::is_same_v<ComputeType, float>;

class CudaEngine final : public ModelEngine<CudaModel, cuda::MetricOps> {
 public:
  // The gradients and the optimizer state are allocated by the first initialize or upload, after
  // join and split_experts have decided how much of them this rank holds (so the allocation peak
  // is the rank's own: the whole gradient array never exists first).
  CudaEngine(int micro_batch, int seq_len, const core::KernelChoices& kernels)
      : model_(micro_batch, seq_len, kHeadChunkRows, CudaModel::State::defer), shard_(StateLayout::whole(), 0, 1) {
    model_.backend().choose_kernels(kernels);
    upload_tensor_table();
    squares_.resize(std::size_t(kNumParams));
    readout_.squares.resize(std::size_t(kNumParams));
    verdict_.resize(1);
    verdict_.upload(&readout_.verdict, 1);  // no step yet: nothing stopped
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::string describe() const override {
    const cudaDeviceProp prop = gc::rt::cuda::current_device_properties();
    const std::string experts = model_.backend().expert_kernels();
    return std::string("CUDA backend (") + prop.name + ", " + (kSeparateMaster ? "bf16" : "fp32") + ", " +
           model_.backend().attention_kernels() + (experts.empty() ? "" : ", " + experts) + ")";
  }
  std::unique_ptr<profile::Clock> make_profile_clock() override { return std::make_unique<cuda::EventClock>(); }

  // Each tensor from its own Philox stream: the master weights of this rank's shard (all of them
  // without ZeRO), and under bf16 the working copy (of an expert tensor under expert parallelism
  // the own block), drawn in bf16 (the rounding of the same fp32 value a cast of the master would give).
  void initialize(std::uint64_t seed) override {
    allocate_state();
    const std::vector<cuda::AdamWTensor> table = parts().table();
    const StateLayout& held_weights = model_.weight_layout();
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      const cuda::AdamWTensor& held = table[std::size_t(i)];
      cuda::init_tensor(master_shard() + held.offset, held.numel, p.init, kInitStd[i], p.cutoff, seed,
                        std::uint32_t(i), parts().first(i));
      if (kSeparateMaster || expert_blocks_) {
        cuda::init_tensor(model_.params.data() + held_weights.at(i), held_weights.held(i), p.init, kInitStd[i],
                          p.cutoff, seed, std::uint32_t(i), held_weights.first(i));
      }
    }
    m_.zero();
    v_.zero();
  }

  // params: the whole array on every rank; m and v: whole arrays, of which a rank keeps its part
  // (engine/state_parts.hpp), as of the masters (under bf16 or expert parallelism) and the
  // working weights (model_.weight_layout()).
  void upload(const float* params, const float* m, const float* v) override {
    allocate_state();
    upload_working(model_.params, params);
    if (kSeparateMaster || expert_blocks_) upload_part(master_, params);
    upload_part(m_, m);
    upload_part(v_, v);
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  // Without ZeRO: the whole state. Under ZeRO-1 a collective: rank 0's params receive every
  // rank's master shard (m and v: gather_moments).
  void download(float* params, float* m, float* v) override {
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    if (sharded()) return gather_state(params, master_shard());
    const std::size_t n = std::size_t(kOffsets.at[kNumParams]);
    gc::rt::cuda::copy_to_host(params, master_shard(), n * sizeof(float));
    if (m) m_.download(m, n);
    if (v) v_.download(v, n);
  }
  void gather_moments(float* m, float* v) override {
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    gather_state(m, m_.data());
    gather_state(v, v_.data());
  }
  void zero_grads() override {
    model_.zero_grads();
    model_.backend().clear_deferred_loss();
  }
  // The loss stays on the device: the forward's cross-entropy adds loss_scale · mean CE to the
  // backend's step accumulator instead of copying it to the host, so the backward is queued
  // while the forward still runs (no host stall between them).
  void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) override {
    model_.backend().defer_loss(loss_scale);
    model_.forward_backward(inputs, targets, loss_scale);
  }
  // All on the device, nothing read back: Σ g² per tensor over this rank's shard (everything
  // without ZeRO; summed over the ranks under ZeRO-1), the loss summed over the ranks, the
  // verdict (norm, clip, stop) by one device thread, AdamW reading it, and under ZeRO-1 the
  // parameters' all-gather.
  void finish_step(double lr, std::int64_t t) override {
    double* loss = model_.backend().deferred_loss();
    queue_gradient_squares();
#ifdef GC_HAVE_NCCL
    if (comm_ != nullptr) {
      nccl_->all_reduce(loss, 2, nullptr);  // [cross-entropy, balancing loss]
      if (zero1_ && !expert_blocks_) nccl_->all_reduce(squares_.data(), kNumParams, nullptr);
      if (expert_blocks_) experts_->complete_device_sums(squares_.data());
    }
#endif
    cuda::judge_step_on_device(verdict_.data(), loss, squares_.data(), kNumParams, kGradClip, t);
    if (update_due_) {  // update ratios: the update below, summed before it is applied
      cuda::update_squares_per_tensor(update_sums_.data(), update_partial_.data(), master_shard(), m_.data(),
                                      v_.data(), model_.grads.data() + shard_.lo, update_tensors_.data(), kNumParams,
                                      state_slots(), lr, kBeta1, kBeta2, kAdamEps, t, verdict_.data());
      update_due_ = false;
    }
    ComputeType* working = nullptr;
    if constexpr (kSeparateMaster) {
      if (!expert_blocks_) working = model_.params.data() + shard_.lo;
    }
    cuda::adamw_step_judged(master_shard(), working, m_.data(), v_.data(), model_.grads.data() + shard_.lo,
                            tensors_.data(), kNumParams, state_slots(), lr, kBeta1, kBeta2, kAdamEps, t,
                            verdict_.data());
#ifdef GC_HAVE_NCCL
    if (zero1_ && !expert_blocks_) nccl_->all_gather(model_.params.data(), shard_.per_rank, comm_->rank(), nullptr);
    if (expert_blocks_) experts_->write_block(model_.params.data(), gather_block_masters());  // the block's
#endif
  }
  // Two device→host copies, which wait for everything queued (the host's step timing then covers
  // the GPU's work).
  const StepReadout& read_step() override {
    verdict_.download(&readout_.verdict, 1);
    squares_.download(readout_.squares.data(), readout_.squares.size());
    return readout_;
  }
  // The step's expert tallies lie on the device: summed over the ranks by NCCL on the compute
  // stream, after the step's work and without a host copy.
  void moe_allreduce_loads(const gc::rt::Comm&) override {
#ifdef GC_HAVE_NCCL
    sum_moe_loads(model_, [&](double* tally, std::int64_t n) { nccl_->all_reduce(tally, n, nullptr); });
#endif
  }
  // The step accumulator's second entry (summed over the ranks by finish_step).
  double step_aux_loss() override {
    double aux = 0.0;
    gc::rt::cuda::copy_to_host(&aux, model_.backend().deferred_loss() + 1, sizeof aux);
    return aux;
  }
  void join(const gc::rt::Comm& comm, int zero_stage) override {
#ifdef GC_HAVE_NCCL
    comm_ = &comm;
    nccl_ = std::make_unique<gc::rt::cuda::NcclComm>(comm);
    if (zero_stage == 1) {
      zero1_ = true;
      shard_ = ZeroShards(StateLayout::whole(), comm.rank(), comm.size());  // allocate_state pads the arrays
      upload_tensor_table();
    }
    plan_buckets();
    GC_CUDA_CHECK(cudaDeviceSynchronize());
#else
    (void)zero_stage;
    throw gc::rt::RuntimeError("train", "this tree was built without NCCL, so the CUDA backend cannot train as " +
                                            std::to_string(comm.size()) + " processes (see the tree's CMake output)");
#endif
  }
  // ZeRO-1 shards the optimizer state over the world; expert parallelism keeps the expert
  // block's (model/state_layout.hpp), under ZeRO-1 a shard of it: rank 0 gathers what it saves.
  bool sharded() const override { return zero1_ || expert_blocks_; }
  // Under expert parallelism: engine/expert_groups.hpp's expert_parallel_fingerprint.
  std::uint64_t replica_fingerprint() override {
#ifdef GC_HAVE_NCCL
    if (expert_blocks_) return experts_->fingerprint(model_.params.data(), fingerprint_);
#endif
    return fingerprint_.of(model_.params.data(), std::int64_t(model_.params.size()));
  }
  bool expert_weights_split() const override { return expert_blocks_; }
#ifdef GC_HAVE_NCCL
  void abort_communicators() override { gc::rt::cuda::NcclComm::abort_all(); }
  std::string communicator_error() override { return gc::rt::cuda::NcclComm::async_error(); }
  // Expert parallelism (engine/nccl_expert_exchange.cuh): the MoE rows exchanged inside groups
  // of G ranks. The working weights, gradients, masters and moments become the rank's expert
  // block's, under ZeRO-1 the masters and moments its shard of the block over the block's owners
  // (the state is allocated by the first initialize or upload, after this).
  void split_experts(int G, double receive_factor, RouteChoice route) override {
    experts_ = std::make_unique<DeviceExpertGroups<ComputeType>>(*comm_, G);
    experts_->exchange().receive_factor = receive_factor;
    experts_->exchange().route = route;
    model_.attach_expert_exchange(&experts_->exchange());
    experts_->exchange().before_collective = [this] { buckets_.order_before_collective(); };
    expert_blocks_ = true;
    model_.use_state_layout(experts_->layout());
    model_.use_weight_layout(experts_->layout());  // unpadded; initialize or upload fills it
    shard_ = ZeroShards(layout(), 0, 1);
    if (zero1_) {  // the gradients are padded to equal shards
      shard_ = ZeroShards(layout(), experts_->owners_host().rank(), experts_->owners_host().size());
      model_.grads.resize(std::size_t(shard_.padded()));
      model_.grads.zero();
    }
    plan_buckets();
    upload_tensor_table();
  }
  ExchangeTotals expert_exchange_totals() const override {
    return experts_ ? ExchangeTotals{experts_->exchange().bytes_sent, 0.0, experts_->exchange().exchanges}
                    : ExchangeTotals{};
  }
#endif
  void overlap_next_backward() override { buckets_.arm(); }
  void reduce_grads() override {
#ifdef GC_HAVE_NCCL
    if (!buckets_.armed()) {  // no buckets: one collective after the backward pass
      if (expert_blocks_) {
        experts_->reduce(model_.grads.data(), 0, layout().total(), *nccl_, nullptr);
      } else if (zero1_) {
        nccl_->reduce_scatter(model_.grads.data(), shard_.per_rank, comm_->rank(), nullptr);
      } else {
        nccl_->all_reduce(model_.grads.data(), layout().total(), nullptr);
      }
      buckets_.note_single_reduction();
      return;
    }
    buckets_.finish();
#endif
  }
  std::int64_t optimizer_bytes() const override { return std::int64_t((m_.size() + v_.size()) * sizeof(float)); }
  std::int64_t gradient_bytes() const override { return std::int64_t(model_.grads.size() * sizeof(float)); }
  std::int64_t weight_bytes() const override { return std::int64_t(model_.params.size() * sizeof(ComputeType)); }
  int last_step_reductions() const override { return buckets_.reductions(); }

  // The metrics' device scratch, sized for this model and the plan's tensors (after join: the
  // update-ratio pass covers this rank's shard). Sizes: metrics/device_scratch.hpp, as the
  // memory plan counts them.
  void prepare_metrics(bool every_metric = false) override {
    metric_ops_.prepare(model_.rows(), kHeads);
    const int top_tokens = every_metric ? std::min(kEmbeddingTopTokens, kVocab) : metrics::planned_top_tokens();
    weight_stats_ = std::make_unique<cuda::DeviceWeightStats>(metrics::WeightScratch::of_plan(top_tokens, every_metric),
                                                              model_.backend().blas());
    static_assert(sizeof(cuda::AdamWTensor) == 24, "metrics/device_scratch.hpp counts 24-byte table rows");
    const metrics::UpdateScratch updates = metrics::UpdateScratch::of_range(shard_.lo, shard_.lo + state_slots());
    update_partial_.resize(std::size_t(updates.partial_doubles()));
    update_sums_.resize(2 * std::size_t(kNumParams));
    update_tensors_.resize(std::size_t(kNumParams));
    upload_update_table(kUpdateRatioTensors);
    if (weight_metrics_collective()) gather_.resize(std::size_t(metrics::master_gather_bytes() / 4));
  }
  // The fp32 weights whole on this rank: the masters without ZeRO-1; under ZeRO-1 in fp32 the
  // parameters (all-gathered after every step). Under ZeRO-1 in bf16 a rank holds only its shard
  // of the masters: each tensor is assembled on the device (gathered_master), a collective.
  metrics::WeightStats* weight_stats() override {
    if (!weight_stats_) prepare_metrics();
    if (const float* whole = whole_fp32_weights(model_.params)) {
      weight_stats_->bind(whole);
    } else {
      gathered_ = -1;  // the weights changed since the last measurement
      weight_stats_->bind([this](int i) { return gathered_master(i); });
    }
    return weight_stats_.get();
  }
  bool weight_metrics_collective() const override { return sharded() && (kSeparateMaster || expert_blocks_); }
  // Update ratios: the next finish_step sums, before AdamW, the update it applies
  // (cuda/update_ratio.cuh; nothing is copied).
  void snapshot_tensors(const bool* mask) override {
    if (update_tensors_.empty()) prepare_metrics();
    if (mask != update_mask_) upload_update_table(mask);
    update_due_ = true;
  }
  std::vector<double> gradient_squares() override {
    queue_gradient_squares();
    std::vector<double> out(static_cast<std::size_t>(kNumParams));
    squares_.download(out.data(), out.size());
    return out;
  }
  std::vector<std::array<double, 2>> update_sums(const bool* mask) override {
    if (mask != update_mask_) throw gc::rt::RuntimeError("update_sums: the step measured other tensors");
    std::vector<std::array<double, 2>> out(std::size_t(kNumParams), std::array<double, 2>{0.0, 0.0});
    update_sums_.download(out.front().data(), 2 * std::size_t(kNumParams));  // waits for the step
#ifdef GC_HAVE_NCCL
    if (zero1_) (expert_blocks_ ? experts_->owners_host() : *comm_).allreduce_sum(out.front().data(),
                                                                                  2 * std::int64_t(kNumParams));
    if (expert_blocks_) experts_->complete_host_sums(out.front().data(), 2);
#endif
    for (int i = 0; i < kNumParams; ++i) {
      if (!mask[i]) out[std::size_t(i)] = {0.0, 0.0};
    }
    return out;
  }
  std::int64_t device_used_bytes() const override {
    std::size_t free = 0, total = 0;
    GC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return std::int64_t(total - free);
  }
  std::int64_t device_allocated_peak() const override { return gc::rt::cuda::allocation_stats().peak_bytes; }
  std::int64_t device_allocations() const override { return gc::rt::cuda::allocation_stats().allocations; }
  std::int64_t device_to_host_bytes() const override { return gc::rt::cuda::transfer_stats().device_to_host_bytes; }
  std::int64_t device_to_host_copies() const override { return gc::rt::cuda::transfer_stats().device_to_host_copies; }

 protected:
  CudaModel& model() override { return model_; }
  const CudaModel& model() const override { return model_; }
  cuda::MetricOps& metric_ops() override { return metric_ops_; }
  const float* logits_of(std::vector<float>& staging) override {
    const std::size_t n = std::size_t(model_.rows()) * kVocab;
    staging.resize(n);
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    if constexpr (std::is_same_v<ComputeType, float>) {
      gc::rt::cuda::copy_to_host(staging.data(), model_.logits(), n * sizeof(float));
    } else {
      staging_.resize(n);
      gc::rt::cuda::copy_to_host(staging_.data(), model_.logits(), n * sizeof(ComputeType));
      for (std::size_t j = 0; j < n; ++j) staging[j] = cuda::to_float(staging_[j]);
    }
    return staging.data();
  }

 private:
  // The fp32 weights AdamW updates, from this rank's shard's first element (all of them without
  // ZeRO): the model's own parameters under fp32, the separate masters under bf16. (Templates
  // over the parameter buffer, so that only the valid branch is instantiated.)
  float* master_shard() { return master_shard_of(model_.params); }
  template <typename Params>
  float* master_shard_of(Params& params) {
    if (expert_blocks_) return master_.data();  // the block's masters, apart from the whole weights
    if constexpr (std::is_same_v<Params, DeviceBuffer<float>>) {
      return params.data() + shard_.lo;
    } else {
      return master_.data();
    }
  }
  // The whole host array's part (model_.weight_layout()) into the working weights (rounded on the
  // host under bf16).
  template <typename Params>
  void upload_working(Params& params, const float* host) {
    const StateLayout& held = model_.weight_layout();
    if (!held.is_whole()) {
      block_host_.resize(std::size_t(held.total()));
      keep_layout_part(held, block_host_.data(), host);
      host = block_host_.data();
    }
    const std::size_t n = std::size_t(held.total());
    if constexpr (std::is_same_v<Params, DeviceBuffer<float>>) {
      params.upload(host, n);
    } else {
      staging_.resize(n);
      for (std::size_t j = 0; j < n; ++j) staging_[j] = cuda::from_float<ComputeType>(host[j]);
      params.upload(staging_.data(), n);
    }
  }
  // This rank's part (engine/state_parts.hpp) of a whole host array into `device`.
  void upload_part(DeviceBuffer<float>& device, const float* whole) {
    shard_host_.resize(std::size_t(state_slots()));
    keep_state_part(shard_, shard_host_.data(), whole, block_host_);
    device.upload(shard_host_.data(), shard_host_.size());
  }
  template <typename Params>
  const float* whole_fp32_weights(Params& params) {
    if constexpr (std::is_same_v<Params, DeviceBuffer<float>>) {
      return expert_blocks_ ? nullptr : params.data();  // fp32: the parameters, whole unless the experts are split
    } else {
      return sharded() ? nullptr : master_.data();
    }
  }
  // Tensor i's fp32 masters whole on this rank (ZeRO-1 under bf16), a collective: each rank
  // copies its part into the zeroed scratch and an all-reduce adds the parts (every element has
  // one nonzero term: the sum is exact). The last tensor assembled is kept for the next call.
  const float* gathered_master(int i) {
#ifdef GC_HAVE_NCCL
    if (gathered_ == i) return gather_.data();
    if (expert_blocks_ && !zero1_ && !is_expert_tensor(i)) return master_.data() + layout().at(i);  // whole here
    const std::int64_t n = kParams[i].numel;
    if (n > std::int64_t(gather_.size())) throw gc::rt::RuntimeError("weight metrics: no room to assemble " +
                                                                     std::string(kParams[i].name));
    GC_CUDA_CHECK(cudaMemsetAsync(gather_.data(), 0, std::size_t(n) * sizeof(float)));
    const auto [a, b] = shard_.overlap(i);
    if (b > a) {
      GC_CUDA_CHECK(cudaMemcpyAsync(gather_.data() + (shard_.whole_of(i, a) - kOffsets.at[i]),
                                    master_shard() + (a - shard_.lo), std::size_t(b - a) * sizeof(float),
                                    cudaMemcpyDeviceToDevice));
    }
    if (!expert_blocks_) {
      nccl_->all_reduce(gather_.data(), n, nullptr);
    } else {  // the shards over the block's owners, then an expert tensor's blocks over the group
      if (zero1_) experts_->owners().all_reduce(gather_.data(), n, nullptr);
      if (is_expert_tensor(i)) experts_->exchange().nccl().all_reduce(gather_.data(), n, nullptr);
    }
    gathered_ = i;
    return gather_.data();
#else
    throw gc::rt::RuntimeError("weight metrics: tensor " + std::to_string(i) + " is sharded but there is no NCCL");
#endif
  }
  // squares_ = Σ g² per tensor over this rank's shard (queued on stream 0); under expert
  // parallelism over its whole block, summed already (every rank of a group then sees the same bits).
  void queue_gradient_squares() {
#ifdef GC_HAVE_NCCL
    if (expert_blocks_) return experts_->sum_block_squares(squares_.data(), squares_scratch_.data(),
                                                           model_.grads.data());
#endif
    cuda::sum_squares_per_tensor(squares_.data(), squares_scratch_.data(), model_.grads.data() + shard_.lo,
                                 tensors_.data(), kNumParams, state_slots());
  }
  void upload_update_table(const bool* mask) {
    const std::vector<cuda::AdamWTensor> table = parts().table(mask);
    update_tensors_.upload(table.data(), table.size());
    update_mask_ = mask;
  }
  // The working weights (unless split_experts allocated its block's), the gradients, and the fp32
  // masters (bf16) and AdamW moments for this rank's shard (all of them without ZeRO-1).
  void allocate_state() {
    if (model_.params.empty()) {  // whole, under ZeRO-1 padded (split_experts allocated an expert block's)
      model_.params.resize(std::size_t(zero1_ ? shard_.padded() : kOffsets.at[kNumParams]));
      model_.params.zero();  // the alignment gaps and the tail stay zero
    }
    if (model_.grads.empty()) {  // under ZeRO-1 padded to equal shards (NCCL moves equal blocks)
      model_.grads.resize(std::size_t(zero1_ ? shard_.padded() : layout().total()));
      model_.grads.zero();
    }
    if (!m_.empty()) return;
    const std::size_t n = std::size_t(state_slots());
    if (kSeparateMaster || expert_blocks_) master_.resize(n);
    m_.resize(n);
    v_.resize(n);
    m_.zero();
    v_.zero();
  }
  // Rank 0's `all` (whole array; nullptr elsewhere) receives every rank's part of a device
  // array of the optimizer state (engine/state_parts.hpp; a collective).
  void gather_state(float* all, const float* part_device) {
    shard_host_.resize(std::size_t(state_slots()));
    gc::rt::cuda::copy_to_host(shard_host_.data(), part_device, shard_host_.size() * sizeof(float));
    const gc::rt::Comm *sharding = comm_, *group = nullptr;
#ifdef GC_HAVE_NCCL
    if (expert_blocks_) {
      sharding = &experts_->owners_host();
      group = &experts_->exchange().group();
    }
#endif
    gather_state_to_root(*comm_, *sharding, group, shard_, all, shard_host_.data(), block_host_);
  }
  // The parts of the gradients and optimizer state this rank updates (engine/update_parts.cuh).
  UpdateParts parts() const { return {shard_}; }
  // Where this rank keeps its gradients, masters and moments: the model's gradient layout.
  const StateLayout& layout() const { return model_.state_layout(); }
  std::int64_t state_slots() const { return parts().slots(); }
  void upload_tensor_table() {
    const std::vector<cuda::AdamWTensor> table = parts().table();
    tensors_.resize(table.size());
    tensors_.upload(table.data(), table.size());
    const std::int64_t summed = expert_blocks_ ? layout().total() : state_slots();  // queue_gradient_squares
    squares_scratch_.resize(cuda::sum_squares_scratch_doubles(summed, kNumParams));
  }

#ifdef GC_HAVE_NCCL
  // Under expert parallelism, the block's updated masters in layout() slots: the masters, or
  // under ZeRO-1 every owner's shard of them all-gathered into the spent gradient array.
  const float* gather_block_masters() {
    if (!zero1_) return master_.data();
    float* staging = model_.grads.data();
    GC_CUDA_CHECK(cudaMemcpyAsync(staging + shard_.lo, master_.data(), std::size_t(shard_.size()) * sizeof(float),
                                  cudaMemcpyDeviceToDevice));
    experts_->owners().all_gather(staging, shard_.per_rank, experts_->owners_host().rank(), nullptr);
    return staging;
  }
  // engine/gradient_buckets.cuh: the buckets of the gradients' layout (again when expert
  // parallelism changes it), reported by the model's backward pass.
  void plan_buckets() {
    if (buckets_.plan(layout())) model_.on_layer_grads_done = [this](int l) { buckets_.layer_done(l); };
  }
  // Σ over ranks of grads[a, b) on `stream`: on every rank, or under ZeRO-1 on the rank whose
  // shard holds each part (one ncclReduce per owner, in one group: together a reduce-scatter of
  // the bucket), or under expert parallelism the runs of engine/nccl_expert_exchange.cuh.
  void reduce_range(std::int64_t a, std::int64_t b, cudaStream_t stream) {
    if (expert_blocks_) {
      experts_->reduce(model_.grads.data(), a, b, *nccl_, stream);
    } else if (zero1_) {
      nccl_->group_start();
      for (int r = 0; r < int(shard_.counts.size()); ++r) {
        const auto [lo, hi] = shard_.range_of(r);
        const std::int64_t x = std::max(a, lo), y = std::min(b, hi);
        if (y > x) nccl_->reduce(model_.grads.data() + x, y - x, r, stream);
      }
      nccl_->group_end();
    } else {
      nccl_->all_reduce(model_.grads.data() + a, b - a, stream);
    }
  }
  std::unique_ptr<gc::rt::cuda::NcclComm> nccl_;
  std::unique_ptr<DeviceExpertGroups<ComputeType>> experts_;  // distributed.expert_parallel > 1
#endif

  CudaModel model_;
  std::vector<ComputeType> staging_;  // bf16 activations (or weights) on their way between host and device
  cuda::MetricOps metric_ops_;         // the activation metrics' reductions
  std::unique_ptr<cuda::DeviceWeightStats> weight_stats_;  // the weight metrics', on the masters
  // Update ratios: the pass's table (update_mask_'s tensors), its partials and per-tensor sums.
  DeviceBuffer<cuda::AdamWTensor> update_tensors_;
  DeviceBuffer<double> update_partial_, update_sums_;
  const bool* update_mask_ = nullptr;
  bool update_due_ = false;  // the next finish_step sums its update
  DeviceBuffer<float> gather_;         // ZeRO-1 under bf16: one tensor's masters, assembled
  int gathered_ = -1;                  // which tensor gather_ holds
  DeviceBuffer<float> master_, m_, v_;
  DeviceBuffer<cuda::AdamWTensor> tensors_;
  DeviceBuffer<double> squares_, squares_scratch_;
  DeviceBuffer<StepVerdict> verdict_;  // the last step's, written and read on the device
  cuda::DeviceFingerprint fingerprint_;  // the working parameters' (replica_fingerprint)
  StepReadout readout_;                // read_step's copy on the host, reused every step
  ZeroShards shard_;                  // this rank's part of the optimizer state (all of it without ZeRO-1)
  // Expert parallelism (split_experts): the gradients, masters and moments are in the
  // expert-block layout (layout()).
  bool expert_blocks_ = false;
  std::vector<float> shard_host_, block_host_;  // a shard (a block) on its way to rank 0
  const gc::rt::Comm* comm_ = nullptr;  // set by join
  bool zero1_ = false;  // distributed.zero_stage = 1 over several ranks
  GradientBuckets buckets_{[this](std::int64_t a, std::int64_t b, cudaStream_t stream) {
#ifdef GC_HAVE_NCCL
    reduce_range(a, b, stream);
#else
    (void)a, (void)b, (void)stream;
#endif
  }};
};

}  // namespace

bool cuda_available() { return cuda::unusable_device_reason().empty(); }

bool cuda_has_nccl() {
#ifdef GC_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Engine> make_cuda_engine(int micro_batch, int seq_len, const core::KernelChoices& kernels) {
  // One GPU per rank of a multi-process job, chosen before any allocation (engine/device_choice.cuh).
  const gc::rt::Comm& comm = gc::rt::Comm::world();
  if (comm.distributed()) choose_device(comm);
  const std::string reason = cuda::unusable_device_reason();
  if (!reason.empty()) throw gc::rt::RuntimeError("--device cuda: " + reason);
  return std::make_unique<CudaEngine>(micro_batch, seq_len, kernels);
}

}  // namespace gc::tree
