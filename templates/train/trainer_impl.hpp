// Trainer member definitions, the loop (train/trainer.hpp declares the class): the engine's choice and
// the checks before it, the step, when the host reads a step, the run.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analysis/anchor_eval.hpp"
#include "core/fingerprint.hpp"
#include "engine/make_engine.hpp"
#include "model/param_offsets.hpp"
#include "plan.hpp"
#include "runtime/error.hpp"
#include "train/host_allocations.hpp"
#include "train/moe_state.hpp"
#include "train/schedule.hpp"
#include "train/trainer.hpp"

namespace gc::tree {

// distributed.expert_parallel (or --expert-parallel): groups of G consecutive ranks share each
// MoE layer's experts, so G must divide the world, and every rank of a group owns an expert.
inline void check_expert_parallel(const gc::rt::Comm& comm, int G) {
  if (G == 1) return;
  const std::string what = "distributed.expert_parallel = " + std::to_string(G);
  if (!kMoe) {
    throw gc::rt::RuntimeError("train", what + " needs a mixture-of-experts model; this one is dense");
  }
  if (G > kExperts) {
    throw gc::rt::RuntimeError("train", what + " exceeds the " + std::to_string(kExperts) +
                                            " experts per layer: every rank of a group must own at least one");
  }
  if (comm.size() % G != 0) {
    throw gc::rt::RuntimeError("train", what + " does not divide the world of " + std::to_string(comm.size()) +
                                            (comm.size() == 1 ? " process" : " processes") +
                                            ": launch a multiple of " + std::to_string(G) +
                                            " ranks (mpirun -np), or pass --expert-parallel with a divisor");
  }
}

// A data-parallel job splits every step's kGradAccum micro-batches among its
// ranks (gc::rt::rank_owns_micro_batch); the global batch stays the spec's.
inline void check_world(const gc::rt::Comm& comm, int expert_parallel) {
  check_expert_parallel(comm, expert_parallel);
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
    : opt_(options),
      comm_(gc::rt::Comm::world()),
      records_{options.metrics, options.steps},
      train_(options.train_data, kVocab, sequence_layout()) {
  check_world(comm_, opt_.expert_parallel);
  choose_engine();  // first: the memory check precedes every large allocation
#ifdef GC_HAVE_CUDA
  if (comm_.distributed() && host_.on_device()) {
    if (!cuda_has_nccl()) {
      throw gc::rt::RuntimeError("train", "launched as " + std::to_string(comm_.size()) +
                                              " processes on GPUs, but this tree's CUDA backend was built without NCCL "
                                              "(nccl.h and libnccl.so.2 were not found when it was configured); "
                                              "use --device cpu or rebuild where NCCL is installed");
    }
  }
#endif
  if constexpr (kDistributedNccl) {
    if (comm_.distributed() && !host_.on_device()) {
      throw gc::rt::RuntimeError("train", "the spec says distributed.backend = \"nccl\" (data parallelism on GPUs), but "
                                          "this run is on the CPU backend; run it on GPUs, or use backend = \"auto\" "
                                          "to train on the CPU with MPI");
    }
  }
  if (comm_.distributed()) engine_->join(comm_, kZeroStage);
  if (opt_.expert_parallel > 1) {
    engine_->split_experts(opt_.expert_parallel, opt_.expert_exchange_factor, opt_.expert_route);
    if (engine_->expert_weights_split()) host_.use_split_weights();
  }
  // Whole moments, except under ZeRO-1, where a rank keeps its shard (m_ and v_
  // then exist only while a checkpoint is loaded or saved).
  if (!engine_->sharded() || opt_.resume || !opt_.init_from.empty()) host_.allocate_moments();
  gc::rt::ShardSet val(opt_.val_data, kVocab, sequence_layout());
  val_batches_ = val.validation_batches(kMicroBatch, kSeqLen, kEvalBatches);
  if (opt_.resume) {
    resume();
  } else {
    // The same Philox streams on every backend: identical initial weights.
    engine_->initialize(kSeed);
    host_.mark_stale();
    if (!opt_.init_from.empty()) init_from_export();
  }
  if constexpr (kEmbeddingCosineOn) {
    top_tokens_ = metrics::most_frequent_tokens(opt_.train_data, kEmbeddingTopTokens);
  }
  if (opt_.metrics) engine_->prepare_metrics();
  if (opt_.profile_steps > 0) profiler_ = std::make_unique<StepProfiler>(*engine_, start_step_);
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



inline void Trainer::choose_engine() {
  const bool on_gpu = runs_on_gpu(opt_.device);
  engine_ = make_engine(
      on_gpu,
      [&] {
        check_host_memory();
        return HostEngineState{&host_.host_model(), &host_.m(), &host_.v()};
      },
      opt_.kernels);
  if (on_gpu) host_.use_device();
}








// Whether the host reads step `step`'s values (loss, norm, verdict) after it: when it logs,
// records, measures or saves after it. Between such steps a GPU run queues step after step
// without waiting (the verdict stops the updates on the device if a step is not finite, and the
// next read stops the run). The CPU engine's values cost nothing to read: every step is read.
// Every rank's replicated state equals rank 0's (a collective; fingerprints of
// core/fingerprint.hpp): the parameters, and the last step's verdict (loss, gradient norm, clip
// multiplier) and per-tensor Σ g², which every rank computes for itself from reduced values. Ranks that drifted apart
// (a reduction adding in a different order on some of them) would leave rank 0's checkpoints and
// metrics describing a model the others do not hold; every rank sees every fingerprint, so all
// of them stop here together.
inline void Trainer::check_replicas(std::int64_t step) {
  beat("check_replicas");
  std::uint64_t state = engine_->replica_fingerprint();
  if (readout_ != nullptr) {  // the save and last steps are read steps
    const StepVerdict& v = readout_->verdict;
    std::uint64_t k = 1;
    const auto add = [&](double x) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      state += core::mix64(bits ^ core::mix64(k++));
    };
    for (double x : {v.loss, v.grad_norm, v.clip}) add(x);
    for (double x : readout_->squares) add(x);
  }
  const std::int64_t mine = std::int64_t(state);
  replica_fingerprints_.assign(std::size_t(comm_.size()), 0);
  comm_.allgather(&mine, replica_fingerprints_.data(), 1);
  for (int r = 1; r < comm_.size(); ++r) {
    const std::int64_t theirs = replica_fingerprints_[std::size_t(r)], first = replica_fingerprints_[0];
    if (theirs == first) continue;
    char prints[64];
    std::snprintf(prints, sizeof prints, "%016llx and %016llx", (unsigned long long)first, (unsigned long long)theirs);
    throw gc::rt::RuntimeError("train", "step " + std::to_string(step) + ": rank " + std::to_string(r) +
                                            "'s parameters or step verdict (loss, gradient norm, clip, Σ g² per tensor) differ "
                                            "from "
                                            "rank 0's (fingerprints " + prints +
                                            "): the data-parallel replicas drifted apart, so rank 0's checkpoint "
                                            "and metrics would not describe every rank (a reduction that adds in a "
                                            "different order on some ranks does this); nothing was saved at this step");
  }
  replica_checks_ += 1;
}

inline bool Trainer::read_due(std::int64_t step) const {
  const std::int64_t s = step + 1;
  if (profiler_) return true;  // a profiled step is read at its end (trainer_profile.hpp)
  if (!host_.on_device() || step == start_step_ || s == opt_.steps || s % opt_.log_every == 0) return true;
  if (opt_.checkpoints && kCheckpointEvery > 0 && s % kCheckpointEvery == 0) return true;
  if (kEvalEvery > 0 && s % kEvalEvery == 0) return true;
  if (records_.any_due(s)) return true;
  const metrics::MetricsDue due = opt_.metrics ? metrics_due_at(s) : metrics::MetricsDue{};
  return due.any_activation() || due.any_weight();
}

inline bool Trainer::train_step(std::int64_t step, bool read) {
  using profile::Category, profile::Pass;
  const double param_bytes = double(kOffsets.at[kNumParams]) * sizeof(float);
  beat(step + 1, "forward_backward");
  profile::timed(recorder(), profile::memory(Category::optimizer, "zero_grads", Pass::step, param_bytes),
                 [&] { engine_->zero_grads(); });
  if constexpr (kMoe) {
    engine_->moe_begin_step();
  }
  // Every rank reads every micro-batch (the data position is the same on all
  // ranks and for any world size) and computes its own share of them.
  const int last_owned = kGradAccum - comm_.size() + comm_.rank();  // this rank's last micro-batch
  for (int micro = 0; micro < kGradAccum; ++micro) {
    train_.next_batch(kMicroBatch, kSeqLen, batch_);
    if (!gc::rt::rank_owns_micro_batch(micro, comm_.rank(), comm_.size())) continue;
    batch_.split(inputs_, targets_);
    if (comm_.distributed() && micro == last_owned) engine_->overlap_next_backward();
    engine_->forward_backward(inputs_.data(), targets_.data(), 1.0 / kGradAccum);
  }
  if (comm_.distributed()) {
    // Σ over ranks of their micro-batches' gradients (each scaled by 1/kGradAccum): the global-batch
    // mean (under ZeRO-1 each rank keeps its shard of it: engine/zero.hpp). The loss is summed by
    // finish_step.
    beat("reduce_grads");
    profile::timed(recorder(), profile::memory(Category::communication, "reduce_grads", Pass::step, 0.0),
                   [&] { engine_->reduce_grads(); });
    if constexpr (kMoe) {
      beat("moe_allreduce_loads");
      engine_->moe_allreduce_loads(comm_);
    }
  }
  const std::int64_t s = step + 1;  // steps completed after this one
  step_records_.clear();
  const bool update_ratio_due = records_.update_ratio_due(s);
  if (update_ratio_due) engine_->snapshot_tensors(kUpdateRatioTensors);  // kept where the weights lie
  // Σ g², the verdict and AdamW: at least the gradients read twice, the moments and the masters
  // read and written (8 fp32 values per parameter).
  beat("finish_step");
  profile::timed(recorder(), profile::memory(Category::optimizer, "finish_step", Pass::step, 8 * param_bytes),
                 [&] { engine_->finish_step(learning_rate(step), s); });
  host_.mark_stale();
  if (read) {
    beat("read_step");
    profile::timed(recorder(), profile::memory(Category::other, "read_step", Pass::step, 0.0),
                   [&] { readout_ = &engine_->read_step(); });
    if (readout_->verdict.stopped_at != 0) return false;
    if constexpr (kMoe) {
      last_aux_loss_ = engine_->step_aux_loss();  // the MoE balancing loss, logged apart from the cross-entropy
    }
  }
  if (records_.grad_norm_due(s)) {
    // Per class, before clipping.
    const std::vector<double>& squares = readout_->squares;
    const Json values = metrics::per_class_norm(kGradNormTensors, [&](int i) { return squares[std::size_t(i)]; });
    step_records_.push_back({{"step", s}, {"metric", "grad_norm"}, {"values", values}});
  }
  if constexpr (kMoe) {
    engine_->moe_end_step();
    if (records_.moe_routing_due(s)) step_records_.push_back(moe_record(engine_->moe_take_stats(), s, last_aux_loss_));
  }
  if (update_ratio_due) {
    // ‖Δθ‖₂ / ‖θ‖₂ per class for this step's update (seed 001's checklist).
    const std::int64_t copied_before = engine_->device_to_host_bytes();
    const std::vector<std::array<double, 2>> sums = engine_->update_sums(kUpdateRatioTensors);
    metrics_device_to_host_bytes_ += engine_->device_to_host_bytes() - copied_before;
    std::map<std::string, std::pair<double, double>> update;  // class -> (Σ Δθ², Σ θ²) over its tensors
    for (int i = 0; i < kNumParams; ++i) {
      if (!kUpdateRatioTensors[i]) continue;
      auto& [delta, base] = update[kParams[i].cls];
      delta += sums[std::size_t(i)][0];
      base += sums[std::size_t(i)][1];
    }
    Json values = Json::object();
    for (const auto& [cls, totals] : update) {
      values[cls] = totals.second > 0.0 ? std::sqrt(totals.first / totals.second) : 0.0;
    }
    step_records_.push_back({{"step", s}, {"metric", "update_ratio"}, {"values", values}});
  }
  return true;
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

// A rank other than 0, at step s. The validation loss alone is split over the world
// (evaluate_split: every rank runs its share of the batches). When the engine splits the
// experts' weights every forward is a collective of a group, so the other ranks of rank 0's group
// run as many forwards as rank 0's measure() runs on its own: a validation pass that feeds the
// activation metrics (every batch on rank 0), and the anchor task's (the results are discarded);
// then the weight metrics. Group rank r starts r validation batches on, so that an owner receives
// rows of different batches, as in training, rather than G copies of one batch's skew (which a
// tight expert_exchange_factor would stop on).
inline void Trainer::join_measure(std::int64_t s, bool eval_due) {
  const MeasureParts parts = measure_parts(s, eval_due);
  const bool split = parts.evaluation && splits_validation(parts.due);
  if (split) evaluate_split();
  if (engine_->expert_weights_split() && comm_.rank() < opt_.expert_parallel) {
    const std::size_t group_rank = std::size_t(comm_.rank());
    if (parts.evaluation && !split) evaluate(nullptr, group_rank);
    if constexpr (kAnchorTask) {
      if (parts.anchor) anchor_accuracies(group_rank);
    }
  }
  join_weight_metrics(s);
}

// A rank other than 0, at step s: when measuring the weights is a collective (ZeRO-1 under bf16
// on GPUs: each tensor is assembled from the shards), it runs the same weight metrics as rank 0
// measure() and discards them (no files: no heatmaps).
inline void Trainer::join_weight_metrics(std::int64_t s) {
  if (!opt_.metrics || !engine_->weight_metrics_collective()) return;
  metrics::MetricsDue due = metrics_due_at(s);
  if (!due.any_weight()) return;
  due.cosine_images = false;
  metrics::weight_records(s, *engine_->weight_stats(), due, top_tokens_, opt_.run_dir);
}

// The watchdog (--watchdog-s; runtime/watchdog.hpp) watches the steps from here on; the engine
// gives it the communicators' error polls and aborts.
inline void Trainer::start_watchdog() {
  if (opt_.watchdog_s <= 0.0) return;
  watchdog_ = std::make_unique<gc::rt::Watchdog>(opt_.watchdog_s,
                                                 gc::rt::Watchdog::Where{comm_.rank(), comm_.size(), comm_.host()});
  watchdog_->add_poll([this] { return engine_->communicator_error(); });
  watchdog_->add_abort_hook([this] { engine_->abort_communicators(); });
  beat(start_step_, "starting");
}

inline int Trainer::run() {
  namespace fs = std::filesystem;
  using Clock = std::chrono::steady_clock;
  start_watchdog();
  // Only rank 0 writes (the others log to /dev/null) and measures; the others join its
  // collectives (join_measure), the validation loss's batches split over every rank.
  const bool root = comm_.root();
  gc::rt::MetricsWriter log(root ? (fs::path(opt_.run_dir) / "metrics.jsonl").string() : std::string("/dev/null"),
                            opt_.resume ? gc::rt::MetricsWriter::Mode::Append : gc::rt::MetricsWriter::Mode::Truncate,
                            /*tensorboard=*/root);
  const auto start = Clock::now();
  const double tokens_per_step = double(kMicroBatch) * kSeqLen * kGradAccum;
  if (start_step_ == 0 && engine_->sharded() && opt_.metrics && metrics_due_at(0).any_weight() &&
      engine_->weight_stats() == nullptr) {
    host_.sync(*engine_, comm_, false);  // a collective under ZeRO-1 on GPUs: rank 0's weight metrics at step 0 read it
  }
  if (start_step_ == 0 && root) measure(0, false, log);
  if (start_step_ == 0 && !root) join_measure(0, false);
  if (start_step_ == 0) host_.release_split_weights();
  step_seconds_.reserve(std::size_t(std::max<std::int64_t>(opt_.steps - start_step_, 0)));
  std::int64_t unread_from = start_step_;  // the first step queued since the last read
  auto unread_since = Clock::now();
  for (std::int64_t step = start_step_; step < opt_.steps; ++step) {
    const double lr = learning_rate(step);
    const bool read = read_due(step);
    const std::int64_t allocations_before = host_allocations();
    const std::int64_t copies_before = engine_->device_to_host_copies();
    if (profiler_) profiler_->before_step(step);
    const bool finite = train_step(step, read);
    if (step > start_step_) {
      host_allocations_in_steps_ += host_allocations() - allocations_before;
      const std::int64_t copies = engine_->device_to_host_copies() - copies_before;
      device_to_host_copies_in_steps_ += copies;
      if (!read) {
        device_to_host_copies_in_unread_steps_ += copies;
        unread_steps_ += 1;
      }
    }
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
      // (The weight metrics read the host state only where the engine cannot measure its own.)
      const bool weights_due =
          opt_.metrics && metrics_due_at(step + 1).any_weight() && engine_->weight_stats() == nullptr;
      if (save_due || weights_due || last) host_.sync(*engine_, comm_, save_due);
    }
    // Rank 0 saves and measures for every rank: the replicas must be equal (issue 41).
    if (comm_.distributed() && (save_due || last)) check_replicas(step + 1);
    // A profiled step ends after the metrics due at it, except for the run's closing evaluation.
    if (profiler_ && last) profiler_->after_step(step);
    const bool eval_due = (kEvalEvery > 0 && (step + 1) % kEvalEvery == 0) || last;
    if (root) {  // the parameters are the same on every rank: rank 0 measures (with the others) and saves
      for (const Json& r : step_records_) log.write(r);
      report(step, loss, lr, grad_norm, tokens_per_step / dt, elapsed);
      profile::timed(recorder(), profile::memory(profile::Category::measuring, "measure", profile::Pass::step, 0.0),
                     [&] { measure(step + 1, eval_due, log); });
      if (save_due) {
        save(step + 1);
        host_.release_sharded_moments(*engine_);
      }
    } else {
      profile::timed(recorder(), profile::memory(profile::Category::measuring, "measure", profile::Pass::step, 0.0),
                     [&] { join_measure(step + 1, eval_due); });
    }
    if (!last) host_.release_split_weights();  // every rank alike (the next sync is a collective); the sample reads the last
    if (profiler_ && !last) profiler_->after_step(step);
    unread_from = step + 1;
    unread_since = Clock::now();  // measuring and saving are not step time
  }
  // The sample reads the whole weights: gathered by the last step, or here when no step ran (a
  // resume of a finished run) and the engine holds them in parts (a collective; a no-op when fresh).
  if (engine_->sharded()) host_.sync(*engine_, comm_, false);
  comm_.barrier();  // rank 0's last checkpoint is complete before any rank exits
  if (!root) return 0;
  if (opt_.progress) std::fprintf(stderr, "\n");
  write_summary(log, std::chrono::duration<double>(Clock::now() - start).count());
  if (profiler_) write_profile();
  print_sample();
  return 0;
}



// RUN/profile.json and the printed table of train --profile (rank 0).
inline void Trainer::write_profile() const {
  profile::ReportInfo info;
  info.backend = host_.on_device() ? "cuda" : "cpu";
  info.device = engine_->describe();
  info.spec = kExperimentName;
  info.warmup_steps = StepProfiler::kWarmup;
  info.tokens_per_step = double(kMicroBatch) * kSeqLen * kGradAccum;
  info.micro_batches_per_step = kGradAccum / comm_.size();
  info.ceiling_tflops = opt_.profile_ceiling_tflops;
  info.ceiling_gbps = opt_.profile_ceiling_gbps;
  profiler_->report(opt_.run_dir, info);
}

}  // namespace gc::tree
