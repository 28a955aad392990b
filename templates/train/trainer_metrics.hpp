// Trainer member definitions, measuring (train/trainer.hpp declares the class): the validation loss, the
// in-loop analyses of metrics/ at the steps train/metrics_schedule.hpp names, the anchor task,
// the closing summary record and the greedy sample.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "analysis/anchor_eval.hpp"
#include "metrics/device_scratch.hpp"
#include "model/model.hpp"
#include "plan.hpp"
#include "train/sample.hpp"
#include "train/trainer.hpp"
#include "train/utf8.hpp"

namespace gc::tree {

inline double Trainer::evaluate(metrics::ActivationMetrics* metrics, std::size_t shift) {
  double total = 0.0;
  engine_->track_logit_moments(metrics != nullptr && metrics->needs_logit_moments());
  for (std::size_t k = 0; k < val_batches_.size(); ++k) {
    beat("evaluation");  // each batch is progress
    val_batches_[(k + shift) % val_batches_.size()].split(inputs_, targets_);
    total += engine_->forward_loss(inputs_.data(), targets_.data());
    if (metrics) engine_->measure_activations(*metrics);
  }
  engine_->track_logit_moments(false);
  validation_forwards_ = std::int64_t(val_batches_.size());
  return val_batches_.empty() ? 0.0 : total / double(val_batches_.size());
}

// Rank w of W runs batches w, w + W, ... : every rank ceil(n / W) forwards, as under expert
// parallelism each forward is a collective of the rank's group (a rank past the last batch runs
// one again and discards it). Each batch's loss lands in its own place of a vector summed over
// the world, where every other rank adds zero (exact), and the places are added in batch order
// as evaluate() adds them: in data parallelism the mean one rank running every batch computes
// (under expert parallelism within rounding: an owner's expert GEMMs see other batches' rows
// beside a batch's own), in 1/W of the forwards.
inline double Trainer::evaluate_split() {
  const std::size_t n = val_batches_.size(), W = std::size_t(comm_.size()), w = std::size_t(comm_.rank());
  validation_forwards_ = 0;
  if (n == 0) return 0.0;
  val_losses_.assign(n, 0.0);
  const std::size_t rounds = (n + W - 1) / W;
  for (std::size_t k = 0; k < rounds; ++k) {
    beat("evaluation");
    const std::size_t b = k * W + w;
    val_batches_[b % n].split(inputs_, targets_);
    const double loss = engine_->forward_loss(inputs_.data(), targets_.data());
    if (b < n) val_losses_[b] = loss;
  }
  validation_forwards_ = std::int64_t(rounds);
  comm_.allreduce_sum(val_losses_.data(), std::int64_t(n));
  double total = 0.0;
  for (const double loss : val_losses_) total += loss;
  return total / double(n);
}

// The anchor task's accuracies (analysis/anchor_eval.hpp), from the engine's own forward. With
// `stand_in` (a rank that only joins rank 0's forwards: join_measure) each forward runs on a
// validation batch instead, from the stand_in-th on, and the scores mean nothing.
inline gc::rt::anchor::Scores Trainer::anchor_accuracies(std::size_t stand_in) {
  return anchor_scores([&](const std::int32_t* inputs, const std::int32_t* targets) {
    if (stand_in > 0 && !val_batches_.empty()) {
      val_batches_[stand_in++ % val_batches_.size()].split(inputs_, targets_);
      inputs = inputs_.data();
      targets = targets_.data();
    }
    engine_->forward_loss(inputs, targets);
    return engine_->logits_on_host(anchor_logits_);
  });
}

inline void Trainer::write_anchor_record(std::int64_t s, gc::rt::MetricsWriter& log) {
  const gc::rt::anchor::Scores scores = anchor_accuracies();
  log.write(anchor_record(s, scores));
  std::fprintf(stderr, "step %lld: anchor accuracy train %.3f test %.3f; held-out pair inferential %.3f symmetric %.3f\n",
               (long long)s, scores.train.value(), scores.test.value(), scores.inferential.value(),
               scores.symmetric.value());
}

// What a measurement after s steps runs (measure, and join_measure on the ranks that must run
// its forwards with rank 0).
inline Trainer::MeasureParts Trainer::measure_parts(std::int64_t s, bool eval_due) const {
  MeasureParts parts;
  parts.due = opt_.metrics ? metrics_due_at(s) : metrics::MetricsDue{};
  if constexpr (kInitialLossOn) {
    parts.initial_loss = s == 0 && opt_.metrics;
  }
  parts.anchor = kAnchorTask && (eval_due || s == 0);  // accuracies at init and every evaluation
  parts.evaluation = eval_due || parts.initial_loss || parts.due.any_activation();
  return parts;
}

inline void Trainer::measure(std::int64_t s, bool eval_due, gc::rt::MetricsWriter& log) {
  using Clock = std::chrono::steady_clock;
  beat("measuring");
  const MeasureParts parts = measure_parts(s, eval_due);
  const metrics::MetricsDue& due = parts.due;
  const bool initial_loss = parts.initial_loss, anchor_due = parts.anchor;
  if (!parts.evaluation && !anchor_due && !due.any_weight()) return;
  // Under split expert weights the evaluation's forwards exchange too; the summary counts the steps'.
  const Engine::ExchangeTotals exchanges_before = engine_->expert_exchange_totals();
  const auto t0 = Clock::now();
  const auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  const std::int64_t copied_before = engine_->device_to_host_bytes();
  double validation_s = 0.0, anchor_s = 0.0, weights_s = 0.0;  // this measurement's parts (its record)
  metrics::ActivationMetrics activations(due);
  if (parts.evaluation) {
    const auto tv = Clock::now();
    const double val = splits_validation(due) ? evaluate_split() : evaluate(due.any_activation() ? &activations : nullptr);
    validation_s = seconds_since(tv);
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
      const auto ta = Clock::now();
      write_anchor_record(s, log);
      anchor_s = seconds_since(ta);
    }
  }
  const auto tw = Clock::now();
  Json weight_parts = Json::object();
  if (due.any_weight()) {
    // Where the weights lie (on a GPU, its fp32 masters); else the host state.
    metrics::WeightStats* on_device = engine_->weight_stats();
    if (!on_device) host_.sync(*engine_, comm_, false);
    metrics::HostWeightStats on_host(on_device ? nullptr : host_.params());
    metrics::TimedWeightStats timed(on_device ? *on_device : static_cast<metrics::WeightStats&>(on_host));
    for (const Json& r : metrics::weight_records(s, timed, due, top_tokens_, opt_.run_dir)) log.write(r);
    weight_parts = {{"frobenius_s", timed.frobenius_s}, {"stable_rank_s", timed.stable_rank_s}, {"cosine_s", timed.cosine_s}};
  }
  weights_s = due.any_weight() ? seconds_since(tw) : 0.0;
  const double seconds = seconds_since(t0);
  metrics_seconds_ += seconds;
  const std::int64_t copied = engine_->device_to_host_bytes() - copied_before;
  metrics_device_to_host_bytes_ += copied;
  const Engine::ExchangeTotals exchanges_after = engine_->expert_exchange_totals();
  measuring_exchanges_.bytes_sent += exchanges_after.bytes_sent - exchanges_before.bytes_sent;
  measuring_exchanges_.seconds += exchanges_after.seconds - exchanges_before.seconds;
  measuring_exchanges_.exchanges += exchanges_after.exchanges - exchanges_before.exchanges;
  ++measurements_;
  // What this measurement cost, in parts (the GPU kit's metrics_overhead row reads them): the
  // validation pass (with the activation statistics when due), the anchor task, the weight metrics.
  log.write({{"step", s},
             {"event", "measurement"},
             {"seconds", seconds},
             {"validation_s", validation_s},
             {"anchor_s", anchor_s},
             {"weights_s", weights_s},
             {"weights_parts", weight_parts},
             {"activation_parts", activations.seconds()},
             {"activation_metrics", due.any_activation()},
             {"validation_forwards", parts.evaluation ? validation_forwards_ : 0},
             {"stable_rank", due.stable_rank},
             {"cosine_similarity", due.cosine_similarity},
             {"cosine_images", due.cosine_images},
             {"embedding_cosine", due.embedding_cosine},
             {"param_norm", due.param_norm},
             {"device_to_host_bytes", copied}});
}

// The slots of gradients (and of the layout AdamW's moments are cut from) rank 0 holds as
// planned (model/state_layout.hpp): the whole flat array, or under expert parallelism over
// groups of G its expert block's: the experts' share divided by about G (explain --world-size
// prints the same).
inline std::int64_t planned_state_slots(int expert_parallel) {
  if (expert_parallel <= 1) return kStoredParams;
  return StateLayout::of_expert_block(expert_block(0, expert_parallel)).total();
}

// The ranks ZeRO-1 cuts rank 0's state slots over: the world, or under expert parallelism the
// W/G ranks that own the same expert block (engine/zero.hpp); 1 without ZeRO-1.
inline int planned_zero_ranks(int world, int expert_parallel) {
  if (kZeroStage != 1) return 1;
  return expert_parallel > 1 ? world / expert_parallel : world;
}

// The gradient slots one rank holds as planned: planned_state_slots, except that on a GPU
// under ZeRO-1 over `zero_ranks` the array is padded to equal shards (NCCL moves equal blocks).
inline std::int64_t Trainer::planned_gradient_slots(int zero_ranks) const {
  const std::int64_t slots = planned_state_slots(opt_.expert_parallel);
  if (host_.on_device() && zero_ranks > 1) return (slots + zero_ranks - 1) / zero_ranks * zero_ranks;
  return slots;
}

// The working weights one rank holds as planned: every tensor whole, or under expert parallelism
// of the experts rank 0's expert block (planned_state_slots: the engines split them); fp32 on the
// CPU backend, the compute precision on a GPU, where under ZeRO-1 without expert parallelism they
// are padded to equal shards over `zero_ranks` (NCCL moves equal blocks).
inline std::int64_t Trainer::planned_weight_bytes(int zero_ranks) const {
  const std::int64_t slots = planned_state_slots(opt_.expert_parallel);
  if (!host_.on_device()) return 4 * slots;
  const std::int64_t weight = kPrecision == Precision::bf16 ? 2 : 4;
  if (opt_.expert_parallel > 1 || zero_ranks == 1) return weight * slots;
  return weight * ((slots + zero_ranks - 1) / zero_ranks * zero_ranks);
}

// AdamW moments one rank holds as planned: rank 0's shard of ⌈slots / ranks⌉ elements
// (explain --world-size prints the same).
inline std::int64_t planned_optimizer_bytes(int ranks, std::int64_t slots = kStoredParams) {
  return 8 * ((slots + ranks - 1) / ranks);
}

// Device bytes one rank holds as planned: kPlannedDeviceBytes (one GPU, compiler/plan) with the
// model state re-counted (explain --world-size prints the same).
//   ZeRO-1 over `ranks`: the working weights and gradients padded to ranks × shard elements
//     (NCCL moves equal blocks), the fp32 masters (bf16) and the AdamW moments of one shard, the
//     update-ratio pass's partials over that shard, and under bf16 the scratch that assembles one
//     tensor's masters for the weight metrics (metrics/device_scratch.hpp).
//   expert parallelism over groups of G: the working weights and gradients of rank 0's expert
//     block (planned_state_slots; the gradients under ZeRO-1 over the block's `ranks` owners
//     padded to equal shards); the fp32 masters (also under fp32: the working weights are then a
//     copy) and moments of the block, or of its ZeRO-1 shard; the update pass over them; the
//     block's table and its parts' slots in the weights (engine/nccl_expert_exchange.cuh); the
//     master-assembly scratch (the weight metrics assemble an expert tensor over the group); and
//     the group's per-tensor Σ g² gathered (G · tensors doubles) with which tensors are summed
//     (one byte each).
// Both add the expert exchange buffers (expert_parallel_buffer_bytes).
inline std::int64_t planned_device_bytes(int ranks, int expert_parallel = 1, double exchange_factor = 0.0) {
  const std::int64_t stored = kStoredParams;
  const std::int64_t weight = kPrecision == Precision::bf16 ? 2 : 4, master = kPrecision == Precision::bf16 ? 4 : 0;
  const std::int64_t whole_state = stored * (weight + master + 4 + 8);
  const std::int64_t experts =
      expert_parallel_buffer_bytes(std::int64_t(kMicroBatch) * kSeqLen, expert_parallel, int(weight), exchange_factor);
  const std::int64_t gather = kPrecision == Precision::bf16 ? metrics::master_gather_bytes() : 0;
  const std::int64_t slots = planned_state_slots(expert_parallel);
  const std::int64_t shard = (slots + ranks - 1) / ranks, padded = ranks == 1 ? slots : shard * ranks;
  const std::int64_t update_copy = metrics::UpdateScratch::of_range(0, shard).bytes() -
                                   metrics::UpdateScratch::of_range(0, stored).bytes();
  if (expert_parallel > 1) {
    const std::int64_t group_sums = expert_parallel * kNumParams * 8 + kNumParams, tables = kNumParams * (24 + 8);
    return kPlannedDeviceBytes - whole_state + slots * weight + padded * 4 + shard * (4 + 8) + update_copy + tables +
           metrics::master_gather_bytes() + experts + group_sums;
  }
  return kPlannedDeviceBytes - whole_state + padded * (weight + 4) + shard * (master + 8) + update_copy +
         (ranks > 1 ? gather : 0) + experts;
}

// One closing record for benchmarks: the median step time over this
// process's steps after the first 10% (warm-up: cuBLASLt plans, caches), the
// planned and measured memory, and on a GPU how many device allocations the
// loop made after its first step (0: every buffer exists before training).
inline void Trainer::write_summary(gc::rt::MetricsWriter& log, double elapsed) {
  if (step_seconds_.empty()) return;
  // Expert parallelism keeps the expert block's gradients and moments; ZeRO-1 shards the
  // moments over the world, or under expert parallelism the block's over its owners.
  const int zero_ranks = planned_zero_ranks(comm_.size(), opt_.expert_parallel);
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
            // AdamW moments held by this process (rank 0): the whole state, its ZeRO-1 shard, or
            // its expert block's; the planner's figure for the same (gcompile explain
            // --world-size N); the same for the gradients.
            {"optimizer_bytes", engine_->optimizer_bytes()},
            {"planned_optimizer_bytes", planned_optimizer_bytes(zero_ranks, planned_state_slots(opt_.expert_parallel))},
            {"gradient_bytes", engine_->gradient_bytes()},
            {"planned_gradient_bytes", 4 * planned_gradient_slots(zero_ranks)},
            // The working weights (under expert parallelism on the CPU, of the experts the own block's).
            {"weight_bytes", engine_->weight_bytes()},
            {"planned_weight_bytes", planned_weight_bytes(zero_ranks)},
            // Host heap allocations inside the training steps after the first (0 unless metrics were due).
            {"host_allocations_in_steps", host_allocations_in_steps_}};
  if (comm_.distributed()) {
    r["world_size"] = comm_.size();
    if (opt_.expert_parallel > 1) {
      // What this rank's expert exchanges moved in the steps (docs/distributed.md measures the
      // all-to-all; measure()'s evaluation forwards left out).
      const Engine::ExchangeTotals x = engine_->expert_exchange_totals(), m = measuring_exchanges_;
      r["expert_parallel"] = opt_.expert_parallel;
      r["expert_exchange_factor"] = opt_.expert_exchange_factor;
      // The route (model/expert_parallel.hpp): rows per slot of a slotted exchange, which copies
      // nothing to the host; 0 when the host plans it from the offsets (no capacity, a tighter
      // exchange factor, or the CPU backend unless --expert-route slotted).
      r["expert_exchange_slot_rows"] =
          chosen_slot_rows(opt_.expert_route, host_.on_device(), std::int64_t(kMicroBatch) * kSeqLen * kTopK,
                           opt_.expert_parallel, opt_.expert_exchange_factor);
      r["expert_exchange_bytes_sent"] = x.bytes_sent - m.bytes_sent;
      r["expert_exchange_s"] = x.seconds - m.seconds;
      r["expert_exchanges"] = x.exchanges - m.exchanges;
    }
    // Gradient reductions in the last step: 1, or on GPUs the buckets (distributed.bucket_mb)
    // overlapped with the backward plus the tensors outside the layer stack.
    r["grad_reductions_per_step"] = engine_->last_step_reductions();
    // Saves and the end at which every rank's parameters were found equal to rank 0's.
    r["replica_checks"] = replica_checks_;
  }
  // The plan sizes activations for the CUDA backend's precision; the CPU model is fp32 throughout.
  if (host_.on_device() || kPrecision == Precision::fp32) {
    // Expert parallelism grows the expert buffers to the group's dropless worst case.
    const int act_bytes = host_.on_device() && kPrecision == Precision::bf16 ? 2 : 4;
    r["planned_model_buffer_bytes"] =
        kPlannedModelBufferBytes +
        expert_parallel_buffer_bytes(std::int64_t(kMicroBatch) * kSeqLen, opt_.expert_parallel, act_bytes,
                                     opt_.expert_exchange_factor);
  }
  if (host_.on_device()) {
    r["peak_device_bytes"] = peak_device_bytes_;
    r["allocated_device_bytes_peak"] = engine_->device_allocated_peak();
    r["planned_device_bytes"] = planned_device_bytes(zero_ranks, opt_.expert_parallel,
                                                     opt_.expert_exchange_factor);
    r["allocations_in_loop"] = engine_->device_allocations() - allocations_after_first_step_;
    // What measuring copied from the GPU (validation losses, the analyses, update ratios) over
    // the run's measurements (docs/metrics.md, "On a GPU").
    r["metrics_device_to_host_bytes"] = metrics_device_to_host_bytes_;
    // Device → host copies made by the steps after the first, each a wait for the GPU: the
    // verdict, loss and balancing-loss reads of the steps that log, record or save, and the
    // metrics' when due; and those made by the steps that read nothing (0 unless expert
    // parallelism sizes its exchanges: one per MoE layer and micro-batch).
    r["device_to_host_copies_in_steps"] = device_to_host_copies_in_steps_;
    r["device_to_host_copies_in_unread_steps"] = device_to_host_copies_in_unread_steps_;
    r["unread_steps"] = unread_steps_;
    r["measurements"] = measurements_;
  }
  r["metrics_s"] = metrics_seconds_;  // every measurement's time, the last one's included
  log.write(r);
}

inline void Trainer::print_sample() {
  if (std::string(kVocabFile).empty() || val_batches_.empty()) return;
  const std::vector<std::string> pieces = load_vocab(kVocabFile);
  const gc::rt::Batch& batch = val_batches_.front();
  const int prompt_len = std::min(16, kSeqLen / 2);
  std::vector<std::int32_t> prompt(batch.row(0), batch.row(0) + prompt_len);
  if (host_.on_device() && kTotalParams > kHostSampleMaxParams) {
    std::fprintf(stderr, "train: no greedy sample: it runs on the CPU, too slowly for %lld parameters\n",
                 (long long)kTotalParams);
    return;
  }
  host_.sync(*engine_, comm_, false);
  const std::vector<std::int32_t> out = greedy_continue(host_.param_vector(), prompt, 48, engine_->moe_biases());
  const std::vector<std::int32_t> continuation(out.begin() + prompt_len, out.end());
  // Whole characters only: the prompt window and the model's first tokens may split one.
  std::fprintf(stderr, "sample (greedy):\n  prompt: %s\n  model:  %s\n",
               whole_utf8_chars(decode(pieces, prompt)).c_str(), whole_utf8_chars(decode(pieces, continuation)).c_str());
}

}  // namespace gc::tree
