#include "spec/load.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <set>
#include <sstream>

#include <toml++/toml.h>

#include "common/text.hpp"
#include "spec/schema.hpp"

namespace gc {

namespace fs = std::filesystem;

namespace {

SourceLoc loc_of(const toml::source_region& r, const std::string& file) {
  return {file, static_cast<int>(r.begin.line), static_cast<int>(r.begin.column)};
}

enum class FileKind { spec, preset };

// One parsed file, flattened.
struct Layer {
  std::map<std::string, std::string> sources;
  std::map<std::string, Setting> settings;
  std::map<std::string, SourceLoc> sections;
  std::set<std::string> invalid_keys;
  bool base_failed = false;  // a base could not be loaded: its keys are unknown
};

// Line and column (in characters, as toml++ counts) of a byte offset.
SourceLoc position_of(const std::string& text, std::size_t offset, const std::string& file) {
  SourceLoc loc{file, 1, 1};
  std::size_t i = 0, len = 0;
  unsigned cp = 0;
  while (i < offset && i < text.size()) {
    if (text[i] == '\n') {
      ++loc.line;
      loc.col = 1;
      ++i;
      continue;
    }
    i += decode_utf8(text, i, len, cp) ? len : 1;
    ++loc.col;
  }
  return loc;
}

// Diagnostics are one line each: control characters in quoted text are escaped.
std::string escape_controls(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else if (c < 0x20 || c == 0x7f) out += "?";
    else out += static_cast<char>(c);
  }
  return out;
}

std::string describe(const Value& v) {
  if (v.kind == Value::Kind::list) return "array";
  return v.type_name() + " " + v.to_toml();
}

// Converts a TOML leaf to a Value, or reports why it cannot be one.
std::optional<Value> to_value(const toml::node& node, const std::string& file, const std::string& path,
                              Diagnostics& diags) {
  Value v;
  v.loc = loc_of(node.source(), file);
  if (auto x = node.as_boolean()) {
    v.kind = Value::Kind::boolean;
    v.b = x->get();
  } else if (auto x = node.as_integer()) {
    v.kind = Value::Kind::integer;
    v.i = x->get();
  } else if (auto x = node.as_floating_point()) {
    v.kind = Value::Kind::number;
    v.d = x->get();
  } else if (auto x = node.as_string()) {
    v.kind = Value::Kind::string;
    v.s = x->get();
  } else if (auto arr = node.as_array()) {
    v.kind = Value::Kind::list;
    for (const auto& item : *arr) {
      if (item.is_array() || item.is_table()) {
        diags.error(loc_of(item.source(), file), "'" + path + "' must be a flat array (found a nested " +
                                                     std::string(item.is_array() ? "array" : "table") + ")");
        return std::nullopt;
      }
      auto iv = to_value(item, file, path, diags);
      if (!iv) return std::nullopt;
      v.items.push_back(std::move(*iv));
    }
  } else {
    diags.error(v.loc, "'" + path + "' has a date/time value; gcompile specs use no dates");
    return std::nullopt;
  }
  return v;
}

bool check_bounds(const KeySpec& k, double x, const SourceLoc& loc, Diagnostics& diags) {
  if (!std::isfinite(x)) {
    diags.error(loc, "'" + k.path + "' must be a finite number (got " + format_double(x) + ")");
    return false;
  }
  const bool below = k.min && (k.min_exclusive ? x <= *k.min : x < *k.min);
  const bool above = k.max && x > *k.max;
  if (below || above) {
    std::string range;
    if (k.min && k.max) {
      range = "in [" + format_double(*k.min) + ", " + format_double(*k.max) + "]";
    } else if (k.min) {
      range = std::string(k.min_exclusive ? "> " : ">= ") + format_double(*k.min);
    }
    diags.error(loc, "'" + k.path + "' must be " + range + " (got " + format_double(x) + ")");
    return false;
  }
  return true;
}

bool check_choice(const KeySpec& k, const Value& v, Diagnostics& diags) {
  if (k.choices.empty()) return true;
  for (const auto& c : k.choices) {
    if (c == v.s) return true;
  }
  diags.error(v.loc, "'" + k.path + "' has no option \"" + v.s + "\"" + did_you_mean(v.s, k.choices, "\"") +
                         " (options: " + join(k.choices, ", ") + ")");
  return false;
}

bool type_error(const KeySpec& k, const Value& v, const std::string& expected, Diagnostics& diags) {
  diags.error(v.loc, "'" + k.path + "' must be " + expected + ", not " + describe(v));
  return false;
}

// Checks `v` against the key's type and bounds, normalizing integers in
// float keys. Returns false (after reporting) when the value is unusable.
bool normalize(const KeySpec& k, Value& v, Diagnostics& diags) {
  using K = Value::Kind;
  switch (k.type) {
    case KeyType::boolean:
      return v.kind == K::boolean || type_error(k, v, "true or false", diags);
    case KeyType::integer:
      if (v.kind != K::integer) return type_error(k, v, "an integer", diags);
      return check_bounds(k, static_cast<double>(v.i), v.loc, diags);
    case KeyType::number:
      if (v.kind == K::integer) v = [&] { Value n = Value::number(static_cast<double>(v.i)); n.loc = v.loc; return n; }();
      if (v.kind != K::number) return type_error(k, v, "a number", diags);
      return check_bounds(k, v.d, v.loc, diags);
    case KeyType::string:
      return v.kind == K::string || type_error(k, v, "a string", diags);
    case KeyType::choice:
      if (v.kind != K::string) {
        return type_error(k, v, "a string (one of: " + join(k.choices, ", ") + ")", diags);
      }
      return check_choice(k, v, diags);
    case KeyType::formula:
      if (v.kind == K::integer) v = [&] { Value n = Value::number(static_cast<double>(v.i)); n.loc = v.loc; return n; }();
      if (v.kind == K::number) return check_bounds(k, v.d, v.loc, diags);
      return v.kind == K::string || type_error(k, v, "a number or an expression string", diags);
    case KeyType::integer_list:
    case KeyType::number_list:
    case KeyType::choice_list: {
      const char* item_word = k.type == KeyType::integer_list ? "integers"
                              : k.type == KeyType::number_list ? "numbers" : "strings";
      if (v.kind != K::list) return type_error(k, v, std::string("an array of ") + item_word, diags);
      if (k.list_length && static_cast<int>(v.items.size()) != k.list_length) {
        diags.error(v.loc, "'" + k.path + "' must have exactly " + std::to_string(k.list_length) + " items (got " +
                               std::to_string(v.items.size()) + ")");
        return false;
      }
      bool ok = true;
      std::set<std::string> seen;
      for (auto& item : v.items) {
        if (k.type == KeyType::integer_list) {
          if (item.kind != K::integer) {
            diags.error(item.loc, "'" + k.path + "' items must be integers, not " + describe(item));
            ok = false;
          } else {
            ok = check_bounds(k, static_cast<double>(item.i), item.loc, diags) && ok;
          }
        } else if (k.type == KeyType::number_list) {
          if (item.kind == K::integer) item = [&] { Value n = Value::number(static_cast<double>(item.i)); n.loc = item.loc; return n; }();
          if (item.kind != K::number) {
            diags.error(item.loc, "'" + k.path + "' items must be numbers, not " + describe(item));
            ok = false;
          } else {
            ok = check_bounds(k, item.d, item.loc, diags) && ok;
          }
        } else {
          if (item.kind != K::string) {
            diags.error(item.loc, "'" + k.path + "' items must be strings, not " + describe(item));
            ok = false;
            continue;
          }
          ok = check_choice(k, item, diags) && ok;
          if (!seen.insert(item.s).second) {
            diags.error(item.loc, "'" + k.path + "' lists \"" + item.s + "\" twice");
            ok = false;
          }
        }
      }
      return ok;
    }
  }
  return true;
}

class FileLoader {
 public:
  FileLoader(Diagnostics& diags) : diags_(diags) {}

  // Parses and flattens one file. Returns nullopt on a syntax error.
  std::optional<Layer> parse(const std::string& text, const std::string& label, FileKind kind) {
    file_ = label;
    kind_ = kind;
    toml::table root;
    // toml++ reports invalid UTF-8 one character early; find it ourselves.
    if (const std::size_t bad = find_invalid_utf8(text); bad != std::string::npos) {
      diags_.error(position_of(text, bad, label), "TOML syntax: Encountered invalid utf-8 sequence");
      return std::nullopt;
    }
    try {
      root = toml::parse(text, label);
    } catch (const toml::parse_error& e) {
      diags_.error(loc_of(e.source(), label), "TOML syntax: " + escape_controls(std::string(e.description())));
      return std::nullopt;
    }
    Layer layer;
    layer.sources[label] = text;
    flatten(root, "", layer);
    return layer;
  }

 private:
  void flatten(const toml::table& table, const std::string& prefix, Layer& layer) {
    // exclusive group -> the keys of it set in this table, with their locations
    std::map<std::string, std::vector<std::pair<std::string, SourceLoc>>> groups;
    for (const auto& [key, node] : table) {
      const std::string name(key.str());
      const std::string path = prefix.empty() ? name : prefix + "." + name;
      const SourceLoc key_loc = loc_of(key.source(), file_);
      if (const auto* sub = node.as_table()) {
        if (find_key(path)) {
          diags_.error(key_loc, "'" + path + "' is a value, not a section");
          layer.invalid_keys.insert(path);
        } else if (!is_section(path)) {
          report_unknown_section(path, prefix, name, key_loc);
        } else if (check_section_allowed(path, key_loc)) {
          if (!layer.sections.count(path)) layer.sections[path] = loc_of(sub->source(), file_);
          flatten(*sub, path, layer);
        }
        continue;
      }
      const KeySpec* spec = find_key(path);
      if (!spec) {
        if (is_section(path)) {
          diags_.error(key_loc, "'" + path + "' is a section, not a value: write [" + path + "] with keys such as " +
                                    join_choices(first_keys(path)));
        } else {
          report_unknown_key(path, prefix, name, key_loc);
        }
        continue;
      }
      if (kind_ == FileKind::preset && !spec->preset_allowed) {
        diags_.error(key_loc, "'" + path + "' cannot be set by a preset (presets set init rules, lr multipliers "
                                           "and forward scales only)");
        continue;
      }
      auto value = to_value(node, file_, path, diags_);
      if (!value || !normalize(*spec, *value, diags_)) {
        layer.invalid_keys.insert(path);
        continue;
      }
      if (!spec->exclusive_group.empty()) groups[spec->exclusive_group].push_back({path, key_loc});
      layer.settings[path] = Setting{std::move(*value), key_loc};
    }
    // toml++ visits keys by name; report alternatives at the one written later.
    for (auto& [group, members] : groups) {
      if (members.size() < 2) continue;
      std::sort(members.begin(), members.end(), [](const auto& a, const auto& b) {
        return std::pair(a.second.line, a.second.col) < std::pair(b.second.line, b.second.col);
      });
      for (std::size_t i = 1; i < members.size(); ++i) {
        diags_.error(members[i].second,
                     "'" + members[i].first + "' and '" + members[0].first + "' are alternatives; set only one");
        layer.settings.erase(members[i].first);
      }
    }
  }

  bool check_section_allowed(const std::string& path, const SourceLoc& loc) {
    const bool preset_section = path == "preset" || path.rfind("preset.", 0) == 0;
    if (preset_section && kind_ == FileKind::spec) {
      diags_.error(loc, "[preset] is only allowed in preset files (to use a preset, set init.preset)");
      return false;
    }
    return true;
  }

  static std::vector<std::string> first_keys(const std::string& section) {
    auto keys = keys_in_section(section);
    if (keys.size() > 3) keys.resize(3);
    return keys;
  }

  void report_unknown_section(const std::string& path, const std::string& prefix, const std::string& name,
                              const SourceLoc& loc) {
    const std::string best = closest_match(name, user_sections(prefix));
    std::string hint;
    if (!best.empty()) {
      hint = "; did you mean [" + (prefix.empty() ? best : prefix + "." + best) + "]?";
    } else if (prefix.empty()) {
      hint = " (sections: " + join(user_sections(""), ", ") + ")";
    }
    diags_.error(loc, "unknown section [" + path + "]" + hint);
  }

  // Sections a user may write (the [preset] header belongs to preset files).
  std::vector<std::string> user_sections(const std::string& prefix) const {
    std::vector<std::string> out;
    for (auto& s : subsections_of(prefix)) {
      if (!(prefix.empty() && s == "preset" && kind_ == FileKind::spec)) out.push_back(s);
    }
    return out;
  }

  // "'std' belongs in [init.CLASS] ..." when the key exists in another section.
  static std::string belongs_in(const std::string& name) {
    for (const auto& k : schema()) {
      const auto dot = k.path.rfind('.');
      if (k.path.substr(dot + 1) != name || k.path.rfind("preset.", 0) == 0) continue;
      const std::string section = k.path.substr(0, dot);
      if (section.rfind("init.", 0) == 0) {
        return "; '" + name + "' belongs in [init.CLASS] (one table per class, e.g. [init.attn_q])";
      }
      if (section.rfind("metrics.", 0) == 0 && find_key("metrics.sink_score." + name)) {
        return "; '" + name + "' belongs in [metrics.NAME] (one table per metric, e.g. [metrics.sink_score])";
      }
      return "; '" + name + "' belongs in [" + section + "]";
    }
    return "";
  }

  void report_unknown_key(const std::string& path, const std::string& prefix, const std::string& name,
                          const SourceLoc& loc) {
    const std::string where = prefix.empty() ? "at the top level" : "in [" + prefix + "]";
    std::vector<std::string> candidates = keys_in_section(prefix);
    for (const auto& s : user_sections(prefix)) candidates.push_back(s);
    std::string hint = did_you_mean(name, candidates);
    if (hint.empty()) hint = belongs_in(name);
    if (hint.empty() && prefix.empty()) hint = " (sections: " + join(user_sections(""), ", ") + ")";
    diags_.error(loc, "unknown key '" + name + "' " + where + hint);
    (void)path;
  }

  Diagnostics& diags_;
  std::string file_;
  FileKind kind_ = FileKind::spec;
};

// Lays `top` over `base`: keys in `top` win; setting one key of an exclusive
// group removes the base's alternatives (a child giving `tokens` replaces a
// base's `steps`; an `init.X.std` replaces an inherited `init.X.gamma`).
void overlay(Layer& base, const Layer& top) {
  for (const auto& [path, setting] : top.settings) {
    const KeySpec* spec = find_key(path);
    if (spec && !spec->exclusive_group.empty()) {
      for (auto it = base.settings.begin(); it != base.settings.end();) {
        const KeySpec* other = find_key(it->first);
        if (other && other->exclusive_group == spec->exclusive_group) {
          it = base.settings.erase(it);
        } else {
          ++it;
        }
      }
    }
    base.settings[path] = setting;
  }
  for (const auto& [path, loc] : top.sections) base.sections[path] = loc;
  base.invalid_keys.insert(top.invalid_keys.begin(), top.invalid_keys.end());
  base.base_failed = base.base_failed || top.base_failed;
  base.sources.insert(top.sources.begin(), top.sources.end());
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return ss.str();
}

// The preset a file names with init.preset, parsed, or nullopt.
std::optional<Layer> load_named_preset(const Layer& file_layer, std::vector<std::string>& chain, Diagnostics& diags) {
  auto it = file_layer.settings.find("init.preset");
  if (it == file_layer.settings.end()) return std::nullopt;
  const Value& name = it->second.value;
  const std::string* text = preset_source(name.s);
  if (!text) {
    diags.error(name.loc, "unknown init preset \"" + name.s + "\"" + did_you_mean(name.s, preset_names(), "\"") +
                              " (presets: " + join(preset_names(), ", ") + ")");
    return std::nullopt;
  }
  const std::string label = "specs/presets/" + name.s + ".toml";
  FileLoader loader(diags);
  auto preset = loader.parse(*text, label, FileKind::preset);
  if (!preset) return std::nullopt;
  auto declared = preset->settings.find("preset.name");
  if (declared == preset->settings.end() || declared->second.value.s != name.s) {
    diags.error(declared == preset->settings.end() ? SourceLoc{label, 1, 1} : declared->second.value.loc,
                "a preset's [preset] name must equal its file name (\"" + name.s + "\")");
    return std::nullopt;
  }
  chain.push_back(label);
  return preset;
}

class ChainLoader {
 public:
  explicit ChainLoader(Diagnostics& diags) : diags_(diags) {}

  // Loads `text` (named `label`) and, recursively, the bases it extends.
  std::optional<Layer> load(const std::string& text, const std::string& label, const std::string& base_dir,
                            std::vector<std::string>& chain) {
    FileLoader loader(diags_);
    auto layer = loader.parse(text, label, FileKind::spec);
    if (!layer) return std::nullopt;
    // A preset sits directly under the file that names it: above that file's
    // bases (so a base's generic init keys do not undo the preset), below
    // the file itself (whose keys override the preset).
    if (auto preset = load_named_preset(*layer, chain, diags_)) {
      overlay(*preset, *layer);
      for (const char* k : {"preset.name", "preset.description", "preset.source", "preset.scope"}) {
        preset->settings.erase(k);
      }
      layer = std::move(preset);
    }
    auto ext = layer->settings.find("experiment.extends");
    if (ext == layer->settings.end()) return layer;

    const Setting extends = ext->second;
    layer->settings.erase(ext);
    if (extends.value.s.empty()) {
      diags_.error(extends.value.loc, "'experiment.extends' must not be empty");
      layer->base_failed = true;
      return layer;
    }
    const fs::path base_path = fs::path(base_dir) / extends.value.s;
    const std::string base_label = display_path(base_path);
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(base_path, ec);
    for (const auto& seen : visiting_) {
      if (seen == canonical.string()) {
        diags_.error(extends.value.loc, "extends cycle: " + join(visiting_labels_, " -> ") + " -> " + base_label);
        layer->base_failed = true;
        return layer;
      }
    }
    auto base_text = fs::is_regular_file(base_path, ec) ? read_file(base_path.string()) : std::nullopt;
    if (!base_text) {
      diags_.error(extends.value.loc, "cannot read base spec '" + base_label + "' named by extends" +
                                          (fs::exists(base_path, ec) ? " (not a readable file)" : " (no such file)"));
      layer->base_failed = true;
      return layer;
    }
    visiting_.push_back(canonical.string());
    visiting_labels_.push_back(base_label);
    chain.push_back(base_label);
    auto base = load(*base_text, base_label, base_path.parent_path().string(), chain);
    visiting_.pop_back();
    visiting_labels_.pop_back();
    if (!base) {
      layer->base_failed = true;
      return layer;
    }
    overlay(*base, *layer);
    return base;
  }

  void start(const std::string& canonical, const std::string& label) {
    visiting_.push_back(canonical);
    visiting_labels_.push_back(label);
  }

 private:
  static std::string display_path(const fs::path& p) { return p.lexically_normal().string(); }

  Diagnostics& diags_;
  std::vector<std::string> visiting_;
  std::vector<std::string> visiting_labels_;
};

std::optional<SpecDocument> finish(std::optional<Layer> layer, const std::string& label,
                                   std::vector<std::string> chain, Diagnostics& diags) {
  if (!layer) return std::nullopt;
  SpecDocument doc;
  doc.settings = std::move(layer->settings);
  doc.sections = std::move(layer->sections);
  doc.invalid_keys = std::move(layer->invalid_keys);
  doc.incomplete = layer->base_failed;
  doc.sources = std::move(layer->sources);
  doc.root_file = label;
  doc.chain = std::move(chain);
  return doc;
}

}  // namespace

SourceLoc locate_in_string(const SpecDocument& doc, const SourceLoc& value_loc, std::size_t offset) {
  auto it = doc.sources.find(value_loc.file);
  if (it == doc.sources.end() || value_loc.line < 1) return value_loc;
  const std::string& text = it->second;
  SourceLoc at = value_loc;
  // Byte offset of the value's first character (columns count characters).
  std::size_t i = 0, len = 0;
  unsigned cp = 0;
  for (int line = 1; line < value_loc.line && i < text.size(); ++i) line += text[i] == '\n';
  for (int col = 1; col < value_loc.col && i < text.size(); ++col) i += decode_utf8(text, i, len, cp) ? len : 1;
  auto advance_char = [&] {
    if (text[i] == '\n') {
      ++at.line;
      at.col = 1;
      ++i;
    } else {
      i += decode_utf8(text, i, len, cp) ? len : 1;
      ++at.col;
    }
  };
  const bool basic = i < text.size() && text[i] == '"';
  const bool multiline = text.compare(i, 3, basic ? "\"\"\"" : "'''") == 0;
  for (int k = 0; k < (multiline ? 3 : 1) && i < text.size(); ++k) advance_char();
  if (multiline && i < text.size() && text[i] == '\n') advance_char();  // TOML trims it
  std::size_t decoded = 0;
  while (decoded < offset && i < text.size()) {
    if (basic && text[i] == '\\' && i + 1 < text.size()) {
      const char e = text[i + 1];
      if (e == 'u' || e == 'U') {
        const unsigned value = std::stoul(text.substr(i + 2, e == 'u' ? 4 : 8), nullptr, 16);
        decoded += value < 0x80 ? 1 : value < 0x800 ? 2 : value < 0x10000 ? 3 : 4;
        for (int k = 0; k < (e == 'u' ? 6 : 10); ++k) advance_char();
      } else if (multiline && (e == '\n' || e == ' ' || e == '\t' || e == '\r')) {
        advance_char();  // line-ending backslash: skips all following whitespace
        while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) advance_char();
      } else {
        decoded += 1;
        advance_char();
        advance_char();
      }
      continue;
    }
    decoded += decode_utf8(text, i, len, cp) ? len : 1;
    advance_char();
  }
  return at;
}

std::optional<SpecDocument> load_document_text(const std::string& text, const std::string& label,
                                               const std::string& base_dir, Diagnostics& diags) {
  ChainLoader loader(diags);
  std::error_code ec;
  loader.start(fs::weakly_canonical(fs::path(base_dir) / fs::path(label).filename(), ec).string(), label);
  std::vector<std::string> chain = {label};
  auto layer = loader.load(text, label, base_dir, chain);
  return finish(std::move(layer), label, std::move(chain), diags);
}

std::optional<SpecDocument> load_document(const std::string& path, Diagnostics& diags) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    diags.error({path, 0, 0}, "no such spec file");
    return std::nullopt;
  }
  if (!fs::is_regular_file(path, ec)) {
    diags.error({path, 0, 0}, "not a regular file");
    return std::nullopt;
  }
  auto text = read_file(path);
  if (!text) {
    diags.error({path, 0, 0}, "cannot read spec file");
    return std::nullopt;
  }
  ChainLoader loader(diags);
  loader.start(fs::weakly_canonical(path, ec).string(), path);
  std::vector<std::string> chain = {path};
  const std::string dir = fs::path(path).parent_path().string();
  auto layer = loader.load(*text, path, dir.empty() ? "." : dir, chain);
  return finish(std::move(layer), path, std::move(chain), diags);
}

}  // namespace gc
