// The shipped init presets, looked up by name in the embedded table.
#include <map>

#include "common/embedded.hpp"
#include "spec/load.hpp"

namespace gc {

namespace {
const std::map<std::string, const std::string*>& preset_index() {
  static const std::map<std::string, const std::string*> index = [] {
    std::map<std::string, const std::string*> m;
    for (const auto& f : embedded_presets()) m[f.path.substr(0, f.path.size() - 5)] = &f.text;  // drop ".toml"
    return m;
  }();
  return index;
}
}  // namespace

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& entry : preset_index()) v.push_back(entry.first);
    return v;
  }();
  return names;
}

const std::string* preset_source(const std::string& name) {
  auto it = preset_index().find(name);
  return it == preset_index().end() ? nullptr : it->second;
}

}  // namespace gc
