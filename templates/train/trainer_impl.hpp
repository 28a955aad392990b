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
  const double clip = kGradClip > 0.0 ? cpu::clip_scale(last_grad_norm_, kGradClip) : 1.0;
  const double lr = learning_rate(step);
  for (int i = 0; i < kNumParams; ++i) {
    const ParamInfo& p = kParams[i];
    const cpu::AdamWHyper hp{lr * p.lr_mult, kBeta1, kBeta2, kAdamEps, p.weight_decay, step + 1};
    cpu::adamw_step(model_.param(i), m_.data() + kOffsets.at[i], v_.data() + kOffsets.at[i], model_.grad(i), p.numel,
                    hp, clip);
  }
  return loss;
}

inline double Trainer::evaluate() {
  double total = 0.0;
  for (const auto& batch : val_batches_) {
    const auto inputs = batch.inputs();
    const auto targets = batch.targets();
    total += model_.forward(inputs.data(), targets.data());
  }
  return val_batches_.empty() ? 0.0 : total / double(val_batches_.size());
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
                 {"tokens_per_s", tokens_per_step / dt}, {"elapsed_s", elapsed}});
    }
    report(step, loss, lr, last_grad_norm_, tokens_per_step / dt, elapsed);
    if ((kEvalEvery > 0 && (step + 1) % kEvalEvery == 0) || last) {
      const double val = evaluate();
      log.write({{"step", step + 1}, {"val_loss", val}});
      if (opt_.progress) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "step %lld: val_loss %.4f\n", (long long)(step + 1), val);
    }
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
