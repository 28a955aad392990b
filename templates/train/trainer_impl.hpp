// Trainer member definitions (included by trainer.hpp).
#pragma once

#include "train/trainer.hpp"  // self-contained when parsed alone

#include <filesystem>

namespace gcm {

inline Trainer::Trainer(const TrainOptions& options)
    : opt_(options),
      model_(kMicroBatch, kSeqLen),
      m_(model_.params.size(), 0.0f),
      v_(model_.params.size(), 0.0f),
      train_(options.train_data, kVocab) {
  gc::rt::ShardSet val(opt_.val_data, kVocab);
  val_batches_ = val.validation_batches(kMicroBatch, kSeqLen, kEvalBatches);
  if (opt_.resume) {
    auto latest = gc::rt::latest_checkpoint(opt_.run_dir);
    if (!latest) throw gc::rt::RuntimeError(opt_.run_dir, "--resume: the run has no complete checkpoint");
    const gc::rt::CheckpointState state = gc::rt::load_checkpoint(*latest, buffers(), kSpecHash);
    start_step_ = state.step;
    train_.seek(state.data.at("train"));
    // Metrics logged after the checkpoint will be logged again, identically.
    gc::rt::truncate_metrics_log((std::filesystem::path(opt_.run_dir) / "metrics.jsonl").string(), start_step_);
    std::fprintf(stderr, "train: resumed %s at step %lld\n", latest->c_str(), (long long)start_step_);
  } else {
    init_parameters(model_.params.data(), kSeed);
  }
  if constexpr (kEmbeddingCosineOn) {
    top_tokens_ = most_frequent_tokens(opt_.train_data, kEmbeddingTopTokens);
  }
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
    out.push_back({p.name, std::vector<std::int64_t>(p.shape, p.shape + p.rank), model_.param(i),
                   m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i]});
  }
  return out;
}

inline double Trainer::train_step(std::int64_t step) {
  model_.zero_grads();
  double loss = 0.0;
  for (int micro = 0; micro < kGradAccum; ++micro) {
    const gc::rt::Batch batch = train_.next_batch(kMicroBatch, kSeqLen);
    const auto inputs = batch.inputs();
    const auto targets = batch.targets();
    loss += model_.forward(inputs.data(), targets.data()) / kGradAccum;
    model_.backward(1.0 / kGradAccum);
  }
  std::vector<cpu::GradView<float>> views;
  for (int i = 0; i < kNumParams; ++i) views.push_back({model_.grad(i), kParams[i].numel});
  last_grad_norm_ = cpu::global_grad_norm(views.data(), kNumParams);
  if (!std::isfinite(loss) || !std::isfinite(last_grad_norm_)) return std::nan("");
  const std::int64_t s = step + 1;  // steps completed after this one
  step_records_.clear();
  if constexpr (kGradNormOn) {
    if (s % kGradNormEvery == 0 || s == 1) {
      // Per class, before clipping.
      const Json values = per_class_norm(kGradNormTensors, [&](int i) {
        return metrics::frobenius_squared(model_.grad(i), kParams[i].numel);
      });
      step_records_.push_back({{"step", s}, {"metric", "grad_norm"}, {"values", values}});
    }
  }
  bool update_ratio_due = false;
  if constexpr (kUpdateRatioOn) {
    update_ratio_due = s % kUpdateRatioEvery == 0 || s == 1;
  }
  std::map<std::string, std::pair<double, double>> update;  // class -> (Σ Δθ², Σ θ²) over its tensors
  const double clip = kGradClip > 0.0 ? cpu::clip_scale(last_grad_norm_, kGradClip) : 1.0;
  const double lr = learning_rate(step);
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    const bool track = update_ratio_due && kUpdateRatioTensors[i];
    if (track) before_update_.assign(model_.param(i), model_.param(i) + p.numel);
    const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, step + 1};
    cpu::adamw_step(model_.param(i), m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i], model_.grad(i), p.numel,
                    hp, clip);
    if (track) {
      auto& [delta, base] = update[p.cls];
      for (std::int64_t j = 0; j < p.numel; ++j) {
        const double before = before_update_[std::size_t(j)];
        const double d = double(model_.param(i)[j]) - before;
        delta += d * d;
        base += before * before;
      }
    }
  }
  if (update_ratio_due) {
    // ‖Δθ‖₂ / ‖θ‖₂ per class for this step's update (seed 001's checklist).
    Json values = Json::object();
    for (const auto& [cls, sums] : update) values[cls] = sums.second > 0.0 ? std::sqrt(sums.first / sums.second) : 0.0;
    step_records_.push_back({{"step", s}, {"metric", "update_ratio"}, {"values", values}});
  }
  return loss;
}

inline double Trainer::evaluate(ActivationMetrics* metrics) {
  double total = 0.0;
  for (const auto& batch : val_batches_) {
    const auto inputs = batch.inputs();
    const auto targets = batch.targets();
    total += model_.forward(inputs.data(), targets.data());
    if (metrics) metrics->add_batch(model_);
  }
  return val_batches_.empty() ? 0.0 : total / double(val_batches_.size());
}

inline void Trainer::measure(std::int64_t s, bool eval_due, gc::rt::MetricsWriter& log) {
  using Clock = std::chrono::steady_clock;
  const MetricsDue due = metrics_due_at(s);
  bool initial_loss = false;
  if constexpr (kInitialLossOn) {
    initial_loss = s == 0;
  }
  if (!eval_due && !initial_loss && !due.any_activation() && !due.any_weight()) return;
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
  for (const Json& r : weight_records(s, model_, due, top_tokens_, opt_.run_dir)) log.write(r);
  metrics_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
}

inline void Trainer::save(std::int64_t step) {
  gc::rt::CheckpointState state;
  state.step = step;
  state.data["train"] = train_.position();
  state.seed = kSeed;
  state.spec_hash = kSpecHash;
  state.gcompile_version = kGcompileVersion;
  gc::rt::save_checkpoint(opt_.run_dir, buffers(), state, 2);
}

inline void Trainer::report(std::int64_t step, double loss, double lr, double grad_norm, double tokens_per_s,
                            double elapsed) {
  const double remaining = double(opt_.steps - step - 1) * elapsed / double(step + 1 - start_step_);
  if (opt_.progress) {
    std::fprintf(stderr, "\r\033[Kstep %lld/%lld  loss %.4f  lr %.3g  %.0f tok/s  ETA %.0fs", (long long)(step + 1),
                 (long long)opt_.steps, loss, lr, tokens_per_s, remaining);
  } else if ((step + 1) % kLogEvery == 0 || step == start_step_ || step + 1 == opt_.steps) {
    std::fprintf(stderr, "step %lld/%lld loss %.4f lr %.3g grad_norm %.3g %.0f tok/s\n", (long long)(step + 1),
                 (long long)opt_.steps, loss, lr, grad_norm, tokens_per_s);
  }
}

inline int Trainer::run() {
  namespace fs = std::filesystem;
  using Clock = std::chrono::steady_clock;
  gc::rt::MetricsWriter log((fs::path(opt_.run_dir) / "metrics.jsonl").string(),
                            opt_.resume ? gc::rt::MetricsWriter::Mode::Append : gc::rt::MetricsWriter::Mode::Truncate);
  const auto start = Clock::now();
  const double tokens_per_step = double(kMicroBatch) * kSeqLen * kGradAccum;
  if (start_step_ == 0) measure(0, false, log);
  for (std::int64_t step = start_step_; step < opt_.steps; ++step) {
    const auto t0 = Clock::now();
    const double lr = learning_rate(step);
    const double loss = train_step(step);
    if (!std::isfinite(loss)) {
      if (opt_.progress) std::fprintf(stderr, "\n");
      std::fprintf(stderr,
                   "train: error: step %lld: the loss or gradient norm is not finite (grad norm %g); stopping. "
                   "The last good checkpoint in %s is kept.\n",
                   (long long)(step + 1), last_grad_norm_, opt_.run_dir.c_str());
      log.write({{"step", step + 1}, {"event", "nonfinite"}, {"loss", loss}, {"grad_norm", last_grad_norm_}});
      return 1;
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    const bool last = step + 1 == opt_.steps;
    if ((step + 1) % kLogEvery == 0 || step == 0 || last) {
      log.write({{"step", step + 1}, {"loss", loss}, {"lr", lr}, {"grad_norm", last_grad_norm_},
                 {"tokens_per_s", tokens_per_step / dt}, {"elapsed_s", elapsed}, {"metrics_s", metrics_seconds_}});
    }
    for (const Json& r : step_records_) log.write(r);
    report(step, loss, lr, last_grad_norm_, tokens_per_step / dt, elapsed);
    measure(step + 1, (kEvalEvery > 0 && (step + 1) % kEvalEvery == 0) || last, log);
    if ((kCheckpointEvery > 0 && (step + 1) % kCheckpointEvery == 0) || last) save(step + 1);
  }
  if (opt_.progress) std::fprintf(stderr, "\n");
  print_sample();
  return 0;
}

inline void Trainer::print_sample() {
  if (std::string(kVocabFile).empty() || val_batches_.empty()) return;
  const std::vector<std::string> pieces = load_vocab(kVocabFile);
  const gc::rt::Batch& batch = val_batches_.front();
  const int prompt_len = std::min(16, kSeqLen / 2);
  std::vector<std::int32_t> prompt(batch.row(0), batch.row(0) + prompt_len);
  const std::vector<std::int32_t> out = greedy_continue(model_.params, prompt, 48);
  const std::vector<std::int32_t> continuation(out.begin() + prompt_len, out.end());
  std::fprintf(stderr, "sample (greedy):\n  prompt: %s\n  model:  %s\n", decode(pieces, prompt).c_str(),
               decode(pieces, continuation).c_str());
}

}  // namespace gcm
