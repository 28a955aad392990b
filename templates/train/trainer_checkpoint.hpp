// Trainer member definitions, checkpoints (train/trainer.hpp declares the class): where --resume continues
// from, resuming, --init-from, saving. The files themselves: runtime/checkpoint.hpp.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>

#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/hf_import.hpp"
#include "train/load_weights.hpp"
#include "train/moe_state.hpp"
#include "train/trainer.hpp"

namespace gc::tree {

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

// --resume: the host state, the data position and the MoE biases from a checkpoint, then the
// engine from the host state. Metrics logged after the checkpoint will be logged again.
inline void Trainer::resume() {
  const std::string from = resume_checkpoint(opt_.run_dir, opt_.checkpoint);
  const gc::rt::CheckpointState state = gc::rt::load_checkpoint(from, host_.buffers(), kSpecHash);
  start_step_ = state.step;
  train_.seek(state.data.at("train"));
  engine_->upload(host_.params(), host_.m().data(), host_.v().data());
  host_.release_sharded_moments(*engine_);
  host_.release_split_weights();
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
}

// --init-from DIR: every weight from a Hugging Face export of a compatible
// spec (runtime/hf_import.hpp), fresh optimizer state, step 0.
inline void Trainer::init_from_export() {
  // The weights land in the host buffers only once every check has passed.
  std::vector<gc::rt::ParamBuffers> weights = host_.buffers();
  for (auto& b : weights) b.exp_avg = b.exp_avg_sq = nullptr;
  const gc::rt::HfImport imported = gc::rt::load_hf_export(opt_.init_from, weights);
  const std::vector<std::vector<float>> biases =
      selection_biases(imported.selection_bias, opt_.init_from + "/model.safetensors");
  engine_->upload(host_.params(), host_.m().data(), host_.v().data());
  host_.release_sharded_moments(*engine_);
  host_.mark_fresh();
  host_.release_split_weights();
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

inline void Trainer::save(std::int64_t step) {
  beat("checkpoint");
  host_.sync(*engine_, comm_, true);
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
  gc::rt::save_checkpoint(opt_.run_dir, host_.buffers(), state, 2);
}

}  // namespace gc::tree
