#include "specialize/edits.hpp"

#include <algorithm>

namespace gc {

namespace {

// Emits source[begin, end) with the outermost edits inside it applied.
void emit(const std::string& source, const std::vector<Edit>& edits, std::size_t begin, std::size_t end,
          std::string& out) {
  std::size_t pos = begin;
  for (const Edit& e : edits) {
    if (e.begin < pos || e.end > end) continue;  // outside, or nested in one already applied
    out.append(source, pos, e.begin - pos);
    if (e.keep_range) {
      emit(source, edits, e.keep_begin, e.keep_end, out);
    } else {
      out += e.text;
    }
    pos = e.end;
  }
  out.append(source, pos, end - pos);
}

}  // namespace

std::string apply_edits(const std::string& source, std::vector<Edit> edits) {
  // Outermost first: by start, then longest.
  std::sort(edits.begin(), edits.end(), [](const Edit& a, const Edit& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::string out;
  emit(source, edits, 0, source.size(), out);
  return out;
}

}  // namespace gc
