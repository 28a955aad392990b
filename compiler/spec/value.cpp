#include "spec/value.hpp"

#include "common/text.hpp"

namespace gc {

Value Value::boolean(bool v) {
  Value x;
  x.kind = Kind::boolean;
  x.b = v;
  return x;
}
Value Value::integer(std::int64_t v) {
  Value x;
  x.kind = Kind::integer;
  x.i = v;
  return x;
}
Value Value::number(double v) {
  Value x;
  x.kind = Kind::number;
  x.d = v;
  return x;
}
Value Value::string(std::string v) {
  Value x;
  x.kind = Kind::string;
  x.s = std::move(v);
  return x;
}
Value Value::list(std::vector<Value> v) {
  Value x;
  x.kind = Kind::list;
  x.items = std::move(v);
  return x;
}

std::string Value::type_name() const {
  switch (kind) {
    case Kind::boolean: return "boolean";
    case Kind::integer: return "integer";
    case Kind::number: return "float";
    case Kind::string: return "string";
    case Kind::list: return "array";
  }
  return "value";
}

std::string Value::to_toml() const {
  switch (kind) {
    case Kind::boolean: return b ? "true" : "false";
    case Kind::integer: return std::to_string(i);
    case Kind::number: {
      std::string s = format_double(d);
      // Keep floats floats in TOML ("3" would read back as an integer).
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case Kind::string: return toml_string_literal(s);
    case Kind::list: {
      std::string out = "[";
      for (std::size_t k = 0; k < items.size(); ++k) {
        if (k) out += ", ";
        out += items[k].to_toml();
      }
      return out + "]";
    }
  }
  return "";
}

}  // namespace gc
