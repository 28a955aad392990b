// Data collection for `gcompile report`: reads run directories written by a
// generated `train` program (metrics.jsonl, spec.resolved.toml, images, token
// comparisons) into series the page renders. Errors throw ReportError with a
// message that names the path (and line, where there is one).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "report/axis.hpp"

namespace gc::report {

struct ReportError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Orders strings with embedded numbers by value: "2" < "10", "layers.2.x" < "layers.10.x".
struct NaturalLess {
  bool operator()(const std::string& a, const std::string& b) const;
};

// (step, value) points, in log order.
using Series = std::vector<Point>;
// One series per key of a keyed metric ("0", "1", ..., "final").
using KeyedSeries = std::map<std::string, Series, NaturalLess>;

// A `cosine_image` record and its PNG (empty with `problem` set when unusable).
struct CosineImage {
  std::int64_t step = 0;
  std::string tensor;
  std::string path;  // as recorded, relative to the run directory
  std::int64_t rows = 0;
  std::string png;
  std::string problem;
};

struct RunData {
  std::string dir;    // as given on the command line
  std::string label;  // experiment.name (or the directory name), unique among the runs
  // spec.resolved.toml flattened to dotted keys, in file order; empty if absent.
  std::vector<std::pair<std::string, std::string>> spec;
  Series loss, val_loss, lr, grad_norm, tokens_per_s;
  std::optional<std::int64_t> nonfinite_step;
  // Scalar metrics by name ("residual_flow"), plus numeric extra fields as
  // "NAME.FIELD" ("initial_loss.log_vocab", "embedding_cosine.mean").
  std::map<std::string, Series> scalars;
  // Keyed metrics by name ("sink_score"), plus object-valued extra fields as
  // "NAME.FIELD" ("rmsnorm_factor.eps_free", "stable_rank.sigma_max").
  std::map<std::string, KeyedSeries> keyed;
  std::vector<CosineImage> images;
  // MoE: assignments per expert by layer ("1": [...]) at the last moe_routing record.
  std::map<std::string, std::vector<double>> expert_load;
  std::int64_t expert_load_step = -1;
  std::vector<std::string> compare_files;  // RUN/*.compare.json, sorted
  std::int64_t last_step = 0;
  std::size_t records = 0;

  const std::string* spec_value(const std::string& key) const;
};

// Reads one run directory. Throws ReportError for a missing directory, a
// missing or malformed metrics.jsonl, or a malformed spec.resolved.toml.
RunData load_run(const std::string& dir);
// Reads every run and makes the labels unique ("name (dir)").
std::vector<RunData> load_runs(const std::vector<std::string>& dirs);

// TOML text → flat dotted keys with display values, in source order.
// Throws ReportError naming `source_name`, line and column on a syntax error.
std::vector<std::pair<std::string, std::string>> flatten_toml(const std::string& text, const std::string& source_name);

// The spec table: keys whose values differ across runs (absent = "—"), or
// for a single run a few headline settings.
struct SpecTable {
  bool differences = false;  // true: keys that differ; false: headline settings
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;  // [key][run]
};
SpecTable spec_table(const std::vector<RunData>& runs);

// "model.layers.3.self_attn.q_proj.weight" → layer 3, group "self_attn.q_proj".
// Names without a layer index keep layer -1 and their name (without ".weight") as group.
struct TensorName {
  int layer = -1;
  std::string group;
};
TensorName split_tensor_name(const std::string& name);

// A keyed metric over tensor names regrouped by matrix type: group → layer → series,
// groups in model order (q, k, v, o, attention gate, MLP gate, up, down, others by name).
struct MatrixGroup {
  std::string group;       // "self_attn.q_proj"
  std::string short_name;  // "q_proj" (the full group when the short one would be ambiguous)
  std::map<int, Series> layers;
};
std::vector<MatrixGroup> group_by_matrix(const KeyedSeries& by_tensor);

// The values of every key at the last (or first) step any key was recorded;
// nullopt when the metric has no finite record.
struct Snapshot {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, double>> values;  // NaturalLess key order
};
std::optional<Snapshot> last_snapshot(const KeyedSeries& metric);
std::optional<Snapshot> first_snapshot(const KeyedSeries& metric);

// Per key and step: numerator / denominator where both were recorded.
KeyedSeries ratio(const KeyedSeries& numerator, const KeyedSeries& denominator);
// Per step: the mean over keys of the finite values.
Series mean_over_keys(const KeyedSeries& metric);
// The last finite y of a series.
std::optional<double> last_finite(const Series& s);

// Keys that are layer indices ("0", "12") as integers; -1 otherwise.
int layer_index(const std::string& key);

}  // namespace gc::report
