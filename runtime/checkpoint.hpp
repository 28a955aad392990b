// Training checkpoints. Layout:
//
//   RUN/checkpoints/step_000123/model.safetensors      weights by HF-style name, F32
//   RUN/checkpoints/step_000123/optimizer.safetensors  exp_avg.NAME, exp_avg_sq.NAME (F32)
//   RUN/checkpoints/step_000123/state.json             step, data positions, seed and RNG
//                                                       state, spec hash, gcompile version,
//                                                       size and SHA-256 of the two tensor files
//   RUN/checkpoints/latest                             "step_000123\n"
//
// A checkpoint directory is written whole into step_000123.tmp, fsynced and
// renamed into place; only then is `latest` replaced (atomically) and are old
// checkpoints pruned. After a crash at any point, `latest` names a complete
// checkpoint (stale .tmp directories are ignored and cleaned up by the next save).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/token_shard.hpp"

namespace gc::rt {

// What state.json records of one tensor file (format_version 2).
struct FileFingerprint {
  std::uint64_t bytes = 0;
  std::string sha256;
};

struct CheckpointState {
  std::int64_t step = 0;
  std::map<std::string, DataPosition> data;  // e.g. "train" -> reader position
  std::uint64_t seed = 0;
  std::string rng_state;  // the trainer's serialized RNG state
  std::string spec_hash;
  std::string gcompile_version;
  nlohmann::json extra = nlohmann::json::object();  // anything else the trainer needs
  std::map<std::string, FileFingerprint> files;      // read from state.json; save computes them
};

// One parameter's buffers (numel(shape) floats each). exp_avg and exp_avg_sq
// may be null: that parameter then has no optimizer state saved or loaded.
struct ParamBuffers {
  std::string name;
  std::vector<std::int64_t> shape;
  float* weight = nullptr;
  float* exp_avg = nullptr;
  float* exp_avg_sq = nullptr;
};

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kStateFile = "state.json";

std::string checkpoints_dir(const std::string& run_dir);  // RUN/checkpoints
std::string checkpoint_dir_name(std::int64_t step);       // step_000123

// Writes the checkpoint for state.step atomically, points `latest` at it, then
// deletes all but the `keep_last` most recent checkpoints (by step; the one
// just written is always kept; keep_last <= 0 keeps all). Returns its directory.
std::string save_checkpoint(const std::string& run_dir, const std::vector<ParamBuffers>& params,
                            const CheckpointState& state, int keep_last);

// Complete checkpoint directories of a run, oldest step first.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

// The directory `latest` names (validated), the newest complete checkpoint if
// there is no `latest` file, or nullopt when the run has none.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// The checkpoint PATH names: PATH itself when it holds state.json, else the
// latest checkpoint of the run directory PATH. Errors name PATH.
std::string resolve_checkpoint(const std::string& path);

// Parses DIR/state.json (strict; errors name the file and the field).
CheckpointState read_checkpoint_state(const std::string& checkpoint_dir);

// Checks each tensor file against the size and SHA-256 state.json records
// (none for format_version 1); throws RuntimeError naming the damaged file.
void verify_checkpoint_files(const std::string& checkpoint_dir, const CheckpointState& state);

// Verifies the files (verify_checkpoint_files), validates, then loads: the spec hash must equal `spec_hash` (unless it is
// empty), every parameter must be present with its shape (and no unknown
// tensor may be), and optimizer state is loaded for parameters that have
// exp_avg buffers. Nothing is copied into the buffers unless all checks pass.
CheckpointState load_checkpoint(const std::string& checkpoint_dir, const std::vector<ParamBuffers>& params,
                                const std::string& spec_hash);

}  // namespace gc::rt
