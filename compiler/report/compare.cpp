#include "report/compare.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "report/report.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::report {

using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Reads fields of one JSON object, reporting a bad one by its JSON pointer.
class Fields {
 public:
  Fields(const json& object, std::string path, std::string pointer)
      : object_(object), path_(std::move(path)), pointer_(std::move(pointer)) {
    if (!object_.is_object()) fail(pointer_, "expected an object");
  }

  const json* find(const char* key) const {
    const auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string(const char* key, bool required = false) const {
    const json* v = find(key);
    if (!v) {
      if (required) fail(at(key), "missing (expected a string)");
      return "";
    }
    if (!v->is_string()) fail(at(key), "expected a string, got " + std::string(v->type_name()));
    return v->get<std::string>();
  }
  double number(const char* key) const {
    const json* v = find(key);
    if (!v) return kNaN;
    if (!v->is_number()) fail(at(key), "expected a number, got " + std::string(v->type_name()));
    return v->get<double>();
  }
  std::int64_t integer(const char* key, std::int64_t missing) const {
    const json* v = find(key);
    if (!v) return missing;
    if (!v->is_number_integer()) fail(at(key), "expected an integer, got " + std::string(v->type_name()));
    return v->get<std::int64_t>();
  }
  const json* array(const char* key) const {
    const json* v = find(key);
    if (v && !v->is_array()) fail(at(key), "expected an array, got " + std::string(v->type_name()));
    return v;
  }
  Fields object(const char* key, bool required) const {
    const json* v = find(key);
    if (!v && required) fail(at(key), "missing (expected an object)");
    static const json kEmpty = json::object();
    return Fields(v ? *v : kEmpty, path_, at(key));
  }
  std::vector<double> numbers(const char* key) const {
    std::vector<double> out;
    if (const json* a = array(key)) {
      for (std::size_t i = 0; i < a->size(); ++i) {
        const json& item = (*a)[i];
        if (!item.is_number() && !item.is_null()) fail(at(key) + "/" + std::to_string(i), "expected a number");
        out.push_back(item.is_null() ? kNaN : item.get<double>());
      }
    }
    return out;
  }
  std::string at(const char* key) const { return pointer_ + "/" + key; }
  [[noreturn]] void fail(const std::string& pointer, const std::string& message) const {
    throw ReportError(path_ + ": " + (pointer.empty() ? "/" : pointer) + ": " + message);
  }
  const std::string& path() const { return path_; }

 private:
  const json& object_;
  std::string path_, pointer_;
};

CompareSide read_side(const Fields& f) {
  CompareSide side;
  side.label = f.string("label", true);
  side.checkpoint = f.string("checkpoint");
  side.step = f.integer("step", -1);
  side.mean_loss = f.number("mean_loss");
  return side;
}

void read_histogram(const Fields& root, Comparison& c) {
  const Fields h = root.object("histogram", false);
  c.histogram_edges = h.numbers("edges");
  c.histogram_counts = h.numbers("counts");
  if (c.histogram_counts.empty() && c.histogram_edges.empty()) return;
  if (c.histogram_edges.size() != c.histogram_counts.size() + 1) {
    h.fail(h.at("edges"), "expected one more edge than counts (" + std::to_string(c.histogram_edges.size()) +
                              " edges, " + std::to_string(c.histogram_counts.size()) + " counts)");
  }
}

void read_deciles(const Fields& root, Comparison& c) {
  const json* list = root.array("deciles");
  if (!list) return;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const Fields d((*list)[i], root.path(), "/deciles/" + std::to_string(i));
    DifficultyDecile out;
    out.decile = int(d.integer("decile", std::int64_t(i) + 1));
    out.difficulty_min = d.number("difficulty_min");
    out.difficulty_max = d.number("difficulty_max");
    out.count = d.integer("count", 0);
    out.mean = d.number("mean");
    out.median = d.number("median");
    c.deciles.push_back(out);
  }
}

void read_top_gains(const Fields& root, Comparison& c) {
  const json* list = root.array("top_gains");
  if (!list) return;
  for (std::size_t i = 0; i < list->size(); ++i) {
    const Fields g((*list)[i], root.path(), "/top_gains/" + std::to_string(i));
    TokenGain out;
    out.position = g.integer("position", -1);
    out.context = g.string("context");
    out.token = g.string("token");
    out.delta_sym_p = g.number("delta_sym_p");
    out.p_a = g.number("p_a");
    out.p_b = g.number("p_b");
    c.top_gains.push_back(std::move(out));
  }
}

}  // namespace

Comparison parse_comparison(const std::string& text, const std::string& path) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ReportError(path + ": not valid JSON (byte " + std::to_string(e.byte) + "): " + e.what());
  }
  const Fields f(root, path, "");
  Comparison c;
  c.path = path;
  c.a = read_side(f.object("a", true));
  c.b = read_side(f.object("b", true));
  c.tokens = f.integer("tokens", 0);
  c.mean_delta_p = f.number("mean_delta_p");
  c.mean_delta_sym_p = f.number("mean_delta_sym_p");
  c.median_delta_sym_p = f.number("median_delta_sym_p");
  read_histogram(f, c);
  read_deciles(f, c);
  read_top_gains(f, c);
  return c;
}

Comparison load_comparison(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw ReportError(path + ": no such comparison file");
  try {
    return parse_comparison(rt::read_file(path), path);
  } catch (const rt::RuntimeError& e) {
    throw ReportError(e.what());
  }
}

}  // namespace gc::report
