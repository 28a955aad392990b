// Trainer member definitions (included by trainer.hpp).
#pragma once

#include "train/trainer.hpp"  // self-contained when parsed alone

#include <filesystem>

namespace gcm {

// The checkpoint --resume continues from: `name` (step_N, or N) when given,
// else the one `latest` names. Errors list the run's complete checkpoints.
inline std::string resume_checkpoint(const std::string& run_dir, const std::string& name) {
  std::string available;
  for (const auto& dir : gc::rt::list_checkpoints(run_dir)) {
    available += (available.empty() ? "" : ", ") + std::filesystem::path(dir).filename().string();
  }
  if (name.empty()) {
    auto latest = gc::rt::latest_checkpoint(run_dir);
    if (!latest) throw gc::rt::RuntimeError(run_dir, "--resume: the run has no complete checkpoint");
    return *latest;
  }
  // N, step_N and step_00000N all name the checkpoint after step N.
  std::string dir_name = name;
  const std::string digits = name.rfind("step_", 0) == 0 ? name.substr(5) : name;
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 19) {
    dir_name = gc::rt::checkpoint_dir_name(std::stoll(digits));
  }
  const std::string dir = (std::filesystem::path(gc::rt::checkpoints_dir(run_dir)) / dir_name).string();
  std::error_code ec;
  if (dir_name.find('/') != std::string::npos || !std::filesystem::exists(dir + "/state.json", ec)) {
    throw gc::rt::RuntimeError(run_dir, "--checkpoint " + name + ": no complete checkpoint of that name (the run has: " +
                                            (available.empty() ? std::string("none") : available) + ")");
  }
  return dir;
}

// A data-parallel job splits every step's kGradAccum micro-batches among its
// ranks (gc::rt::rank_owns_micro_batch); the global batch stays the spec's.
inline void check_world(const gc::rt::Comm& comm) {
  if (!comm.distributed()) return;
  if constexpr (kDistributedNone) {
    throw gc::rt::RuntimeError("train", "launched as " + std::to_string(comm.size()) +
                                            " processes, but the spec says distributed.backend = \"none\"");
  }
  if (kGradAccum % comm.size() != 0) {
    throw gc::rt::RuntimeError(
        "train", "train.global_batch / train.micro_batch = " + std::to_string(kGradAccum) +
                     " micro-batches per step do not divide among " + std::to_string(comm.size()) +
                     " ranks; choose a world size that divides it, or change the spec's global_batch or micro_batch");
  }
}

inline Trainer::Trainer(const TrainOptions& options)
    : opt_(options), comm_(gc::rt::Comm::world()), train_(options.train_data, kVocab, sequence_layout()) {
  const std::size_t total = std::size_t(kOffsets.at[kNumParams]);
  check_world(comm_);
  choose_engine();  // first: the memory check precedes every large allocation
#ifdef GC_HAVE_CUDA
  if (comm_.distributed() && on_device_) {
    if (!cuda_has_nccl()) {
      throw gc::rt::RuntimeError("train", "launched as " + std::to_string(comm_.size()) +
                                              " processes on GPUs, but this tree's CUDA backend was built without NCCL "
                                              "(nccl.h and libnccl.so.2 were not found when it was configured); "
                                              "use --device cpu or rebuild where NCCL is installed");
    }
  }
#endif
  if constexpr (kDistributedNccl) {
    if (comm_.distributed() && !on_device_) {
      throw gc::rt::RuntimeError("train", "the spec says distributed.backend = \"nccl\" (data parallelism on GPUs), but "
                                          "this run is on the CPU backend; run it on GPUs, or use backend = \"auto\" "
                                          "to train on the CPU with MPI");
    }
  }
  if (comm_.distributed()) engine_->join(comm_, kZeroStage);
  // Whole moments, except under ZeRO-1, where a rank keeps its shard (m_ and v_
  // then exist only while a checkpoint is loaded or saved).
  if (!engine_->sharded() || opt_.resume || !opt_.init_from.empty()) {
    m_.assign(total, 0.0f);
    v_.assign(total, 0.0f);
  }
  gc::rt::ShardSet val(opt_.val_data, kVocab, sequence_layout());
  val_batches_ = val.validation_batches(kMicroBatch, kSeqLen, kEvalBatches);
  if (opt_.resume) {
    const std::string from = resume_checkpoint(opt_.run_dir, opt_.checkpoint);
    const gc::rt::CheckpointState state = gc::rt::load_checkpoint(from, buffers(), kSpecHash);
    start_step_ = state.step;
    train_.seek(state.data.at("train"));
    engine_->upload(host_params(), m_.data(), v_.data());
    release_sharded_moments();
    if constexpr (kMoe && kLoadBalance == LoadBalance::aux_free) {
      engine_->set_moe_biases(moe_bias_from_json(state.extra.value("moe_bias", Json::object()), from + "/state.json"));
    }
    // Bit-identical continuation needs the same backend (and, on a GPU, the same kind of GPU).
    const std::string saved_on = state.extra.value("engine", "");
    if (comm_.root() && !saved_on.empty() && saved_on != engine_->describe()) {
      std::fprintf(stderr, "train: warning: the checkpoint was written by the %s; resuming on the %s, so the "
                           "run will not continue bit-identically\n", saved_on.c_str(), engine_->describe().c_str());
    }
    // Metrics logged after the checkpoint will be logged again, identically.
    if (comm_.root()) {
      gc::rt::truncate_metrics_log((std::filesystem::path(opt_.run_dir) / "metrics.jsonl").string(), start_step_);
      std::fprintf(stderr, "train: resumed %s at step %lld\n", from.c_str(), (long long)start_step_);
    }
  } else {
    // The same Philox streams on every backend: identical initial weights.
    engine_->initialize(kSeed);
    host_fresh_ = false;
    if (!opt_.init_from.empty()) init_from_export();
  }
  if constexpr (kEmbeddingCosineOn) {
    top_tokens_ = most_frequent_tokens(opt_.train_data, kEmbeddingTopTokens);
  }
}

// --init-from DIR: every weight from a Hugging Face export of a compatible
// spec (runtime/hf_import.hpp), fresh optimizer state, step 0.
inline void Trainer::init_from_export() {
  // The weights land in the host buffers only once every check has passed.
  std::vector<gc::rt::ParamBuffers> weights = buffers();
  for (auto& b : weights) b.exp_avg = b.exp_avg_sq = nullptr;
  const gc::rt::HfImport imported = gc::rt::load_hf_export(opt_.init_from, weights);
  const std::vector<std::vector<float>> biases =
      selection_biases(imported.selection_bias, opt_.init_from + "/model.safetensors");
  engine_->upload(host_params(), m_.data(), v_.data());
  release_sharded_moments();
  host_fresh_ = true;
  if constexpr (kMoe && kLoadBalance == LoadBalance::aux_free) {
    engine_->set_moe_biases(biases);
  }
  if (comm_.root()) {
    const Json& c = imported.config;
    const Json provenance = c.value("gcompile", Json::object());
    std::fprintf(stderr, "train: initialized from %s (%s, experiment %s, step %lld)\n", opt_.init_from.c_str(),
                 c.value("model_type", "?").c_str(), provenance.value("experiment", "?").c_str(),
                 (long long)provenance.value("step", std::int64_t(-1)));
    if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number() && float(c["rms_norm_eps"].get<double>()) != kNormEps) {
      std::fprintf(stderr, "train: note: the export was trained with norm_eps %g; this spec uses %g\n",
                   c["rms_norm_eps"].get<double>(), double(kNormEps));
    }
  }
}

// MemAvailable of /proc/meminfo in bytes; -1 where it cannot be read.
inline std::int64_t available_host_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  long long kib = -1;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "MemAvailable: %lld kB", &kib) == 1) break;
  }
  std::fclose(f);
  return kib < 0 ? -1 : std::int64_t(kib) * 1024;
}

// Before the CPU backend allocates: the fp32 state (parameters, gradients, two
// AdamW moments) and the model's buffers must fit in the host's free memory.
inline void check_host_memory() {
  const double gib = double(1 << 30);
  const double state = 16.0 * double(kOffsets.at[kNumParams]);
  // The plan sizes buffers in the spec's precision; the CPU model holds them in fp32.
  const double buffers = double(kPlannedModelBufferBytes) * (kPrecision == Precision::bf16 ? 2.0 : 1.0);
  const std::int64_t available = available_host_bytes();
  if (available < 0 || state + buffers <= double(available)) return;
  const char* remedy = "train it on a GPU (a tree built with the CUDA backend), lower train.micro_batch, or shard "
                       "the optimizer state across processes (mpirun -np N with distributed.zero_stage = 1)";
  char msg[768];
  std::snprintf(msg, sizeof msg,
                "the CPU backend needs %.1f GiB (fp32 parameters, gradients and AdamW moments %.1f GiB, activations "
                "%.1f GiB for train.micro_batch = %d) but this machine has %.1f GiB available; %s",
                (state + buffers) / gib, state / gib, buffers / gib, kMicroBatch, double(available) / gib, remedy);
  throw gc::rt::RuntimeError(kExperimentName, msg);
}

// AdamW moments one rank holds as planned: the whole flat array, or rank 0's ZeRO-1 shard
// of ⌈kStoredParams / ranks⌉ elements (explain --world-size prints the same).
inline std::int64_t planned_optimizer_bytes(int ranks) {
  return 8 * ((kStoredParams + ranks - 1) / ranks);
}

// Device bytes one rank holds as planned: kPlannedDeviceBytes (one GPU, compiler/plan) with the
// model state re-counted for ZeRO-1 over `ranks` (explain --world-size prints the same): the
// working weights and gradients padded to ranks × shard elements (NCCL moves equal blocks),
// the fp32 masters (bf16) and the AdamW moments of one shard.
inline std::int64_t planned_device_bytes(int ranks) {
  const std::int64_t stored = kStoredParams, shard = (stored + ranks - 1) / ranks;
  const std::int64_t padded = ranks == 1 ? stored : shard * ranks;
  const std::int64_t weight = kPrecision == Precision::bf16 ? 2 : 4, master = kPrecision == Precision::bf16 ? 4 : 0;
  const std::int64_t whole_state = stored * (weight + master + 4 + 8);
  return kPlannedDeviceBytes - whole_state + padded * (weight + 4) + shard * (master + 8);
}

inline void Trainer::choose_engine() {
#ifdef GC_HAVE_CUDA
  if (opt_.device == "cuda" || (opt_.device == "auto" && cuda_available())) {
    engine_ = make_cuda_engine(kMicroBatch, kSeqLen);
    on_device_ = true;
    params_.assign(std::size_t(kOffsets.at[kNumParams]), 0.0f);
    return;
  }
#else
  if (opt_.device == "cuda") {
    throw gc::rt::RuntimeError("--device cuda: this tree was built without the CUDA backend (no nvcc was found "
                               "when it was configured); use --device cpu or rebuild with the CUDA toolkit");
  }
#endif
  check_host_memory();
  host_model_ = std::make_unique<Model<float>>(kMicroBatch, kSeqLen);
  engine_ = std::make_unique<CpuEngine>(*host_model_, m_, v_);
}

inline float* Trainer::host_params() { return on_device_ ? params_.data() : host_model_->params.data(); }

inline const std::vector<float>& Trainer::host_param_vector() {
  return on_device_ ? params_ : host_model_->params;
}

inline void Trainer::sync_host(bool with_moments) {
  if (host_fresh_ && (!with_moments || moments_fresh_)) return;
  if (!engine_->sharded()) {
    if (on_device_) {
      engine_->download(params_.data(), with_moments ? m_.data() : nullptr, with_moments ? v_.data() : nullptr);
    }
  } else {
    // Collectives: every rank calls this at the same point, rank 0 receives.
    if (on_device_) engine_->download(params_.data(), nullptr, nullptr);
    if (with_moments) {
      if (comm_.root()) {
        m_.assign(std::size_t(kOffsets.at[kNumParams]), 0.0f);
        v_.assign(m_.size(), 0.0f);
      }
      engine_->gather_moments(comm_.root() ? m_.data() : nullptr, comm_.root() ? v_.data() : nullptr);
    }
  }
  host_fresh_ = true;
  moments_fresh_ = moments_fresh_ || with_moments;
}

// Under ZeRO-1 a rank keeps only its shard of the moments: the whole arrays
// exist while a checkpoint is loaded or saved.
inline void Trainer::release_sharded_moments() {
  if (!engine_->sharded()) return;
  std::vector<float>().swap(m_);
  std::vector<float>().swap(v_);
  moments_fresh_ = false;
}

inline Model<float>& Trainer::metrics_model() {
  if (!host_model_) host_model_ = std::make_unique<Model<float>>(kMicroBatch, kSeqLen);
  return *host_model_;
}

inline MetricsDue metrics_due_at(std::int64_t s) {
  MetricsDue d;
  if constexpr (kSinkScoreOn) {
    d.sink_score = s % kSinkScoreEvery == 0;
  }
  if constexpr (kAttentionEntropyOn) {
    d.attention_entropy = s % kAttentionEntropyEvery == 0;
  }
  if constexpr (kActivationRmsOn) {
    d.activation_rms = s % kActivationRmsEvery == 0;
  }
  if constexpr (kRmsnormFactorOn) {
    d.rmsnorm_factor = s % kRmsnormFactorEvery == 0;
  }
  if constexpr (kResidualFlowOn) {
    d.residual_flow = s % kResidualFlowEvery == 0;
  }
  if constexpr (kLogitStdOn) {
    d.logit_std = s % kLogitStdEvery == 0;
  }
  if constexpr (kStableRankOn) {
    d.stable_rank = s % kStableRankEvery == 0;
  }
  if constexpr (kCosineSimilarityOn) {
    d.cosine_images = std::find(kCosineImageSteps.begin(), kCosineImageSteps.end(), s) != kCosineImageSteps.end();
    d.cosine_similarity = s % kCosineSimilarityEvery == 0 || d.cosine_images;
  }
  if constexpr (kEmbeddingCosineOn) {
    d.embedding_cosine = s % kEmbeddingCosineEvery == 0;
  }
  if constexpr (kParamNormOn) {
    d.param_norm = s % kParamNormEvery == 0;
  }
  return d;
}

inline std::vector<gc::rt::ParamBuffers> Trainer::buffers() {
  std::vector<gc::rt::ParamBuffers> out;
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    out.push_back({p.name, std::vector<std::int64_t>(p.shape, p.shape + p.rank), host_params() + kOffsets.at[i],
                   m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i]});
  }
  return out;
}

// The per-step records after s completed steps (train_step makes them).
inline bool Trainer::grad_norm_record_due(std::int64_t s) const {
  return kGradNormOn && opt_.metrics && (s % kGradNormEvery == 0 || s == 1);
}
inline bool Trainer::update_ratio_due(std::int64_t s) const {
  return kUpdateRatioOn && opt_.metrics && (s % kUpdateRatioEvery == 0 || s == 1);
}
inline bool Trainer::moe_routing_due(std::int64_t s) const {
  return kMoe && kMoeRoutingOn && opt_.metrics && (s % kMoeRoutingEvery == 0 || s == 1 || s == opt_.steps);
}

// Whether the host reads step `step`'s values (loss, norm, verdict) after it: when it logs,
// records, measures or saves after it. Between such steps a GPU run queues step after step
// without waiting (the verdict stops the updates on the device if a step is not finite, and the
// next read stops the run). The CPU engine's values cost nothing to read: every step is read.
inline bool Trainer::read_due(std::int64_t step) const {
  const std::int64_t s = step + 1;
  if (!on_device_ || step == start_step_ || s == opt_.steps || s % opt_.log_every == 0) return true;
  if (opt_.checkpoints && kCheckpointEvery > 0 && s % kCheckpointEvery == 0) return true;
  if (kEvalEvery > 0 && s % kEvalEvery == 0) return true;
  if (grad_norm_record_due(s) || update_ratio_due(s) || moe_routing_due(s)) return true;
  const MetricsDue due = opt_.metrics ? metrics_due_at(s) : MetricsDue{};
  return due.any_activation() || due.any_weight();
}

inline bool Trainer::train_step(std::int64_t step, bool read) {
  engine_->zero_grads();
  if constexpr (kMoe) {
    engine_->moe_begin_step();
  }
  last_aux_loss_ = 0.0;  // the MoE balancing loss, logged apart from the cross-entropy
  // Every rank reads every micro-batch (the data position is the same on all
  // ranks and for any world size) and computes its own share of them.
  const int last_owned = kGradAccum - comm_.size() + comm_.rank();  // this rank's last micro-batch
  for (int micro = 0; micro < kGradAccum; ++micro) {
    train_.next_batch(kMicroBatch, kSeqLen, batch_);
    if (!gc::rt::rank_owns_micro_batch(micro, comm_.rank(), comm_.size())) continue;
    batch_.split(inputs_, targets_);
    if (comm_.distributed() && micro == last_owned) engine_->overlap_next_backward();
    engine_->forward_backward(inputs_.data(), targets_.data(), 1.0 / kGradAccum);
    last_aux_loss_ += engine_->last_aux_loss() / kGradAccum;
  }
  if (comm_.distributed()) {
    // Σ over ranks of their micro-batches' gradients (each scaled by 1/kGradAccum): the global-batch
    // mean (under ZeRO-1 each rank keeps its shard of it: train/zero.hpp). The loss is summed by
    // finish_step.
    engine_->reduce_grads();
    if constexpr (kMoe) {
      comm_.allreduce_sum(&last_aux_loss_, 1);
      engine_->moe_allreduce_loads(comm_);
    }
  }
  const std::int64_t s = step + 1;  // steps completed after this one
  step_records_.clear();
  std::map<int, std::vector<float>> before;  // tracked tensors before the update
  if (update_ratio_due(s)) {
    for (int i = 0; i < kNumParams; ++i) {
      if (!kUpdateRatioTensors[i]) continue;
      before[i].resize(std::size_t(kParams[i].numel));
      engine_->download_tensor(i, before[i].data());
    }
  }
  engine_->finish_step(learning_rate(step), s);
  host_fresh_ = moments_fresh_ = false;
  if (read) {
    readout_ = &engine_->read_step();
    if (readout_->verdict.stopped_at != 0) return false;
  }
  if (grad_norm_record_due(s)) {
    // Per class, before clipping.
    const std::vector<double>& squares = readout_->squares;
    const Json values = per_class_norm(kGradNormTensors, [&](int i) { return squares[std::size_t(i)]; });
    step_records_.push_back({{"step", s}, {"metric", "grad_norm"}, {"values", values}});
  }
  if constexpr (kMoe) {
    engine_->moe_end_step();
    if (moe_routing_due(s)) step_records_.push_back(moe_record(engine_->moe_take_stats(), s, last_aux_loss_));
  }
  if (!before.empty()) {
    // ‖Δθ‖₂ / ‖θ‖₂ per class for this step's update (seed 001's checklist).
    std::map<std::string, std::pair<double, double>> update;  // class -> (Σ Δθ², Σ θ²) over its tensors
    std::vector<float> after;
    for (const auto& [i, old] : before) {
      after.resize(old.size());
      engine_->download_tensor(i, after.data());
      auto& [delta, base] = update[kParams[i].cls];
      for (std::size_t j = 0; j < old.size(); ++j) {
        const double d = double(after[j]) - double(old[j]);
        delta += d * d;
        base += double(old[j]) * double(old[j]);
      }
    }
    Json values = Json::object();
    for (const auto& [cls, sums] : update) values[cls] = sums.second > 0.0 ? std::sqrt(sums.first / sums.second) : 0.0;
    step_records_.push_back({{"step", s}, {"metric", "update_ratio"}, {"values", values}});
  }
  return true;
}

inline double Trainer::evaluate(ActivationMetrics* metrics) {
  double total = 0.0;
  engine_->track_logit_moments(metrics != nullptr && metrics->needs_logit_moments());
  for (const auto& batch : val_batches_) {
    batch.split(inputs_, targets_);
    total += engine_->forward_loss(inputs_.data(), targets_.data());
    if (metrics) metrics->add_batch(engine_->activations(metrics_model()));
  }
  engine_->track_logit_moments(false);
  return val_batches_.empty() ? 0.0 : total / double(val_batches_.size());
}

// The anchor task's accuracies (analysis/anchor_eval.hpp), from the engine's own forward.
inline void Trainer::write_anchor_record(std::int64_t s, gc::rt::MetricsWriter& log) {
  const gc::rt::anchor::Scores scores = anchor_scores([&](const std::int32_t* inputs, const std::int32_t* targets) {
    engine_->forward_loss(inputs, targets);
    const Model<float>& model = engine_->activations(metrics_model());
    if (!model.keeps_logits()) {  // the anchor task's vocabulary is small: this does not happen
      throw gc::rt::RuntimeError("anchor evaluation needs every row's logits, but the LM head runs in chunks of " +
                                 std::to_string(model.head_rows()) + " rows");
    }
    return model.logits();
  });
  log.write(anchor_record(s, scores));
  std::fprintf(stderr, "step %lld: anchor accuracy train %.3f test %.3f; held-out pair inferential %.3f symmetric %.3f\n",
               (long long)s, scores.train.value(), scores.test.value(), scores.inferential.value(),
               scores.symmetric.value());
}

inline void Trainer::measure(std::int64_t s, bool eval_due, gc::rt::MetricsWriter& log) {
  using Clock = std::chrono::steady_clock;
  const MetricsDue due = opt_.metrics ? metrics_due_at(s) : MetricsDue{};
  bool initial_loss = false;
  if constexpr (kInitialLossOn) {
    initial_loss = s == 0 && opt_.metrics;
  }
  const bool anchor_due = kAnchorTask && (eval_due || s == 0);  // accuracies at init and every evaluation
  if (!eval_due && !initial_loss && !anchor_due && !due.any_activation() && !due.any_weight()) return;
  const auto t0 = Clock::now();
  ActivationMetrics activations(due);
  if (eval_due || initial_loss || due.any_activation()) {
    const double val = evaluate(due.any_activation() ? &activations : nullptr);
    if (eval_due) {
      log.write({{"step", s}, {"val_loss", val}});
      if (opt_.progress) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "step %lld: val_loss %.4f\n", (long long)s, val);
    }
    if (initial_loss) {
      // Seed 001: at initialization the loss should be close to ln V (uniform predictions).
      const double log_vocab = std::log(double(kVocab));
      log.write({{"step", s}, {"metric", "initial_loss"}, {"value", val}, {"log_vocab", log_vocab},
                 {"ratio", val / log_vocab}});
    }
    for (const Json& r : activations.records(s)) log.write(r);
  }
  if constexpr (kAnchorTask) {
    if (anchor_due) {
      write_anchor_record(s, log);
    }
  }
  if (due.any_weight()) {
    sync_host(false);
    for (const Json& r : weight_records(s, host_params(), due, top_tokens_, opt_.run_dir)) log.write(r);
  }
  metrics_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

inline void Trainer::save(std::int64_t step) {
  sync_host(true);
  gc::rt::CheckpointState state;
  state.step = step;
  state.data["train"] = train_.position();
  state.seed = kSeed;
  state.spec_hash = kSpecHash;
  state.gcompile_version = kGcompileVersion;
  state.extra["engine"] = engine_->describe();
  if constexpr (kMoe && kLoadBalance == LoadBalance::aux_free) {
    state.extra["moe_bias"] = moe_bias_json(engine_->moe_biases());
  }
  gc::rt::save_checkpoint(opt_.run_dir, buffers(), state, 2);
}

inline void Trainer::report(std::int64_t step, double loss, double lr, double grad_norm, double tokens_per_s,
                            double elapsed) {
  const double remaining = double(opt_.steps - step - 1) * elapsed / double(step + 1 - start_step_);
  if (opt_.progress) {
    std::fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %.0fs", (long long)(step + 1),
                 (long long)opt_.steps, loss, lr, tokens_per_s, remaining);
  } else if ((step + 1) % opt_.log_every == 0 || step == start_step_ || step + 1 == opt_.steps) {
    std::fprintf(stderr, "step %lld/%lld loss %.4f lr %.3g grad_norm %.3g %.0f tok/s\n", (long long)(step + 1),
                 (long long)opt_.steps, loss, lr, grad_norm, tokens_per_s);
  }
}

inline int Trainer::run() {
  namespace fs = std::filesystem;
  using Clock = std::chrono::steady_clock;
  // Only rank 0 writes (the others log to /dev/null) and measures.
  const bool root = comm_.root();
  gc::rt::MetricsWriter log(root ? (fs::path(opt_.run_dir) / "metrics.jsonl").string() : std::string("/dev/null"),
                            opt_.resume ? gc::rt::MetricsWriter::Mode::Append : gc::rt::MetricsWriter::Mode::Truncate,
                            /*tensorboard=*/root);
  const auto start = Clock::now();
  const double tokens_per_step = double(kMicroBatch) * kSeqLen * kGradAccum;
  if (start_step_ == 0 && engine_->sharded() && opt_.metrics && metrics_due_at(0).any_weight()) {
    sync_host(false);  // a collective under ZeRO-1 on GPUs: rank 0's weight metrics at step 0 read it
  }
  if (start_step_ == 0 && root) measure(0, false, log);
  step_seconds_.reserve(std::size_t(std::max<std::int64_t>(opt_.steps - start_step_, 0)));
  std::int64_t unread_from = start_step_;  // the first step queued since the last read
  auto unread_since = Clock::now();
  for (std::int64_t step = start_step_; step < opt_.steps; ++step) {
    const double lr = learning_rate(step);
    const bool read = read_due(step);
    const std::int64_t allocations_before = host_allocations();
    const bool finite = train_step(step, read);
    if (step > start_step_) host_allocations_in_steps_ += host_allocations() - allocations_before;
    if (!finite) {
      // Every rank reads the same verdict (reduced loss and gradient norm) at the same step, so
      // every rank stops here. The engine made no update from the non-finite step on.
      const StepVerdict& v = readout_->verdict;
      if (!root) return 1;
      if (opt_.progress) std::fprintf(stderr, "\n");
      // On a GPU the verdict may be read some steps later: say where the run noticed it.
      const std::string noticed = v.stopped_at == step + 1 ? std::string()
                                                           : " at step " + std::to_string(step + 1) +
                                                                 " (the first read since; no update after step " +
                                                                 std::to_string(v.stopped_at - 1) + ")";
      std::fprintf(stderr,
                   "train: error: step %lld: the loss or gradient norm is not finite (loss %g, grad norm %g); "
                   "stopping%s. The last good checkpoint in %s is kept.\n",
                   (long long)v.stopped_at, v.stopped_loss, v.stopped_norm, noticed.c_str(), opt_.run_dir.c_str());
      log.write({{"step", v.stopped_at}, {"event", "nonfinite"}, {"loss", v.stopped_loss},
                 {"grad_norm", v.stopped_norm}});
      return 1;
    }
    if (!read) continue;
    const double loss = readout_->verdict.loss, grad_norm = readout_->verdict.grad_norm;
    // The steps since the last read ran back to back: each is timed as their mean.
    const double dt = std::chrono::duration<double>(Clock::now() - unread_since).count() / double(step + 1 - unread_from);
    step_seconds_.insert(step_seconds_.end(), std::size_t(step + 1 - unread_from), dt);
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    peak_device_bytes_ = std::max(peak_device_bytes_, engine_->device_used_bytes());
    if (step == start_step_) allocations_after_first_step_ = engine_->device_allocations();
    const bool last = step + 1 == opt_.steps;
    if ((step + 1) % opt_.log_every == 0 || step == 0 || last) {
      Json record = {{"step", step + 1},          {"loss", loss},
                     {"lr", lr},                  {"grad_norm", grad_norm},
                     {"tokens_per_s", tokens_per_step / dt}, {"elapsed_s", elapsed},
                     {"metrics_s", metrics_seconds_}};
      if constexpr (kMoe) {
        record["aux_loss"] = last_aux_loss_;
      }
      log.write(record);
    }
    const bool save_due = opt_.checkpoints && ((kCheckpointEvery > 0 && (step + 1) % kCheckpointEvery == 0) || last);
    if (engine_->sharded()) {
      // Rank 0 alone measures and saves, below, from state the ranks hold in shards: every rank
      // takes part in gathering what it will read.
      const bool weights_due = opt_.metrics && metrics_due_at(step + 1).any_weight();
      if (save_due || weights_due || last) sync_host(save_due);
    }
    if (root) {  // the parameters are the same on every rank: rank 0 measures and saves
      for (const Json& r : step_records_) log.write(r);
      report(step, loss, lr, grad_norm, tokens_per_step / dt, elapsed);
      measure(step + 1, (kEvalEvery > 0 && (step + 1) % kEvalEvery == 0) || last, log);
      if (save_due) {
        save(step + 1);
        release_sharded_moments();
      }
    }
    unread_from = step + 1;
    unread_since = Clock::now();  // measuring and saving are not step time
  }
  comm_.barrier();  // rank 0's last checkpoint is complete before any rank exits
  if (!root) return 0;
  if (opt_.progress) std::fprintf(stderr, "\n");
  write_summary(log, std::chrono::duration<double>(Clock::now() - start).count());
  print_sample();
  return 0;
}

// One closing record for benchmarks: the median step time over this
// process's steps after the first 10% (warm-up: cuBLASLt plans, caches), the
// planned and measured memory, and on a GPU how many device allocations the
// loop made after its first step (0: every buffer exists before training).
inline void Trainer::write_summary(gc::rt::MetricsWriter& log, double elapsed) {
  if (step_seconds_.empty()) return;
  std::vector<double> timed(step_seconds_.begin() + std::ptrdiff_t(step_seconds_.size() / 10), step_seconds_.end());
  std::sort(timed.begin(), timed.end());
  const double median = timed[timed.size() / 2];
  const double tokens_per_step = double(kMicroBatch) * kSeqLen * kGradAccum;
  Json r = {{"step", start_step_ + std::int64_t(step_seconds_.size())},
            {"event", "summary"},
            {"device", engine_->describe()},
            {"steps", std::int64_t(step_seconds_.size())},
            {"elapsed_s", elapsed},
            {"step_ms_median", median * 1e3},
            {"tokens_per_s_median", tokens_per_step / median},
            {"flops_per_token", kFlopsPerToken},
            {"model_buffer_bytes", engine_->model_buffer_bytes()},
            // AdamW moments held by this process (rank 0): the whole state, or its ZeRO-1 shard.
            {"optimizer_bytes", engine_->optimizer_bytes()},
            // The planner's figure for the same (gcompile explain --world-size N).
            {"planned_optimizer_bytes", planned_optimizer_bytes(engine_->sharded() ? comm_.size() : 1)},
            // Host heap allocations inside the training steps after the first (0 unless metrics were due).
            {"host_allocations_in_steps", host_allocations_in_steps_}};
  if (comm_.distributed()) {
    r["world_size"] = comm_.size();
    // Gradient reductions in the last step: 1, or on GPUs the buckets (distributed.bucket_mb)
    // overlapped with the backward plus the tensors outside the layer stack.
    r["grad_reductions_per_step"] = engine_->last_step_reductions();
  }
  // The plan sizes activations for the CUDA backend's precision; the CPU model is fp32 throughout.
  if (on_device_ || kPrecision == Precision::fp32) r["planned_model_buffer_bytes"] = kPlannedModelBufferBytes;
  if (on_device_) {
    r["peak_device_bytes"] = peak_device_bytes_;
    r["allocated_device_bytes_peak"] = engine_->device_allocated_peak();
    r["planned_device_bytes"] = planned_device_bytes(engine_->sharded() ? comm_.size() : 1);
    r["allocations_in_loop"] = engine_->device_allocations() - allocations_after_first_step_;
  }
  log.write(r);
}

inline void Trainer::print_sample() {
  if (std::string(kVocabFile).empty() || val_batches_.empty()) return;
  const std::vector<std::string> pieces = load_vocab(kVocabFile);
  const gc::rt::Batch& batch = val_batches_.front();
  const int prompt_len = std::min(16, kSeqLen / 2);
  std::vector<std::int32_t> prompt(batch.row(0), batch.row(0) + prompt_len);
  if (on_device_ && kTotalParams > kHostSampleMaxParams) {
    std::fprintf(stderr, "train: no greedy sample: it runs on the CPU, too slowly for %lld parameters\n",
                 (long long)kTotalParams);
    return;
  }
  sync_host(false);
  const std::vector<std::int32_t> out = greedy_continue(host_param_vector(), prompt, 48, engine_->moe_biases());
  const std::vector<std::int32_t> continuation(out.begin() + prompt_len, out.end());
  // Whole characters only: the prompt window and the model's first tokens may split one.
  std::fprintf(stderr, "sample (greedy):\n  prompt: %s\n  model:  %s\n",
               whole_utf8_chars(decode(pieces, prompt)).c_str(), whole_utf8_chars(decode(pieces, continuation)).c_str());
}

}  // namespace gcm
