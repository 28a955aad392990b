// Files compiled into gcompile: the templates and the runtime it copies into
// every generated tree (cmake/Embed.cmake writes the tables).
#pragma once

#include <string>
#include <vector>

namespace gc {

struct EmbeddedFile {
  std::string path;  // relative to templates/ or runtime/
  std::string text;
};

const std::vector<EmbeddedFile>& embedded_templates();
const std::vector<EmbeddedFile>& embedded_runtime();
const std::vector<EmbeddedFile>& embedded_third_party();

}  // namespace gc
