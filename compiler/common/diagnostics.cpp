#include "common/diagnostics.hpp"

#include <algorithm>

namespace gc {

namespace {
const char* severity_name(Severity s) {
  switch (s) {
    case Severity::error: return "error";
    case Severity::warning: return "warning";
    case Severity::note: return "note";
  }
  return "error";
}
}  // namespace

std::string Diagnostic::format() const {
  std::string out = loc.file.empty() ? std::string("gcompile") : loc.file;
  if (loc.line > 0) {
    out += ":" + std::to_string(loc.line);
    if (loc.col > 0) out += ":" + std::to_string(loc.col);
  }
  out += ": ";
  out += severity_name(severity);
  out += ": ";
  out += message;
  return out;
}

namespace {
bool same(const Diagnostic& d, Severity s, const SourceLoc& loc, const std::string& message) {
  return d.severity == s && d.loc.file == loc.file && d.loc.line == loc.line && d.loc.col == loc.col &&
         d.message == message;
}
}  // namespace

void Diagnostics::error(SourceLoc loc, std::string message) {
  // A header shared by several templates reports its error once.
  for (const auto& d : items_) {
    if (same(d, Severity::error, loc, message)) return;
  }
  items_.push_back({Severity::error, std::move(loc), std::move(message)});
  ++error_count_;
}

void Diagnostics::warning(SourceLoc loc, std::string message) {
  items_.push_back({Severity::warning, std::move(loc), std::move(message)});
}

void Diagnostics::note(SourceLoc loc, std::string message) {
  items_.push_back({Severity::note, std::move(loc), std::move(message)});
}

std::size_t Diagnostics::warning_count() const {
  return static_cast<std::size_t>(std::count_if(items_.begin(), items_.end(), [](const Diagnostic& d) {
    return d.severity == Severity::warning;
  }));
}

std::vector<Diagnostic> Diagnostics::sorted() const {
  // toml++ visits keys in name order; users read a file top to bottom. Files
  // keep the order in which they first produced a diagnostic.
  std::vector<std::string> files;
  for (const auto& d : items_) {
    if (std::find(files.begin(), files.end(), d.loc.file) == files.end()) files.push_back(d.loc.file);
  }
  auto rank = [&](const Diagnostic& d) {
    return std::find(files.begin(), files.end(), d.loc.file) - files.begin();
  };
  std::vector<Diagnostic> out = items_;
  std::stable_sort(out.begin(), out.end(), [&](const Diagnostic& a, const Diagnostic& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    if (a.loc.line != b.loc.line) return a.loc.line < b.loc.line;
    return a.loc.col < b.loc.col;
  });
  return out;
}

void Diagnostics::print(std::ostream& out) const {
  for (const auto& d : sorted()) out << d.format() << "\n";
}

}  // namespace gc
