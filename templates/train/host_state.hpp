// The run's state on the host, as checkpoints, the weight metrics and the
// sample read it: fp32 parameters and the AdamW moments. On the CPU backend
// it is the engine's own state (the host model and m, v); on a GPU it is a
// copy, refreshed from the engine only when something reads it (sync) and
// marked stale after every step. Under ZeRO-1 a rank keeps only its shard of
// the moments: the whole arrays exist while a checkpoint is loaded or saved.
// When the CPU engine splits the experts' weights (expert parallelism) the
// whole parameters are a copy too, on rank 0 only, and only while something
// reads them (a measurement, a save, a resume, the sample).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "config.hpp"
#include "engine/engine.hpp"
#include "engine/cpu_model.hpp"
#include "plan.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/comm.hpp"

namespace gc::tree {

class HostState {
 public:
  // On a device the parameters are a separate host array; on the CPU they are the host model's.
  void use_device() {
    on_device_ = true;
    params_.assign(std::size_t(kOffsets.at[kNumParams]), 0.0f);
  }
  bool on_device() const { return on_device_; }
  // The engine holds its own experts' weights only (Engine::expert_weights_split): on the CPU the
  // whole parameters become a copy (on a GPU they are one already).
  void use_split_weights() { split_weights_ = !on_device_; }

  // Whole moments, zero (a fresh or resumed run; under ZeRO-1 only while loading or saving).
  void allocate_moments() {
    m_.assign(std::size_t(kOffsets.at[kNumParams]), 0.0f);
    v_.assign(m_.size(), 0.0f);
  }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

  float* params() { return param_vector().data(); }
  std::vector<float>& param_vector() {
    if (on_device_) return params_;
    if (!split_weights_) return model_->params;
    if (params_.empty()) params_.assign(std::size_t(kOffsets.at[kNumParams]), 0.0f);  // the whole copy
    return params_;
  }

  // The engine changed its state (a step, an initialization): the host copy is stale.
  void mark_stale() { fresh_ = moments_fresh_ = false; }
  // The host copy was just written into the engine (a resume or --init-from).
  void mark_fresh() { fresh_ = true; }

  // Engine → host state (a no-op on the CPU, where the host state is the engine's).
  // Under ZeRO-1 a collective: every rank calls it at the same point, rank 0 receives.
  void sync(Engine& engine, const gc::rt::Comm& comm, bool with_moments) {
    if (fresh_ && (!with_moments || moments_fresh_)) return;
    if (!engine.sharded()) {
      if (on_device_) {
        engine.download(params_.data(), with_moments ? m_.data() : nullptr, with_moments ? v_.data() : nullptr);
      }
    } else {
      if (on_device_) engine.download(params_.data(), nullptr, nullptr);
      if (split_weights_) engine.download(comm.root() ? params() : nullptr, nullptr, nullptr);
      if (with_moments) {
        if (comm.root()) allocate_moments();
        engine.gather_moments(comm.root() ? m_.data() : nullptr, comm.root() ? v_.data() : nullptr);
      }
    }
    fresh_ = true;
    moments_fresh_ = moments_fresh_ || with_moments;
  }
  // Under ZeRO-1, after a checkpoint is loaded or saved: back to the rank's shard.
  void release_sharded_moments(const Engine& engine) {
    if (!engine.sharded()) return;
    std::vector<float>().swap(m_);
    std::vector<float>().swap(v_);
    moments_fresh_ = false;
  }
  // With split expert weights, once the whole copy has been read: released (the next sync
  // gathers it again).
  void release_split_weights() {
    if (!split_weights_) return;
    std::vector<float>().swap(params_);
    fresh_ = false;
  }

  // Each tensor's parameters and moments, as checkpoints and exports name them.
  std::vector<gc::rt::ParamBuffers> buffers() {
    std::vector<gc::rt::ParamBuffers> out;
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      out.push_back({p.name, std::vector<std::int64_t>(p.shape, p.shape + p.rank), params() + kOffsets.at[i],
                     m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i]});
    }
    return out;
  }

  // The host model, built on first use: the CPU engine's training model (built first, before
  // any other large allocation). On a GPU nothing builds it: the metrics are reduced on the device.
  Model<float>& host_model() {
    if (!model_) model_ = std::make_unique<Model<float>>(kMicroBatch, kSeqLen);
    return *model_;
  }

 private:
  std::unique_ptr<Model<float>> model_;
  std::vector<float> params_, m_, v_;  // params_ only when the engine is on a device or splits the weights
  bool split_weights_ = false;
  bool on_device_ = false;
  bool fresh_ = true;           // the host parameters match the engine's
  bool moments_fresh_ = false;  // and the host moments (m_, v_) too
};

}  // namespace gc::tree
