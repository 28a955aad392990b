// Loading a spec file into a flat, type-checked document: TOML is parsed with
// toml++, tables are flattened to dotted keys, every key is checked against
// the schema (unknown keys get a did-you-mean), `extends` chains are merged
// key by key, and an init preset, if named, is merged underneath.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"
#include "spec/value.hpp"

namespace gc {

struct SpecDocument {
  // Every key set explicitly by the spec, its bases or its preset, after
  // merging; values are normalized to the schema type (ints in float keys
  // become floats). Keys left to defaults are absent.
  std::map<std::string, Setting> settings;
  // Where each [section] header was first written in the root file's chain.
  std::map<std::string, SourceLoc> sections;
  // Keys written with an unusable value (already reported): not "missing".
  std::set<std::string> invalid_keys;
  // A base named by extends could not be loaded (already reported): keys it
  // would have set are unknown, so none is reported missing.
  bool incomplete = false;
  std::string root_file;
  std::vector<std::string> chain;  // root first, then its bases, then the preset
  std::map<std::string, std::string> sources;  // file label -> text, for precise locations
};

// Where the character at `offset` of a string value's decoded text was
// written: follows escapes and the lines of multi-line strings.
SourceLoc locate_in_string(const SpecDocument& doc, const SourceLoc& value_loc, std::size_t offset);

// Reads `path`; reports every problem to `diags`. Returns the document even
// when there were errors in keys (so later checks can still run and report
// more), and nullopt only when the file could not be read or parsed.
std::optional<SpecDocument> load_document(const std::string& path, Diagnostics& diags);

// The same, from text in memory (tests, presets): `label` is the file name used
// in diagnostics and `base_dir` resolves `extends`.
std::optional<SpecDocument> load_document_text(const std::string& text, const std::string& label,
                                               const std::string& base_dir, Diagnostics& diags);

// Shipped init presets (specs/presets/*.toml, embedded at build time).
const std::vector<std::string>& preset_names();
const std::string* preset_source(const std::string& name);

}  // namespace gc
