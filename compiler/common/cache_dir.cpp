#include "common/cache_dir.hpp"

#include <cstdlib>
#include <optional>

namespace gc {

std::filesystem::path user_cache_dir() {
  namespace fs = std::filesystem;
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::optional<fs::path>(v) : std::nullopt;
  };
  if (auto dir = env("GCOMPILE_CACHE_DIR")) return fs::absolute(*dir);
  if (auto dir = env("XDG_CACHE_HOME")) return fs::absolute(*dir / "gcompile");
  if (auto home = env("HOME")) return *home / ".cache" / "gcompile";
  return fs::absolute(".gcompile-cache");
}

}  // namespace gc
