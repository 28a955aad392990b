#include "runtime/checkpoint.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/sha256.hpp"

namespace gc::rt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// 2: state.json records each tensor file's size and SHA-256 ("files"), and
// loading verifies them. 1 (no "files") still loads, unverified.
constexpr int kStateFormatVersion = 2;

std::string join(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

// "step_000123" -> 123; nullopt for anything else.
std::optional<std::int64_t> parse_dir_step(const std::string& name) {
  if (name.size() <= 5 || name.compare(0, 5, "step_") != 0 || name.size() > 5 + 18) return std::nullopt;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_complete(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(join(dir, kStateFile), ec);
}

std::string short_hash(const std::string& h) { return h.size() > 12 ? h.substr(0, 12) + "\u2026" : h; }

// --- state.json ------------------------------------------------------------

json position_json(const DataPosition& p) {
  return {{"shard", p.shard}, {"shard_name", p.shard_name}, {"offset", p.offset}, {"epoch", p.epoch}};
}

// Size and SHA-256 of each tensor file of a checkpoint directory.
json file_fingerprints(const std::string& dir) {
  json files = json::object();
  for (const char* name : {kModelFile, kOptimizerFile}) {
    const std::string path = join(dir, name);
    std::error_code ec;
    files[name] = {{"bytes", fs::file_size(path, ec)}, {"sha256", sha256_file_hex(path)}};
  }
  return files;
}

std::string state_text(const CheckpointState& s, std::size_t n_params, const json& files) {
  json data = json::object();
  for (const auto& [name, pos] : s.data) data[name] = position_json(pos);
  const json j = {{"format_version", kStateFormatVersion},
                  {"files", files},
                  {"step", s.step},
                  {"spec_hash", s.spec_hash},
                  {"gcompile_version", s.gcompile_version},
                  {"seed", s.seed},
                  {"rng_state", s.rng_state},
                  {"data", data},
                  {"parameters", n_params},
                  {"extra", s.extra}};
  return j.dump(2) + "\n";
}

struct Fields {
  const std::string& file;
  const json& obj;
  std::string prefix;  // "data.train." for nested objects

  const json& at(const char* key) const {
    const auto it = obj.find(key);
    if (it == obj.end()) throw RuntimeError(file, "missing \"" + prefix + key + "\"");
    return *it;
  }
  [[noreturn]] void bad(const char* key, const char* what) const {
    throw RuntimeError(file, "\"" + prefix + key + "\" is not " + what + ": " + at(key).dump());
  }
  std::int64_t integer(const char* key) const {
    if (!at(key).is_number_integer()) bad(key, "an integer");
    return at(key).get<std::int64_t>();
  }
  std::uint64_t uinteger(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0)) {
      bad(key, "a non-negative integer");
    }
    return v.get<std::uint64_t>();
  }
  std::string string(const char* key) const {
    if (!at(key).is_string()) bad(key, "a string");
    return at(key).get<std::string>();
  }
  const json& object(const char* key) const {
    if (!at(key).is_object()) bad(key, "an object");
    return at(key);
  }
};

DataPosition parse_position(const std::string& file, const std::string& name, const json& v) {
  if (!v.is_object()) throw RuntimeError(file, "\"data." + name + "\" is not an object: " + v.dump());
  const Fields f{file, v, "data." + name + "."};
  DataPosition p;
  p.shard = f.uinteger("shard");
  p.shard_name = f.string("shard_name");
  p.offset = f.uinteger("offset");
  p.epoch = f.uinteger("epoch");
  return p;
}

// --- tensors ---------------------------------------------------------------

std::vector<TensorView> views(const std::vector<ParamBuffers>& params, const char* prefix,
                              float* ParamBuffers::* member) {
  std::vector<TensorView> out;
  for (const auto& p : params) {
    if (p.*member != nullptr) out.push_back({prefix + p.name, Dtype::F32, p.shape, p.*member});
  }
  return out;
}

// One tensor to load: its name in the file, shape and destination.
struct Wanted {
  std::string name;
  const std::vector<std::int64_t>* shape;
  float* out;
};

// Checks presence, shapes and dtypes of everything wanted, and that the file
// holds nothing else; copies only when everything checks out.
void load_tensors(const SafetensorsFile& file, const std::vector<Wanted>& wanted, const std::set<std::string>& known,
                  bool copy) {
  for (const auto& t : file.tensors()) {
    if (!known.count(t.name)) throw tensor_error(file.path(), t.name, "is not a parameter of this model");
  }
  for (const auto& w : wanted) {
    const TensorInfo& t = file.tensor(w.name);
    if (t.shape != *w.shape) {
      throw tensor_error(file.path(), w.name,
                         "shape " + shape_text(t.shape) + " does not match the expected " + shape_text(*w.shape));
    }
    if (t.dtype != Dtype::F32 && t.dtype != Dtype::BF16) {
      throw tensor_error(
          file.path(), w.name,
          std::string("dtype ") + dtype_name(t.dtype) + " cannot be loaded as float (only F32 and BF16 can)");
    }
  }
  if (copy) {
    for (const auto& w : wanted) file.load_f32(w.name, *w.shape, w.out);
  }
}

std::vector<Wanted> wanted(const std::vector<ParamBuffers>& params, const char* prefix, float* ParamBuffers::* member) {
  std::vector<Wanted> out;
  for (const auto& p : params) {
    if (p.*member != nullptr) out.push_back({prefix + p.name, &p.shape, p.*member});
  }
  return out;
}

// Every name a file may hold: PREFIX + NAME for each parameter.
std::set<std::string> known_names(const std::vector<ParamBuffers>& params, std::vector<std::string> prefixes) {
  std::set<std::string> out;
  for (const auto& prefix : prefixes) {
    for (const auto& p : params) out.insert(prefix + p.name);
  }
  return out;
}

void prune(const std::string& run_dir, const std::string& keep_dir, int keep_last) {
  std::error_code ec;
  // Stale temporaries of crashed saves (only one writer saves at a time).
  for (fs::directory_iterator it(checkpoints_dir(run_dir), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const auto dot = name.find('.');
    if (dot != std::string::npos && parse_dir_step(name.substr(0, dot)) &&
        (name.substr(dot) == ".tmp" || name.substr(dot) == ".old")) {
      fs::remove_all(it->path(), ec);
    }
  }
  if (keep_last <= 0) return;
  std::vector<std::string> all = list_checkpoints(run_dir);
  all.erase(std::remove(all.begin(), all.end(), keep_dir), all.end());
  const std::size_t keep_others = std::size_t(keep_last - 1);
  for (std::size_t i = 0; i + keep_others < all.size(); ++i) fs::remove_all(all[i], ec);
}

}  // namespace

std::string checkpoints_dir(const std::string& run_dir) { return join(run_dir, "checkpoints"); }

std::string checkpoint_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%06lld", static_cast<long long>(step));
  return buf;
}

std::string save_checkpoint(const std::string& run_dir, const std::vector<ParamBuffers>& params,
                            const CheckpointState& state, int keep_last) {
  const std::string root = checkpoints_dir(run_dir);
  if (state.step < 0)
    throw RuntimeError(root, "cannot save a checkpoint for negative step " + std::to_string(state.step));
  for (const auto& p : params) {
    if (p.weight == nullptr) throw RuntimeError(root, "parameter '" + p.name + "' has no weight buffer");
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw RuntimeError(root, "cannot create directory: " + ec.message());
  const std::string name = checkpoint_dir_name(state.step);
  const std::string dir = join(root, name);
  const std::map<std::string, std::string> meta = {{"step", std::to_string(state.step)},
                                                   {"spec_hash", state.spec_hash}};
  replace_dir_atomic(dir, [&](const std::string& tmp) {
    write_safetensors(join(tmp, kModelFile), views(params, "", &ParamBuffers::weight), meta);
    auto opt = views(params, "exp_avg.", &ParamBuffers::exp_avg);
    const auto sq = views(params, "exp_avg_sq.", &ParamBuffers::exp_avg_sq);
    opt.insert(opt.end(), sq.begin(), sq.end());
    write_safetensors(join(tmp, kOptimizerFile), opt, meta);
    // Last: state.json marks the checkpoint complete and fingerprints the tensors.
    write_file_atomic(join(tmp, kStateFile), state_text(state, params.size(), file_fingerprints(tmp)));
  });
  write_file_atomic(join(root, "latest"), name + "\n");
  prune(run_dir, dir, keep_last);
  return dir;
}

std::vector<std::string> list_checkpoints(const std::string& run_dir) {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(checkpoints_dir(run_dir), ec), end; !ec && it != end; it.increment(ec)) {
    const auto step = parse_dir_step(it->path().filename().string());
    if (step && is_complete(it->path().string())) found.emplace_back(*step, it->path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const std::string latest = join(checkpoints_dir(run_dir), "latest");
  std::error_code ec;
  if (!fs::exists(latest, ec)) {
    const auto all = list_checkpoints(run_dir);
    if (all.empty()) return std::nullopt;
    return all.back();
  }
  std::string name = read_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (!parse_dir_step(name)) throw RuntimeError(latest, "does not name a checkpoint directory: " + quote_text(name));
  const std::string dir = join(checkpoints_dir(run_dir), name);
  if (!is_complete(dir)) throw RuntimeError(latest, "names " + name + ", which is not a complete checkpoint");
  return dir;
}

CheckpointState read_checkpoint_state(const std::string& checkpoint_dir) {
  const std::string file = join(checkpoint_dir, kStateFile);
  json j;
  try {
    j = json::parse(read_file(file));
  } catch (const json::parse_error& e) {
    throw RuntimeError(file, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw RuntimeError(file, "not a JSON object");
  const Fields f{file, j, ""};
  const std::int64_t version = f.integer("format_version");
  if (version != kStateFormatVersion && version != 1) {
    throw RuntimeError(file, "unsupported format_version " + j["format_version"].dump() + " (expected 1 or " +
                                 std::to_string(kStateFormatVersion) + ")");
  }
  CheckpointState s;
  if (version >= 2) {
    for (const auto& [name, fp] : f.object("files").items()) {
      const Fields ff{file, fp, "files." + name + "."};
      if (!fp.is_object()) throw RuntimeError(file, "\"files." + name + "\" is not an object: " + fp.dump());
      const std::string hash = ff.string("sha256");
      if (hash.size() != 64 || hash.find_first_not_of("0123456789abcdef") != std::string::npos) {
        ff.bad("sha256", "64 lowercase hex digits");
      }
      s.files[name] = {ff.uinteger("bytes"), hash};
    }
    for (const char* name : {kModelFile, kOptimizerFile}) {
      if (!s.files.count(name)) throw RuntimeError(file, std::string("missing \"files.") + name + "\"");
    }
  }
  s.step = f.integer("step");
  s.spec_hash = f.string("spec_hash");
  s.gcompile_version = f.string("gcompile_version");
  s.seed = f.uinteger("seed");
  s.rng_state = f.string("rng_state");
  for (const auto& [name, pos] : f.object("data").items()) s.data[name] = parse_position(file, name, pos);
  s.extra = f.object("extra");
  const std::string dir_name = fs::path(checkpoint_dir).lexically_normal().filename().string();
  const auto dir_step = parse_dir_step(dir_name);
  if (dir_step && *dir_step != s.step) {
    throw RuntimeError(file, "step " + std::to_string(s.step) + " does not match the directory name " + dir_name);
  }
  return s;
}

void verify_checkpoint_files(const std::string& checkpoint_dir, const CheckpointState& state) {
  for (const auto& [name, fp] : state.files) {
    const std::string path = join(checkpoint_dir, name);
    std::error_code ec;
    const std::uintmax_t bytes = fs::file_size(path, ec);
    if (ec) throw RuntimeError(path, "cannot read the checkpoint file: " + ec.message());
    if (bytes != fp.bytes) {
      throw RuntimeError(path, "is corrupted: " + std::to_string(bytes) + " bytes, but state.json records " +
                                   std::to_string(fp.bytes) + " (resume an older checkpoint with --checkpoint)");
    }
    const std::string actual = sha256_file_hex(path);
    if (actual != fp.sha256) {
      throw RuntimeError(path, "is corrupted: its SHA-256 " + short_hash(actual) + " differs from " +
                                   short_hash(fp.sha256) + " recorded in state.json (resume an older checkpoint "
                                   "with --checkpoint)");
    }
  }
}

CheckpointState load_checkpoint(const std::string& checkpoint_dir, const std::vector<ParamBuffers>& params,
                                const std::string& spec_hash) {
  CheckpointState state = read_checkpoint_state(checkpoint_dir);
  verify_checkpoint_files(checkpoint_dir, state);
  if (!spec_hash.empty() && state.spec_hash != spec_hash) {
    throw RuntimeError("checkpoint " + checkpoint_dir + " was written by a different spec (hash " +
                       short_hash(state.spec_hash) + " in the checkpoint vs " + short_hash(spec_hash) +
                       " for this spec)");
  }
  const SafetensorsFile model = read_safetensors(join(checkpoint_dir, kModelFile));
  const auto model_wanted = wanted(params, "", &ParamBuffers::weight);
  const auto model_known = known_names(params, {""});
  const auto opt_known = known_names(params, {"exp_avg.", "exp_avg_sq."});
  load_tensors(model, model_wanted, model_known, false);
  auto opt_wanted = wanted(params, "exp_avg.", &ParamBuffers::exp_avg);
  const auto sq_wanted = wanted(params, "exp_avg_sq.", &ParamBuffers::exp_avg_sq);
  opt_wanted.insert(opt_wanted.end(), sq_wanted.begin(), sq_wanted.end());
  std::optional<SafetensorsFile> opt;
  if (!opt_wanted.empty()) {
    opt = read_safetensors(join(checkpoint_dir, kOptimizerFile));
    load_tensors(*opt, opt_wanted, opt_known, false);
  }
  load_tensors(model, model_wanted, model_known, true);
  if (opt) load_tensors(*opt, opt_wanted, opt_known, true);
  return state;
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) throw RuntimeError(path, "no such checkpoint or run directory");
  if (std::filesystem::exists(std::filesystem::path(path) / kStateFile, ec)) return path;
  if (auto latest = latest_checkpoint(path)) return *latest;
  throw RuntimeError(path, "neither a checkpoint directory (no state.json) nor a run directory with a checkpoint");
}

}  // namespace gc::rt
