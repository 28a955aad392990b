// The user's cache directory for what gcompile can rebuild at will (prepared
// data, specialized templates): $GCOMPILE_CACHE_DIR, else
// $XDG_CACHE_HOME/gcompile, else ~/.cache/gcompile. Never beside a spec, where
// users keep committed records.
#pragma once

#include <filesystem>

namespace gc {

std::filesystem::path user_cache_dir();

}  // namespace gc
