#include "report/report.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/text.hpp"
#include "report/png.hpp"
#include "runtime/png.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics_log.hpp"

namespace gc::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::uintmax_t kMaxImageBytes = 16u << 20;
constexpr int kThumbnailSide = 192;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A JSON number as double; null (a value the log could not represent) is NaN.
std::optional<double> number_of(const json& v) {
  if (v.is_number()) return v.get<double>();
  if (v.is_null()) return kNaN;
  return std::nullopt;
}

void add_point(Series& s, double step, const json& v) {
  if (auto x = number_of(v)) s.push_back({step, *x});
}

// Adds the numeric members of `object`; creates the metric only if there is one.
void add_keyed(std::map<std::string, KeyedSeries>& keyed, const std::string& name, double step, const json& object) {
  for (const auto& [key, v] : object.items()) {
    if (auto x = number_of(v)) keyed[name][key].push_back({step, *x});
  }
}

void add_training_record(RunData& run, double step, const json& r) {
  if (r.contains("loss")) add_point(run.loss, step, r["loss"]);
  if (r.contains("lr")) add_point(run.lr, step, r["lr"]);
  if (r.contains("grad_norm")) add_point(run.grad_norm, step, r["grad_norm"]);
  if (r.contains("tokens_per_s")) add_point(run.tokens_per_s, step, r["tokens_per_s"]);
}

void add_metric_record(RunData& run, std::int64_t step, const json& r) {
  const auto name_it = r.find("metric");
  if (!name_it->is_string()) return;
  const std::string name = name_it->get<std::string>();
  const double x = double(step);
  if (name == "cosine_image") {
    CosineImage image;
    image.step = step;
    image.tensor = r.value("tensor", std::string());
    image.path = r.value("path", std::string());
    if (r.contains("rows") && r["rows"].is_number_integer()) image.rows = r["rows"].get<std::int64_t>();
    run.images.push_back(std::move(image));
    return;
  }
  if (name == "moe_routing" && r.contains("load") && r["load"].is_object() && step >= run.expert_load_step) {
    run.expert_load.clear();
    for (const auto& [layer, counts] : r["load"].items()) {
      if (!counts.is_array()) continue;
      std::vector<double>& row = run.expert_load[layer];
      for (const auto& c : counts) row.push_back(c.is_number() ? c.get<double>() : kNaN);
    }
    run.expert_load_step = step;
  }
  for (const auto& [field, v] : r.items()) {
    if (field == "step" || field == "metric") continue;
    const std::string series = field == "value" || field == "values" ? name : name + "." + field;
    if (v.is_object()) {
      add_keyed(run.keyed, series, x, v);
    } else if (v.is_number() || (v.is_null() && field == "value")) {
      add_point(run.scalars[series], x, v);
    }
  }
}

void add_record(RunData& run, const json& r, const std::string& where) {
  const auto step_it = r.find("step");
  if (step_it == r.end() || !step_it->is_number_integer()) {
    throw ReportError(where + ": record has no integer \"step\": " + rt::quote_text(r.dump()));
  }
  const std::int64_t step = step_it->get<std::int64_t>();
  run.last_step = std::max(run.last_step, step);
  if (r.contains("event")) {
    if (r["event"] == "nonfinite" && !run.nonfinite_step) run.nonfinite_step = step;
  } else if (r.contains("metric")) {
    add_metric_record(run, step, r);
  } else {
    add_training_record(run, double(step), r);
    if (r.contains("val_loss")) add_point(run.val_loss, double(step), r["val_loss"]);
  }
}

bool escapes_directory(const fs::path& rel) {
  if (rel.empty() || rel.is_absolute()) return true;
  return std::any_of(rel.begin(), rel.end(), [](const fs::path& part) { return part == ".."; });
}

void load_image(const fs::path& run_dir, CosineImage& image) {
  const fs::path rel(image.path);
  if (escapes_directory(rel)) {
    image.problem = "path '" + image.path + "' is not inside the run directory";
    return;
  }
  const fs::path file = run_dir / rel;
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) {
    image.problem = "missing file " + image.path;
    return;
  }
  if (fs::file_size(file, ec) > kMaxImageBytes) {
    image.problem = image.path + " is larger than 16 MiB";
    return;
  }
  std::string bytes = rt::read_file(file.string());
  int width = 0, height = 0;
  if (!png_dimensions(bytes, width, height)) {
    image.problem = image.path + " is not a PNG file";
    return;
  }
  // Thumbnails: at most kThumbnailSide pixels a side (the page shows them
  // smaller), zlib-compressed also when the tree that wrote them had no zlib,
  // so the page stays small enough to mail. The run keeps the full images.
  image.png = rt::compress_png(bytes, kThumbnailSide);
  if (image.rows <= 0) image.rows = height;
}

std::vector<std::string> find_compare_files(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string suffix = ".compare.json";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        entry.is_regular_file(ec)) {
      out.push_back(entry.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string directory_name(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  const std::string name = p.filename().string();
  return name.empty() || name == "." ? fs::absolute(p).lexically_normal().filename().string() : name;
}

std::string toml_display(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return format_double(f->get());
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* a = node.as_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < a->size(); ++i) {
      const toml::node& item = *a->get(i);
      out += (i ? ", " : "") + (item.is_string() ? "\"" + toml_display(item) + "\"" : toml_display(item));
    }
    return out + "]";
  }
  std::ostringstream os;  // dates and times
  node.visit([&os](const auto& leaf) { os << leaf; });
  return os.str();
}

struct FlatEntry {
  std::uint32_t line, column;
  std::string key, value;
};

void flatten_table(const toml::table& table, const std::string& prefix, std::vector<FlatEntry>& out) {
  for (const auto& [key, node] : table) {
    const std::string path = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const auto* sub = node.as_table()) {
      flatten_table(*sub, path, out);
    } else {
      out.push_back({key.source().begin.line, key.source().begin.column, path, toml_display(node)});
    }
  }
}

// Steps at which a keyed metric has a finite value, ascending.
std::set<double> recorded_steps(const KeyedSeries& metric) {
  std::set<double> steps;
  for (const auto& [key, series] : metric) {
    for (const Point& p : series) {
      if (std::isfinite(p.y)) steps.insert(p.x);
    }
  }
  return steps;
}

Snapshot snapshot_at(const KeyedSeries& metric, double step) {
  Snapshot snap;
  snap.step = std::int64_t(step);
  for (const auto& [key, series] : metric) {
    for (auto it = series.rbegin(); it != series.rend(); ++it) {
      if (it->x == step) {
        snap.values.emplace_back(key, it->y);
        break;
      }
    }
  }
  return snap;
}

int group_rank(const std::string& group) {
  auto ends_with = [&](const std::string& s) {
    return group.size() >= s.size() && group.compare(group.size() - s.size(), s.size(), s) == 0;
  };
  const bool attention = group.find("attn") != std::string::npos;
  if (ends_with("q_proj")) return 0;
  if (ends_with("k_proj")) return 1;
  if (ends_with("v_proj")) return 2;
  if (ends_with("o_proj")) return 3;
  if (ends_with("gate_proj")) return attention ? 4 : 5;
  if (ends_with("up_proj")) return 6;
  if (ends_with("down_proj")) return 7;
  return 8;
}

std::string last_component(const std::string& group) {
  const auto dot = group.rfind('.');
  return dot == std::string::npos ? group : group.substr(dot + 1);
}

}  // namespace

bool NaturalLess::operator()(const std::string& a, const std::string& b) const {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (is_digit(a[i]) && is_digit(b[j])) {
      std::size_t i_end = i, j_end = j;
      while (i_end < a.size() && is_digit(a[i_end])) ++i_end;
      while (j_end < b.size() && is_digit(b[j_end])) ++j_end;
      std::string_view na(a.data() + i, i_end - i), nb(b.data() + j, j_end - j);
      while (na.size() > 1 && na[0] == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb[0] == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = i_end;
      j = j_end;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal up to leading zeros: keep a strict, total order
}

const std::string* RunData::spec_value(const std::string& key) const {
  for (const auto& [k, v] : spec) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::vector<std::pair<std::string, std::string>> flatten_toml(const std::string& text, const std::string& source_name) {
  toml::table root;
  try {
    root = toml::parse(text, source_name);
  } catch (const toml::parse_error& e) {
    throw ReportError(source_name + ":" + std::to_string(e.source().begin.line) + ":" +
                      std::to_string(e.source().begin.column) + ": malformed TOML: " + std::string(e.description()));
  }
  std::vector<FlatEntry> entries;
  flatten_table(root, "", entries);
  std::stable_sort(entries.begin(), entries.end(), [](const FlatEntry& a, const FlatEntry& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  std::vector<std::pair<std::string, std::string>> out;
  for (auto& e : entries) out.emplace_back(std::move(e.key), std::move(e.value));
  return out;
}

RunData load_run(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw ReportError(dir + ": no such run directory");
  if (!fs::is_directory(dir, ec)) throw ReportError(dir + ": not a directory (expected a run directory)");
  const fs::path root(dir);
  const std::string metrics = (root / "metrics.jsonl").string();
  if (!fs::is_regular_file(metrics, ec)) {
    throw ReportError(metrics + ": no metrics log (is " + dir + " a run directory written by train?)");
  }
  RunData run;
  run.dir = dir;
  std::vector<json> records;
  try {
    records = rt::read_metrics_log(metrics);
  } catch (const rt::RuntimeError& e) {
    throw ReportError(e.what());
  }
  for (std::size_t i = 0; i < records.size(); ++i) {
    add_record(run, records[i], metrics + ": line " + std::to_string(i + 1));
  }
  run.records = records.size();
  const fs::path spec = root / "spec.resolved.toml";
  if (fs::is_regular_file(spec, ec)) run.spec = flatten_toml(rt::read_file(spec.string()), spec.string());
  const std::string* name = run.spec_value("experiment.name");
  run.label = name && !name->empty() ? *name : directory_name(dir);
  for (CosineImage& image : run.images) load_image(root, image);
  run.compare_files = find_compare_files(root);
  return run;
}

std::vector<RunData> load_runs(const std::vector<std::string>& dirs) {
  std::vector<RunData> runs;
  for (const auto& dir : dirs) runs.push_back(load_run(dir));
  auto count = [&](const std::string& label) {
    return std::count_if(runs.begin(), runs.end(), [&](const RunData& r) { return r.label == label; });
  };
  std::vector<std::string> labels;
  for (const auto& run : runs) {
    labels.push_back(count(run.label) > 1 ? run.label + " (" + directory_name(run.dir) + ")" : run.label);
  }
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const bool still_duplicate = std::count(labels.begin(), labels.end(), labels[i]) > 1;
    runs[i].label = still_duplicate ? labels[i] + " #" + std::to_string(i + 1) : labels[i];
  }
  return runs;
}

SpecTable spec_table(const std::vector<RunData>& runs) {
  SpecTable table;
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const auto& run : runs) {
    for (const auto& [key, value] : run.spec) {
      if (seen.insert(key).second) keys.push_back(key);
    }
  }
  auto value_of = [](const RunData& run, const std::string& key) {
    const std::string* v = run.spec_value(key);
    return v ? *v : std::string("—");
  };
  table.differences = runs.size() > 1;
  if (!table.differences) {
    static const std::set<std::string> kHeadline = {"experiment.description",
                                                    "model.vocab_size",
                                                    "model.d_model",
                                                    "model.n_layers",
                                                    "model.n_heads",
                                                    "model.n_kv_heads",
                                                    "model.d_ff",
                                                    "model.norm_eps",
                                                    "model.norm_placement",
                                                    "model.embedding_norm",
                                                    "model.gated_attention",
                                                    "model.tie_embeddings",
                                                    "optim.lr",
                                                    "optim.weight_decay",
                                                    "train.steps",
                                                    "train.seq_len",
                                                    "train.global_batch",
                                                    "train.precision"};
    std::vector<std::string> chosen;
    for (const auto& key : keys) {
      if (kHeadline.count(key) || key.rfind("init.", 0) == 0) chosen.push_back(key);
    }
    keys = chosen;
  }
  for (const auto& key : keys) {
    std::vector<std::string> values;
    for (const auto& run : runs) values.push_back(value_of(run, key));
    const bool all_same =
        std::all_of(values.begin(), values.end(), [&](const std::string& v) { return v == values[0]; });
    if (table.differences && all_same) continue;
    table.keys.push_back(key);
    table.values.push_back(std::move(values));
  }
  return table;
}

TensorName split_tensor_name(const std::string& name) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (parts.size() > 1 && parts.back() == "weight") parts.pop_back();
  TensorName out;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    const int layer = layer_index(parts[i]);
    if (layer < 0) continue;
    out.layer = layer;
    out.group = join(std::vector<std::string>(parts.begin() + std::ptrdiff_t(i) + 1, parts.end()), ".");
    return out;
  }
  if (parts.size() > 1 && parts.front() == "model") parts.erase(parts.begin());
  out.group = join(parts, ".");
  return out;
}

std::vector<MatrixGroup> group_by_matrix(const KeyedSeries& by_tensor) {
  std::map<std::string, MatrixGroup> groups;
  for (const auto& [name, series] : by_tensor) {
    const TensorName t = split_tensor_name(name);
    MatrixGroup& g = groups[t.group];
    g.group = t.group;
    g.layers[t.layer] = series;
  }
  std::vector<MatrixGroup> out;
  for (auto& [name, g] : groups) out.push_back(std::move(g));
  std::stable_sort(out.begin(), out.end(), [](const MatrixGroup& a, const MatrixGroup& b) {
    const bool a_layered = a.layers.begin()->first >= 0, b_layered = b.layers.begin()->first >= 0;
    if (a_layered != b_layered) return a_layered;
    const int ra = group_rank(a.group), rb = group_rank(b.group);
    return ra != rb ? ra < rb : NaturalLess()(a.group, b.group);
  });
  for (auto& g : out) {
    const std::string tail = last_component(g.group);
    const auto same_tail =
        std::count_if(out.begin(), out.end(), [&](const MatrixGroup& o) { return last_component(o.group) == tail; });
    g.short_name = same_tail > 1 ? g.group : tail;
  }
  return out;
}

std::optional<Snapshot> last_snapshot(const KeyedSeries& metric) {
  const std::set<double> steps = recorded_steps(metric);
  if (steps.empty()) return std::nullopt;
  return snapshot_at(metric, *steps.rbegin());
}

std::optional<Snapshot> first_snapshot(const KeyedSeries& metric) {
  const std::set<double> steps = recorded_steps(metric);
  if (steps.empty()) return std::nullopt;
  return snapshot_at(metric, *steps.begin());
}

KeyedSeries ratio(const KeyedSeries& numerator, const KeyedSeries& denominator) {
  KeyedSeries out;
  for (const auto& [key, series] : numerator) {
    const auto d = denominator.find(key);
    if (d == denominator.end()) continue;
    std::map<double, double> by_step;
    for (const Point& p : d->second) by_step[p.x] = p.y;
    for (const Point& p : series) {
      const auto it = by_step.find(p.x);
      if (it != by_step.end()) out[key].push_back({p.x, p.y / it->second});
    }
  }
  return out;
}

Series mean_over_keys(const KeyedSeries& metric) {
  std::map<double, std::pair<double, int>> sums;
  for (const auto& [key, series] : metric) {
    for (const Point& p : series) {
      if (!std::isfinite(p.y)) continue;
      sums[p.x].first += p.y;
      sums[p.x].second += 1;
    }
  }
  Series out;
  for (const auto& [step, sum] : sums) out.push_back({step, sum.first / sum.second});
  return out;
}

std::optional<double> last_finite(const Series& s) {
  for (auto it = s.rbegin(); it != s.rend(); ++it) {
    if (std::isfinite(it->y)) return it->y;
  }
  return std::nullopt;
}

int layer_index(const std::string& key) {
  if (key.empty() || key.size() > 6 || !std::all_of(key.begin(), key.end(), is_digit)) return -1;
  return std::stoi(key);
}

}  // namespace gc::report
