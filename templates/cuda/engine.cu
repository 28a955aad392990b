// The CUDA training engine (train/engine.hpp): the model of
// model/model_impl.hpp on the CUDA backend, plus fp32 master weights, AdamW
// moments and the fused multi-tensor AdamW on the device.
//
// precision "fp32": the model's parameters are the master weights (no copy).
// precision "bf16": the model computes with bf16 working weights, rewritten
// from the fp32 masters after each update; gradients, moments and every
// reduction stay fp32.
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "config.hpp"
#include "cuda/adamw.cuh"
#include "cuda/backend.cuh"
#include "cuda/init.cuh"
#include "model/model.hpp"
#include "plan.hpp"
#include "runtime/comm.hpp"
#include "runtime/cuda/check.hpp"
#include "runtime/error.hpp"
#include "train/engine.hpp"

#ifdef GC_HAVE_NCCL
#include <nccl.h>
#endif

namespace gcm {

namespace {

using gc::rt::cuda::DeviceBuffer;

using ComputeType = std::conditional_t<kPrecision == Precision::bf16, cuda::bf16, float>;
using CudaModel = BasicModel<cuda::Backend<ComputeType>>;
inline constexpr bool kSeparateMaster = !std::is_same_v<ComputeType, float>;

class CudaEngine final : public Engine {
 public:
  CudaEngine(int micro_batch, int seq_len) : model_(micro_batch, seq_len) {
    const std::int64_t total = kOffsets.at[kNumParams];
    if constexpr (kSeparateMaster) {
      master_.resize(std::size_t(total));
    }
    m_.resize(std::size_t(total));
    v_.resize(std::size_t(total));
    std::vector<cuda::AdamWTensor> table;
    for (int i = 0; i < kNumParams; ++i) {
      table.push_back({kOffsets.at[i], kParams[i].numel, float(kParams[i].lr_mult), float(kParams[i].weight_decay)});
    }
    tensors_.resize(table.size());
    tensors_.upload(table.data(), table.size());
    squares_.resize(std::size_t(kNumParams));
    squares_scratch_.resize(cuda::sum_squares_scratch_doubles(total, kNumParams));
    m_.zero();
    v_.zero();
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }

  std::string describe() const override {
    cudaDeviceProp prop{};
    int device = 0;
    GC_CUDA_CHECK(cudaGetDevice(&device));
    GC_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    return std::string("CUDA backend (") + prop.name + ", " + (kSeparateMaster ? "bf16" : "fp32") + ")";
  }

  void initialize(std::uint64_t seed) override {
    for (int i = 0; i < kNumParams; ++i) {
      const ParamInfo& p = kParams[i];
      cuda::init_tensor(master().data() + kOffsets.at[i], p.numel, p.init, kInitStd[i], p.cutoff, seed, std::uint32_t(i));
    }
    if constexpr (kSeparateMaster) {
      cuda::cast_copy(model_.params.data(), master_.data(), kOffsets.at[kNumParams]);
    }
    m_.zero();
    v_.zero();
  }

  void upload(const float* params, const float* m, const float* v) override {
    const std::size_t n = std::size_t(kOffsets.at[kNumParams]);
    master().upload(params, n);
    if constexpr (kSeparateMaster) {
      cuda::cast_copy(model_.params.data(), master_.data(), std::int64_t(n));
    }
    m_.upload(m, n);
    v_.upload(v, n);
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void download(float* params, float* m, float* v) override {
    const std::size_t n = std::size_t(kOffsets.at[kNumParams]);
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    master().download(params, n);
    if (m) m_.download(m, n);
    if (v) v_.download(v, n);
  }
  void download_tensor(int i, float* out) override {
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    master().download(out, std::size_t(kParams[i].numel), std::size_t(kOffsets.at[i]));
  }
  void zero_grads() override { model_.zero_grads(); }
  // The loss stays on the device: the forward's cross-entropy adds loss_scale · mean CE to the
  // backend's step accumulator instead of copying it to the host, so the backward is queued
  // while the forward still runs (no host stall between them).
  void forward_backward(const std::int32_t* inputs, const std::int32_t* targets, double loss_scale) override {
    model_.backend().defer_loss(loss_scale);
    model_.forward_backward(inputs, targets, loss_scale);
  }
  double take_step_loss() override { return model_.backend().take_deferred_loss(); }
  double forward_loss(const std::int32_t* inputs, const std::int32_t* targets) override {
    return model_.forward(inputs, targets) - model_.aux_loss();
  }
  const std::vector<double>& grad_squares() override {
    cuda::sum_squares_per_tensor(squares_.data(), squares_scratch_.data(), model_.grads.data(), tensors_.data(),
                                 kNumParams, kOffsets.at[kNumParams]);
    host_squares_.resize(std::size_t(kNumParams));
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    squares_.download(host_squares_.data(), host_squares_.size());
    return host_squares_;
  }
  void adamw_step(double lr, double clip, std::int64_t t) override {
    ComputeType* working = nullptr;
    if constexpr (kSeparateMaster) {
      working = model_.params.data();
    }
    cuda::adamw_step_all(master().data(), working, m_.data(), v_.data(), model_.grads.data(), tensors_.data(),
                         kNumParams, kOffsets.at[kNumParams], lr, kBeta1, kBeta2, kAdamEps, t, clip);
    // The step ends here: the host's step timing covers the GPU's work.
    GC_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::int64_t model_buffer_bytes() const override { return model_.buffer_bytes(); }
  double last_aux_loss() const override { return model_.aux_loss(); }
  // Σ over ranks of the fp32 gradients on the device (NCCL, set up over MPI on
  // first use). One all-reduce after the backward pass: bucketing it to
  // overlap with the backward is not written yet.
  void allreduce_grads(const gc::rt::Comm& comm) override {
    if (!comm.distributed()) return;
#ifdef GC_HAVE_NCCL
    if (nccl_ == nullptr) {
      ncclUniqueId id{};
      std::string bytes(sizeof id, '\0');
      if (comm.root()) {
        nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
        std::memcpy(bytes.data(), &id, sizeof id);
      }
      comm.broadcast(bytes);
      std::memcpy(&id, bytes.data(), sizeof id);
      nccl_check(ncclCommInitRank(&nccl_, comm.size(), id, comm.rank()), "ncclCommInitRank");
    }
    nccl_check(ncclAllReduce(model_.grads.data(), model_.grads.data(), std::size_t(kOffsets.at[kNumParams]), ncclFloat,
                             ncclSum, nccl_, nullptr),
               "ncclAllReduce");
    GC_CUDA_CHECK(cudaStreamSynchronize(nullptr));
#else
    throw gc::rt::RuntimeError("train", "this tree was built without NCCL, so the CUDA backend cannot train as " +
                                            std::to_string(comm.size()) + " processes (see the tree's CMake output)");
#endif
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
        const auto& scores = model_.moe_layer(l).scores;  // fp32
        std::vector<float> host(scores.size());
        GC_CUDA_CHECK(cudaDeviceSynchronize());
        scores.download(host.data(), host.size());
        return router_entropy(host.data(), std::int64_t(host.size()) / kExperts);
      });
    }
    return {};
  }
  std::vector<std::vector<float>> moe_biases() const override { return gcm::moe_biases(model_); }
  void set_moe_biases(const std::vector<std::vector<float>>& biases) override { gcm::set_moe_biases(model_, biases); }

  // Copies every forward buffer of the last batch into the host model
  // (converted to fp32), so the metrics measure the GPU's own activations.
  void track_logit_moments(bool on) override { model_.track_logit_moments(on); }
  const Model<float>& activations(Model<float>& host) override {
    std::vector<float*> targets;
    host.visit_forward_buffers([&](auto& buf) { targets.push_back(buf.data()); });
    std::size_t i = 0;
    GC_CUDA_CHECK(cudaDeviceSynchronize());
    model_.visit_forward_buffers([&](auto& buf) {
      using U = std::remove_reference_t<decltype(*buf.data())>;
      float* out = targets.at(i++);
      if (buf.empty()) return;
      if constexpr (std::is_same_v<U, float>) {
        buf.download(out, buf.size());
      } else {
        staging_.resize(buf.size());
        buf.download(staging_.data(), buf.size());
        for (std::size_t j = 0; j < staging_.size(); ++j) out[j] = cuda::to_float(staging_[j]);
      }
    });
    model_.logit_moments.download(host.logit_moments.data(), host.logit_moments.size());
    return host;
  }
  std::int64_t device_used_bytes() const override {
    std::size_t free = 0, total = 0;
    GC_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return std::int64_t(total - free);
  }
  std::int64_t device_allocated_peak() const override { return gc::rt::cuda::allocation_stats().peak_bytes; }
  std::int64_t device_allocations() const override { return gc::rt::cuda::allocation_stats().allocations; }

 private:
  // The fp32 parameters AdamW updates: the model's own under fp32, the
  // separate masters under bf16 (a template, so only the valid branch is
  // instantiated).
  DeviceBuffer<float>& master() { return pick_master(model_.params); }
  template <typename Params>
  DeviceBuffer<float>& pick_master(Params& params) {
    if constexpr (std::is_same_v<Params, DeviceBuffer<float>>) {
      return params;
    } else {
      return master_;
    }
  }

  CudaModel model_;
  std::vector<ComputeType> staging_;  // bf16 activations on their way to the host
  DeviceBuffer<float> master_, m_, v_;
  DeviceBuffer<cuda::AdamWTensor> tensors_;
  DeviceBuffer<double> squares_, squares_scratch_;
  std::vector<double> host_squares_;  // grad_squares() result, reused every step
#ifdef GC_HAVE_NCCL
  static void nccl_check(ncclResult_t rc, const char* what) {
    if (rc != ncclSuccess) throw gc::rt::RuntimeError("NCCL", std::string(what) + ": " + ncclGetErrorString(rc));
  }
  ncclComm_t nccl_ = nullptr;

 public:
  ~CudaEngine() override {
    if (nccl_ != nullptr) ncclCommDestroy(nccl_);
  }
#endif
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

std::unique_ptr<Engine> make_cuda_engine(int micro_batch, int seq_len) {
  // One GPU per local rank of a data-parallel job, chosen before any allocation.
  const gc::rt::Comm& comm = gc::rt::Comm::world();
  if (comm.distributed()) {
    int devices = 0;
    GC_CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices > 0) GC_CUDA_CHECK(cudaSetDevice(comm.local_rank() % devices));
  }
  const std::string reason = cuda::unusable_device_reason();
  if (!reason.empty()) throw gc::rt::RuntimeError("--device cuda: " + reason);
  return std::make_unique<CudaEngine>(micro_batch, seq_len);
}

}  // namespace gcm
