#include "runtime/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; this runtime assumes a little-endian host"
#endif

namespace gc::rt {

using nlohmann::json;

namespace {

constexpr Dtype kAllDtypes[] = {Dtype::F32, Dtype::F64, Dtype::BF16, Dtype::F16, Dtype::I32, Dtype::I64, Dtype::U16};
constexpr const char* kSupported = "F32, F64, BF16, F16, I32, I64, U16";

// numel * elem_size, or nullopt on overflow.
std::optional<std::uint64_t> checked_bytes(const std::vector<std::int64_t>& shape, std::size_t elem_size) {
  std::uint64_t n = elem_size;
  for (auto d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, std::uint64_t(d), &n)) return std::nullopt;
  }
  return n;
}

std::string range_text(std::uint64_t b, std::uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + "]";
}

// --- writing ---------------------------------------------------------------

void check_views(const std::string& path, const std::vector<TensorView>& tensors) {
  std::set<std::string> seen;
  for (const auto& t : tensors) {
    if (t.name.empty()) throw RuntimeError(path, "a tensor has an empty name");
    if (t.name == "__metadata__") throw tensor_error(path, t.name, "name is reserved for metadata");
    if (!seen.insert(t.name).second) throw tensor_error(path, t.name, "appears twice in the tensor list");
    const auto bytes = checked_bytes(t.shape, dtype_size(t.dtype));
    if (!bytes) throw tensor_error(path, t.name, "invalid shape " + shape_text(t.shape));
    if (*bytes > 0 && t.data == nullptr) throw tensor_error(path, t.name, "has no data");
  }
}

std::string header_json(const std::vector<TensorView>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  nlohmann::ordered_json meta = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) meta[k] = v;
  meta["format"] = "pt";
  header["__metadata__"] = meta;
  std::uint64_t offset = 0;
  for (const auto& t : tensors) {
    const std::uint64_t n = *checked_bytes(t.shape, dtype_size(t.dtype));
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// --- reading ---------------------------------------------------------------

// Parses the header, recording the first duplicate key (nlohmann keeps the last).
json parse_header_json(const std::string& path, const char* begin, const char* end) {
  std::vector<std::set<std::string>> keys;
  std::string top_key, duplicate;
  std::size_t duplicate_depth = 0;
  auto callback = [&](int, nlohmann::detail::parse_event_t ev, json& parsed) {
    using E = nlohmann::detail::parse_event_t;
    if (ev == E::object_start) keys.emplace_back();
    if (ev == E::object_end) keys.pop_back();
    if (ev == E::key) {
      const std::string k = parsed.get<std::string>();
      if (keys.size() == 1) top_key = k;
      if (!keys.back().insert(k).second && duplicate.empty()) {
        duplicate = k;
        duplicate_depth = keys.size();
      }
    }
    return true;
  };
  json header;
  try {
    header = json::parse(begin, end, callback);
  } catch (const json::parse_error& e) {
    const std::uint64_t at = 8 + (e.byte > 0 ? e.byte - 1 : 0);
    throw RuntimeError(path, at, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) {
    if (duplicate_depth == 1) throw tensor_error(path, duplicate, "appears twice in the header");
    throw tensor_error(path, top_key, "key \"" + duplicate + "\" appears twice");
  }
  if (!header.is_object()) throw RuntimeError(path, "header is not a JSON object");
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& meta) {
  if (!meta.is_object()) throw RuntimeError(path, "\"__metadata__\" is not an object");
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : meta.items()) {
    if (!v.is_string()) throw RuntimeError(path, "\"__metadata__\" value for '" + k + "' is not a string");
    out[k] = v.get<std::string>();
  }
  return out;
}

const json& field(const std::string& path, const std::string& name, const json& entry, const char* key) {
  const auto it = entry.find(key);
  if (it == entry.end()) throw tensor_error(path, name, std::string("missing \"") + key + "\"");
  return *it;
}

std::vector<std::int64_t> parse_uints(const std::string& path, const std::string& name, const json& v, const char* key,
                                      const char* what) {
  bool ok = v.is_array();
  std::vector<std::int64_t> out;
  for (std::size_t i = 0; ok && i < v.size(); ++i) {
    ok = v[i].is_number_unsigned() || (v[i].is_number_integer() && v[i].get<std::int64_t>() >= 0);
    if (ok) out.push_back(v[i].get<std::int64_t>());
  }
  if (!ok) throw tensor_error(path, name, std::string("\"") + key + "\" is not " + what + ": " + v.dump());
  return out;
}

TensorInfo parse_entry(const std::string& path, const std::string& name, const json& entry) {
  if (!entry.is_object()) throw tensor_error(path, name, "entry is not a JSON object");
  for (const auto& [k, v] : entry.items()) {
    if (k != "dtype" && k != "shape" && k != "data_offsets") {
      throw tensor_error(path, name, "unexpected key \"" + k + "\"");
    }
  }
  TensorInfo t;
  t.name = name;
  const json& dtype = field(path, name, entry, "dtype");
  const auto parsed = dtype.is_string() ? parse_dtype(dtype.get<std::string>()) : std::nullopt;
  if (!parsed) throw tensor_error(path, name, "unknown dtype " + dtype.dump() + " (supported: " + kSupported + ")");
  t.dtype = *parsed;
  t.shape = parse_uints(path, name, field(path, name, entry, "shape"), "shape", "an array of non-negative integers");
  const auto offs = parse_uints(path, name, field(path, name, entry, "data_offsets"), "data_offsets",
                                "an array of two non-negative integers");
  if (offs.size() != 2) {
    throw tensor_error(
        path, name, "\"data_offsets\" is not an array of two non-negative integers: " + entry["data_offsets"].dump());
  }
  t.begin = std::uint64_t(offs[0]);
  t.end = std::uint64_t(offs[1]);
  if (t.end < t.begin)
    throw tensor_error(path, name, "data_offsets " + range_text(t.begin, t.end) + " end before they begin");
  const auto need = checked_bytes(t.shape, dtype_size(t.dtype));
  if (!need || *need != t.nbytes()) {
    throw tensor_error(path, name,
                       "shape " + shape_text(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                           (need ? std::to_string(*need) : std::string("too many")) + " bytes, but data_offsets " +
                           range_text(t.begin, t.end) + " span " + std::to_string(t.nbytes()));
  }
  return t;
}

// Tensors sorted by offset must tile the data section exactly.
void check_layout(const std::string& path, std::vector<TensorInfo>& tensors, std::uint64_t data_start,
                  std::uint64_t data_size) {
  for (const auto& t : tensors) {
    if (t.end > data_size) {
      throw tensor_error(path, t.name,
                         "data_offsets " + range_text(t.begin, t.end) + " run past the end of the data section (" +
                             std::to_string(data_size) + " bytes)");
    }
  }
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
  });
  std::uint64_t cursor = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    const std::string here = "data_offsets " + range_text(t.begin, t.end);
    if (t.begin < cursor) {
      throw tensor_error(path, t.name,
                         here + " overlap tensor '" + prev->name + "' " + range_text(prev->begin, prev->end));
    }
    if (t.begin > cursor) {
      const std::string gap = std::to_string(t.begin - cursor) + " bytes";
      throw tensor_error(path, t.name,
                         here + " leave a gap of " + gap +
                             (prev ? " after tensor '" + prev->name + "' (which ends at " + std::to_string(cursor) + ")"
                                   : std::string(" at the start of the data section")));
    }
    cursor = t.end;
    prev = &t;
  }
  if (cursor != data_size) {
    throw RuntimeError(path, data_start + cursor,
                       std::to_string(data_size - cursor) + " trailing bytes after the last tensor" +
                           (prev ? " '" + prev->name + "'" : std::string()) + " belong to no tensor");
  }
}

}  // namespace

const char* dtype_name(Dtype d) {
  switch (d) {
    case Dtype::F32:
      return "F32";
    case Dtype::F64:
      return "F64";
    case Dtype::BF16:
      return "BF16";
    case Dtype::F16:
      return "F16";
    case Dtype::I32:
      return "I32";
    case Dtype::I64:
      return "I64";
    case Dtype::U16:
      return "U16";
  }
  return "?";
}

std::size_t dtype_size(Dtype d) {
  switch (d) {
    case Dtype::F64:
    case Dtype::I64:
      return 8;
    case Dtype::F32:
    case Dtype::I32:
      return 4;
    case Dtype::BF16:
    case Dtype::F16:
    case Dtype::U16:
      return 2;
  }
  return 0;
}

std::optional<Dtype> parse_dtype(const std::string& name) {
  for (Dtype d : kAllDtypes) {
    if (name == dtype_name(d)) return d;
  }
  return std::nullopt;
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  check_views(path, tensors);
  const auto format = metadata.find("format");
  if (format != metadata.end() && format->second != "pt") {
    throw RuntimeError(path, "metadata \"format\" must be \"pt\", not \"" + format->second + "\"");
  }
  const std::string header = header_json(tensors, metadata);
  write_file_atomic(path, [&](FileWriter& w) {
    std::uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = std::uint8_t(std::uint64_t(header.size()) >> (8 * i));
    w.write(len, 8);
    w.write(header);
    for (const auto& t : tensors) w.write(t.data, *checked_bytes(t.shape, dtype_size(t.dtype)));
  });
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path);
  const std::uint64_t size = f.file_.size();
  if (size < 8) {
    throw RuntimeError(path, "file is " + std::to_string(size) +
                                 " bytes, too short for a safetensors file (an 8-byte header length comes first)");
  }
  const std::uint64_t n = load_le64(f.file_.data());
  if (n > kMaxSafetensorsHeader) {
    throw RuntimeError(path, 0,
                       "header length " + std::to_string(n) + " exceeds the limit of " +
                           std::to_string(kMaxSafetensorsHeader) + " bytes");
  }
  if (8 + n > size) {
    throw RuntimeError(path, 0,
                       "header length " + std::to_string(n) + " runs past the end of the file (8 + " +
                           std::to_string(n) + " bytes needed, the file has " + std::to_string(size) + ")");
  }
  const auto* text = reinterpret_cast<const char*>(f.file_.data() + 8);
  const json header = parse_header_json(path, text, text + n);
  f.data_start_ = 8 + n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      f.metadata_ = parse_metadata(path, entry);
    } else {
      f.tensors_.push_back(parse_entry(path, name, entry));
    }
  }
  check_layout(path, f.tensors_, f.data_start_, size - f.data_start_);
  for (std::size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

const TensorInfo& SafetensorsFile::tensor(const std::string& name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    throw RuntimeError("no tensor '" + name + "' in " + path() + " (it has " + std::to_string(tensors_.size()) +
                       (tensors_.size() == 1 ? " tensor)" : " tensors)"));
  }
  return tensors_[it->second];
}

std::vector<float> SafetensorsFile::load_f32(const std::string& name) const {
  const TensorInfo& t = tensor(name);
  std::vector<float> out(std::size_t(t.numel()));
  load_f32(name, t.shape, out.data());
  return out;
}

void SafetensorsFile::load_f32(const std::string& name, const std::vector<std::int64_t>& expected_shape,
                               float* out) const {
  const TensorInfo& t = tensor(name);
  if (t.shape != expected_shape) {
    throw tensor_error(path(), name,
                       "shape " + shape_text(t.shape) + " does not match the expected " + shape_text(expected_shape));
  }
  const std::uint8_t* src = bytes(t);
  const auto n = std::size_t(t.numel());
  if (t.dtype == Dtype::F32) {
    if (n > 0) std::memcpy(out, src, n * 4);
  } else if (t.dtype == Dtype::BF16) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t bits = std::uint32_t(load_le16(src + 2 * i)) << 16;
      std::memcpy(out + i, &bits, 4);
    }
  } else {
    throw tensor_error(
        path(), name,
        std::string("dtype ") + dtype_name(t.dtype) + " cannot be loaded as float (only F32 and BF16 can)");
  }
}

}  // namespace gc::rt
