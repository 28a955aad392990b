// Specialization, cached by content. Parsing the templates with Clang costs
// about 15 s a tree; the trees of a sweep over γ, the seed or the experiment
// name share every specialized template except experiment.cpp (the knobs that
// name the experiment, its seed and its data). So the templates are
// specialized in two groups:
//   - the code: every template but experiment.cpp, cached under
//     <user cache>/specialized/KEY.json, where KEY hashes everything the
//     output depends on: gcompile's own binary (size and mtime), the toolchain,
//     every template and runtime text, the banner-free plan.hpp, and the value
//     of each knob key that appears in those templates;
//   - experiment.cpp: specialized every time (one small parse).
// A cache entry is written atomically; an unreadable one is ignored.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/cache_dir.hpp"
#include "common/version.hpp"
#include "emit/emit.hpp"

namespace gc {

namespace fs = std::filesystem;

std::set<std::string> knob_keys_in(const std::string& text) {
  std::set<std::string> keys;
  for (std::size_t at = text.find("knob<"); at != std::string::npos; at = text.find("knob<", at + 5)) {
    const std::size_t open = text.find('(', at);
    const std::size_t quote = open == std::string::npos ? open : text.find('"', open);
    const std::size_t end = quote == std::string::npos ? quote : text.find('"', quote + 1);
    if (end != std::string::npos) keys.insert(text.substr(quote + 1, end - quote - 1));
  }
  return keys;
}

namespace {

constexpr const char* kExperimentTemplate = "experiment.cpp";

std::string binary_identity() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "unknown";
  const auto size = fs::file_size(self, ec);
  const auto mtime = fs::last_write_time(self, ec).time_since_epoch().count();
  return self.string() + "\n" + std::to_string(size) + "\n" + std::to_string(mtime);
}

std::string cache_key(const std::vector<TemplateFile>& code, const std::map<std::string, std::string>& runtime,
                      const KnobTable& knobs, const std::map<std::string, std::string>& after_knobs,
                      const Toolchain& toolchain) {
  std::ostringstream m;
  m << "gcompile-specialize-v1\n" << kVersion << "\n" << binary_identity() << "\n";
  m << toolchain.resource_dir << "\n" << toolchain.cuda_path << "\n";
  for (const auto& dir : toolchain.include_dirs) m << dir << "\n";
  std::set<std::string> keys;
  for (const auto& t : code) {
    m << "template " << t.path << " " << sha256_hex(t.text) << "\n";
    const auto found = knob_keys_in(t.text);
    keys.insert(found.begin(), found.end());
  }
  for (const auto& [path, text] : runtime) m << "runtime " << path << " " << sha256_hex(text) << "\n";
  for (const auto& [path, text] : after_knobs) m << "after " << path << " " << sha256_hex(text) << "\n";
  for (const auto& key : keys) {
    const auto it = knobs.find(key);
    m << "knob " << key << " = " << (it == knobs.end() ? std::string("<absent>") : it->second.to_toml()) << "\n";
  }
  return sha256_hex(m.str());
}

std::optional<SpecializeResult> read_entry(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("files") || !j.contains("used_knobs")) return std::nullopt;
  SpecializeResult r;
  try {
    for (const auto& f : j["files"]) r.files.push_back({f.at("path").get<std::string>(), f.at("text").get<std::string>()});
    for (const auto& k : j["used_knobs"]) r.used_knobs.insert(k.get<std::string>());
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return r;
}

void write_entry(const fs::path& file, const SpecializeResult& r) {
  nlohmann::json j;
  j["files"] = nlohmann::json::array();
  for (const auto& f : r.files) j["files"].push_back({{"path", f.path}, {"text", f.text}});
  j["used_knobs"] = r.used_knobs;
  std::error_code ec;
  fs::create_directories(file.parent_path(), ec);
  const fs::path tmp = file.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary);
    out << j.dump();
    if (!out) {
      fs::remove(tmp, ec);
      return;  // a cache that cannot be written only costs time
    }
  }
  fs::rename(tmp, file, ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace

std::optional<SpecializeResult> specialize_templates(const std::vector<TemplateFile>& templates,
                                                     const std::map<std::string, std::string>& runtime,
                                                     const KnobTable& knobs,
                                                     const std::map<std::string, std::string>& after_knobs,
                                                     const Toolchain& toolchain, Diagnostics& diags) {
  const std::string root = "/gcompile/templates";
  std::vector<TemplateFile> code, experiment;
  for (const auto& t : templates) (t.path == kExperimentTemplate ? experiment : code).push_back(t);

  const fs::path entry = user_cache_dir() / "specialized" / (cache_key(code, runtime, knobs, after_knobs, toolchain) + ".json");
  std::optional<SpecializeResult> result = read_entry(entry);
  if (!result) {
    result = specialize(code, root, "templates", knobs, toolchain, diags, runtime, after_knobs);
    if (!result) return std::nullopt;
    write_entry(entry, *result);
  }
  // experiment.cpp sees the other templates as they are (it reads nothing of
  // theirs but declarations).
  std::map<std::string, std::string> visible = runtime;
  for (const auto& t : code) visible[root + "/" + t.path] = t.text;
  const auto named = specialize(experiment, root, "templates", knobs, toolchain, diags, visible);
  if (!named) return std::nullopt;
  result->files.insert(result->files.end(), named->files.begin(), named->files.end());
  result->used_knobs.insert(named->used_knobs.begin(), named->used_knobs.end());
  return result;
}

}  // namespace gc
