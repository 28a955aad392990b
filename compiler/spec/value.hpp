// A spec value as written in TOML, with where it was written. The loader
// flattens TOML tables into dotted paths ("model.norm_eps") holding Values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/diagnostics.hpp"

namespace gc {

struct Value {
  enum class Kind { boolean, integer, number, string, list };
  Kind kind = Kind::integer;
  bool b = false;
  std::int64_t i = 0;
  double d = 0.0;
  std::string s;
  std::vector<Value> items;
  SourceLoc loc;  // where the value was written (empty for defaults)

  static Value boolean(bool v);
  static Value integer(std::int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value list(std::vector<Value> v);

  // "integer", "float", "string", "boolean", "array" (TOML's words).
  std::string type_name() const;
  // The value as TOML source (strings escaped).
  std::string to_toml() const;
  // Numeric value of an integer or number.
  double as_double() const { return kind == Kind::integer ? static_cast<double>(i) : d; }
};

// One key of a spec after flattening: its value and where its key was written.
struct Setting {
  Value value;
  SourceLoc key_loc;
};

}  // namespace gc
