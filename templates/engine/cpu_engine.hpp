// The CPU engine (engine/engine.hpp): the trainer's host model and moments
// are the state, so the transfers copy nothing; under expert parallelism the
// weights, gradients and moments of an expert tensor are the rank's own block's
// (engine/expert_groups.hpp; the whole weights exist on rank 0 only while it
// measures or saves them: download), and under ZeRO-1 the moments live in the rank's
// shard (engine/zero.hpp: of the whole array over the world, or of the
// expert-block layout over the block's owners): m and v then exist whole only
// while a checkpoint is loaded or saved.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "config.hpp"
#include "core/fingerprint.hpp"
#include "cpu/adamw.hpp"
#include "cpu/metric_ops.hpp"
#include "cpu/profile_clock.hpp"
#include "engine/cpu_model.hpp"
#include "engine/engine.hpp"
#include "engine/expert_groups.hpp"
#include "engine/state_parts.hpp"
#include "engine/zero.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"
#include "step_verdict.hpp"

namespace gc::tree {

class CpuEngine final : public ModelEngine<Model<float>, cpu::MetricOps> {
 public:
  CpuEngine(Model<float>& model, std::vector<float>& m, std::vector<float>& v) : model_(model), m_(m), v_(v) {
    readout_.squares.resize(std::size_t(kNumParams));
  }

  // The step.
  void zero_grads() override {
    model_.zero_grads();
    step_loss_ = {0.0, 0.0};
  }
  void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) override {
    const double objective = model_.forward_backward(inputs, targets, loss_scale);
    const double aux = model_.aux_loss();
    step_loss_[0] += loss_scale * (objective - aux);
    step_loss_[1] += loss_scale * aux;
  }
  double step_aux_loss() override { return step_totals_[1]; }
  void finish_step(double lr, std::int64_t t) override {
    step_totals_ = step_loss_;
    if (comm_ != nullptr) comm_->allreduce_sum(step_totals_.data(), 2);
    const double loss = step_totals_[0];
    if (zero_ && !experts_) {
      readout_.squares = zero_->squares();  // reduce_grads summed them over the shards
    } else {
      gradient_squares_into(readout_.squares.data());
      if (experts_) experts_->complete_squares(readout_.squares.data());
    }
    StepVerdict& verdict = readout_.verdict;
    judge_step(verdict, loss, readout_.squares.data(), kNumParams, kGradClip, t);
    if (verdict.stopped_at != 0) return;
    // The weights lie in the gradients' layout: under expert parallelism of an expert tensor
    // the own block only (its owners update the rest).
    if (zero_) {
      zero_->step(model_.params.data(), lr, verdict.clip, t);
      return;
    }
    const StateLayout& layout = model_.state_layout();
    float* m = split() ? block_m_.data() : m_.data();
    float* v = split() ? block_v_.data() : v_.data();
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, t};
      const std::int64_t k = layout.at(i);
      cpu::adamw_step(model_.params.data() + k, m + k, v + k, model_.grads.data() + k, layout.held(i), hp,
                      verdict.clip);
    }
  }
  const StepReadout& read_step() override { return readout_; }

  // State transfer: the host model and moments are the state.
  void initialize(std::uint64_t seed) override {
    if (zero_) zero_->allocate();
    init_parameters(model_.params.data(), seed, model_.weight_layout());
  }
  // params: the trainer's host parameters, which are the model's own unless the experts' weights
  // are split (then a whole array: this rank keeps its block).
  void upload(const float* params, const float* m, const float* v) override {
    if (params != model_.params.data()) keep_layout_part(model_.weight_layout(), model_.params.data(), params);
    if (zero_) {  // the rank's shard (of its block's layout under expert parallelism)
      zero_->allocate();
      keep_state_part(zero_->shards(), zero_->m(), m, scratch_);
      keep_state_part(zero_->shards(), zero_->v(), v, scratch_);
    } else if (split()) {
      experts_->keep_own_part(block_m_.data(), m);
      experts_->keep_own_part(block_v_.data(), v);
    }
  }
  // Split experts: rank 0's `params` (whole; nullptr elsewhere) receive every expert tensor's
  // blocks from rank 0's group (a collective of the world; the other groups send nothing).
  void download(float* params, float*, float*) override {
    if (experts_) experts_->gather_to_root(params, model_.params.data());
  }
  bool expert_weights_split() const override { return experts_ != nullptr; }
  void gather_moments(float* m, float* v) override {
    if (zero_) {
      const gc::rt::Comm* group = experts_ ? &experts_->exchange().group() : nullptr;
      gather_state_to_root(*comm_, zero_->comm(), group, zero_->shards(), m, zero_->m(), scratch_);
      gather_state_to_root(*comm_, zero_->comm(), group, zero_->shards(), v, zero_->v(), scratch_);
    } else {
      experts_->gather_to_root(m, block_m_.data());
      experts_->gather_to_root(v, block_v_.data());
    }
  }

  // Distribution: one MPI collective per step.
  void join(const gc::rt::Comm& comm, int zero_stage) override {
    comm_ = &comm;
    if (zero_stage == 1) zero_ = std::make_unique<ZeroOneOptimizer>(comm);
  }
  // Expert parallelism: the experts' blocks over their owners (engine/expert_groups.hpp; under
  // ZeRO-1 the shard is then a part of them); ZeRO-1: this rank's shard of the sum and every
  // tensor's global Σ g²; else Σ of everything.
  void reduce_grads() override {
    if (experts_) {
      experts_->reduce_gradients(model_.grads.data());
      if (zero_) zero_->take_summed(model_.grads.data());
    } else if (zero_) {
      zero_->reduce_gradients(model_.grads.data());
    } else {
      comm_->allreduce_sum(model_.grads.data(), kOffsets.at[kNumParams]);
    }
  }
  // Expert parallelism over groups of group_ranks consecutive ranks (after join). The gradients
  // and moments become the rank's expert block's, under ZeRO-1 the moments its shard of them
  // over the block's owners (the whole moments then exist only while a checkpoint is loaded or
  // saved: sharded()).
  void split_experts(int group_ranks, double receive_factor, RouteChoice route) override {
    if constexpr (kMoe) {
      experts_ = std::make_unique<ExpertGroups>(*comm_, group_ranks);
      experts_->exchange().receive_factor = receive_factor;
      experts_->exchange().route = route;
      model_.attach_expert_exchange(&experts_->exchange());
      model_.use_state_layout(experts_->layout());
      model_.use_weight_layout(experts_->layout());  // initialize or upload fills it
      if (zero_) {
        zero_ = std::make_unique<ZeroOneOptimizer>(experts_->owners(), experts_->layout());
        return;
      }
      block_m_.assign(std::size_t(experts_->layout().total()), 0.0f);
      block_v_.assign(block_m_.size(), 0.0f);
    }
  }
  ExchangeTotals expert_exchange_totals() const override {
    if (!experts_) return {};
    const MpiExpertExchange& x = experts_->exchange();
    return {x.bytes_sent, x.seconds, x.exchanges};
  }
  bool sharded() const override { return zero_ != nullptr || split(); }
  // Under expert parallelism the tensors outside the experts as every rank holds them, and the
  // expert blocks combined over the group (engine/expert_groups.hpp).
  std::uint64_t replica_fingerprint() override {
    if (experts_) return experts_->fingerprint(model_.params.data());
    return core::fingerprint_of(model_.params.data(), std::int64_t(model_.params.size()));
  }
  int last_step_reductions() const override { return comm_ != nullptr ? 1 : 0; }

  // Telemetry.
  std::string describe() const override { return "CPU backend"; }
  std::unique_ptr<profile::Clock> make_profile_clock() override { return std::make_unique<cpu::WallClock>(); }
  // Update ratios: the tracked tensors' values before the step, beside the model.
  // (Of an expert tensor under expert parallelism the rank's block, whose sums update_sums adds
  // over the group.)
  void snapshot_tensors(const bool* mask) override {
    const StateLayout& held = model_.weight_layout();
    for (int i = 0; i < kNumParams; ++i) {
      if (mask[i]) snapshot_[i].assign(model_.param(i), model_.param(i) + held.held(i));
    }
  }
  std::vector<double> gradient_squares() override {
    std::vector<double> out(static_cast<std::size_t>(kNumParams));
    gradient_squares_into(out.data());
    return out;
  }
  std::vector<std::array<double, 2>> update_sums(const bool* mask) override {
    std::vector<std::array<double, 2>> out(std::size_t(kNumParams), std::array<double, 2>{0.0, 0.0});
    for (int i = 0; i < kNumParams; ++i) {
      if (!mask[i]) continue;
      const std::vector<float>& old = snapshot_.at(i);
      const float* now = model_.param(i);
      for (std::size_t j = 0; j < old.size(); ++j) {
        const double d = double(now[j]) - double(old[j]);
        out[std::size_t(i)][0] += d * d;
        out[std::size_t(i)][1] += double(old[j]) * double(old[j]);
      }
    }
    if (experts_) experts_->complete_host_sums(out.front().data(), 2);  // the [Σ Δθ², Σ θ²] pairs, contiguous
    return out;
  }
  std::int64_t optimizer_bytes() const override {
    if (zero_) return zero_->moment_bytes();
    return std::int64_t(2 * (split() ? block_m_.size() : m_.size()) * sizeof(float));
  }
  std::int64_t gradient_bytes() const override { return std::int64_t(model_.grads.size() * sizeof(float)); }
  std::int64_t weight_bytes() const override { return std::int64_t(model_.params.size() * sizeof(float)); }

 protected:
  Model<float>& model() override { return model_; }
  const Model<float>& model() const override { return model_; }
  cpu::MetricOps& metric_ops() override { return ops_; }
  const float* logits_of(std::vector<float>&) override { return model_.logits(); }

 private:
  // Σ g² per tensor (cpu::sum_of_squares: the chunked sum the CUDA engine reproduces).
  void gradient_squares_into(double* out) {
    const StateLayout& layout = model_.state_layout();
    for (int i = 0; i < kNumParams; ++i) out[i] = cpu::sum_of_squares(model_.grad(i), layout.held(i));
  }
  // Expert parallelism without ZeRO-1: the moments whole in the expert-block layout.
  bool split() const { return experts_ != nullptr && zero_ == nullptr; }
  Model<float>& model_;
  std::vector<float>& m_;
  std::vector<float>& v_;
  StepReadout readout_;
  cpu::MetricOps ops_;
  std::map<int, std::vector<float>> snapshot_;  // update ratios: tensors before the step
  // Σ loss_scale · [cross-entropy, balancing loss] since zero_grads; the same summed over the
  // ranks by finish_step.
  std::array<double, 2> step_loss_{}, step_totals_{};
  const gc::rt::Comm* comm_ = nullptr;      // set by join (a job of several ranks)
  std::unique_ptr<ZeroOneOptimizer> zero_;  // distributed.zero_stage = 1 (over the owners under EP)
  std::unique_ptr<ExpertGroups> experts_;   // distributed.expert_parallel > 1
  std::vector<float> block_m_, block_v_;    // split(): the rank's moments (experts_->layout())
  std::vector<float> scratch_;              // a whole block on its way to or from a checkpoint
};

}  // namespace gc::tree
