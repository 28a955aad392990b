// Runs a Clang frontend action over in-memory sources (the templates, or
// their partly specialized versions), turning Clang's own errors into gcompile
// diagnostics with the template's path.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <clang/Frontend/FrontendAction.h>

#include "common/diagnostics.hpp"
#include "specialize/specialize.hpp"

namespace gc {

struct ParseRequest {
  std::string main_path;                      // absolute path of the file to parse
  std::map<std::string, std::string> files;   // absolute path -> text, overlaid on the real file system
  std::map<std::string, std::string> labels;  // absolute path -> path shown in diagnostics
  const Toolchain* toolchain = nullptr;
  std::string include_root;
};

// Parses `main_path` with `action`; returns false (after reporting Clang's
// errors) when the file does not compile.
bool run_clang(const ParseRequest& request, std::unique_ptr<clang::FrontendAction> action, Diagnostics& diags);

// The file of a location (its expansion location for macros) with "." and ".." removed, as the
// passes compare it against their targets' absolute paths.
std::string file_of(const clang::SourceManager& sm, clang::SourceLocation loc);

// Byte offset of a location in its file, and a diagnostic location.
SourceLoc to_source_loc(const clang::SourceManager& sm, clang::SourceLocation loc,
                        const std::map<std::string, std::string>& labels);

}  // namespace gc
