// Text edits produced by the specializer's AST passes, and the function that
// applies possibly nested edits to a source buffer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gc {

struct Edit {
  std::size_t begin = 0, end = 0;  // replaced byte range [begin, end)
  // Either a literal replacement, or a sub-range of the source to keep (with
  // the edits nested inside it applied recursively).
  bool keep_range = false;
  std::string text;
  std::size_t keep_begin = 0, keep_end = 0;
};

// Applies edits to `source`. Edits must nest properly (an edit is either
// disjoint from another or contains it); edits inside a dropped range vanish.
std::string apply_edits(const std::string& source, std::vector<Edit> edits);

}  // namespace gc
