// Diagnostics: every problem gcompile reports is a Diagnostic with a source
// location, printed as `file:line:col: severity: message` (the format editors
// and compilers use), so users can jump straight to the offending key.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace gc {

struct SourceLoc {
  std::string file;  // as the user named it (relative paths stay relative)
  int line = 0;      // 1-based; 0 = the whole file
  int col = 0;       // 1-based; 0 = the whole line
};

enum class Severity { error, warning, note };

struct Diagnostic {
  Severity severity = Severity::error;
  SourceLoc loc;
  std::string message;

  // `file:line:col: error: message` (line/col omitted when unknown).
  std::string format() const;
};

// Collects diagnostics so that a run reports every error of a spec at once.
class Diagnostics {
 public:
  void error(SourceLoc loc, std::string message);
  void warning(SourceLoc loc, std::string message);
  void note(SourceLoc loc, std::string message);

  bool has_errors() const { return error_count_ > 0; }
  std::size_t error_count() const { return error_count_; }
  std::size_t warning_count() const;
  const std::vector<Diagnostic>& all() const { return items_; }

  // In source order: by file (in order of first appearance), line, column.
  std::vector<Diagnostic> sorted() const;
  void print(std::ostream& out) const;

 private:
  std::vector<Diagnostic> items_;
  std::size_t error_count_ = 0;
};

}  // namespace gc
