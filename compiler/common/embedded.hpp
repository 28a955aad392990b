// Files compiled into gcompile (cmake/Embed.cmake writes the tables): the init
// presets, and the templates and runtime it copies into every generated tree.
#pragma once

#include <string>
#include <vector>

namespace gc {

struct EmbeddedFile {
  std::string path;  // relative to templates/ or runtime/
  std::string text;
};

const std::vector<EmbeddedFile>& embedded_presets();  // "gpt2.toml", ...
const std::vector<EmbeddedFile>& embedded_templates();
const std::vector<EmbeddedFile>& embedded_runtime();
const std::vector<EmbeddedFile>& embedded_third_party();
const std::vector<EmbeddedFile>& embedded_tree_files();  // CMakeLists.txt.in (templates/)
const std::vector<EmbeddedFile>& embedded_hf_code();  // compiler/export/python/*.py

}  // namespace gc
