#include "runtime/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

using test::entries;
using test::error_of;
using test::le64;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

// A file built by hand: header length, header text as given, data bytes.
std::string st_bytes(const std::string& header, const std::string& data) { return le64(header.size()) + header + data; }

std::string header_of(const std::string& file_bytes) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(std::uint8_t(file_bytes[std::size_t(i)])) << (8 * i);
  return file_bytes.substr(8, n);
}

struct Fixture {
  TempDir dir;
  std::string path = dir / "m.safetensors";
  std::string write(const std::string& header, std::size_t data_bytes) {
    write_bytes(path, st_bytes(header, std::string(data_bytes, '\0')));
    return path;
  }
  std::string error(const std::string& header, std::size_t data_bytes) {
    write(header, data_bytes);
    return error_of([&] { read_safetensors(path); });
  }
};

const float kA[6] = {1, 2, 3, 4, 5, 6};
const std::uint16_t kB[2] = {0x3FC0, 0xC000};  // bf16 1.5, -2
const std::int32_t kC[1] = {-7};

std::vector<TensorView> sample() {
  return {{"a", Dtype::F32, {2, 3}, kA},
          {"b", Dtype::BF16, {2}, kB},
          {"c", Dtype::I32, {}, kC},
          {"z", Dtype::F32, {0, 4}, nullptr}};
}

TEST(RuntimeSafetensors, RoundTrip) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  write_safetensors(path, sample(), {{"step", "12"}});
  const std::string bytes = read_bytes(path);
  const std::string header = header_of(bytes);
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + header.size() + 24 + 4 + 4);
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"], (nlohmann::json{{"format", "pt"}, {"step", "12"}}));
  EXPECT_EQ(j["a"], (nlohmann::json{{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}));
  EXPECT_EQ(j["b"]["data_offsets"], (nlohmann::json{24, 28}));
  EXPECT_EQ(j["c"]["data_offsets"], (nlohmann::json{28, 32}));
  EXPECT_EQ(j["z"]["data_offsets"], (nlohmann::json{32, 32}));

  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensor("a").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(f.load_f32("a"), std::vector<float>(kA, kA + 6));
  EXPECT_EQ(f.load_f32("b"), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(f.tensor("c").dtype, Dtype::I32);
  EXPECT_EQ(std::memcmp(f.bytes(f.tensor("c")), kC, 4), 0);
  EXPECT_TRUE(f.load_f32("z").empty());
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"m.safetensors"});
}

TEST(RuntimeSafetensors, EveryDtypeParses) {
  for (const char* name : {"F32", "F64", "BF16", "F16", "I32", "I64", "U16"}) {
    const auto d = parse_dtype(name);
    ASSERT_TRUE(d) << name;
    EXPECT_STREQ(dtype_name(*d), name);
  }
  EXPECT_EQ(dtype_size(Dtype::F64), 8u);
  EXPECT_EQ(dtype_size(Dtype::BF16), 2u);
  EXPECT_FALSE(parse_dtype("f32"));
}

TEST(RuntimeSafetensors, LookupErrors) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  write_safetensors(path, sample());
  const SafetensorsFile f = read_safetensors(path);
  EXPECT_EQ(error_of([&] { f.tensor("x"); }), "no tensor 'x' in " + path + " (it has 4 tensors)");
  std::vector<float> out(6);
  EXPECT_EQ(error_of([&] { f.load_f32("a", {3, 2}, out.data()); }),
            path + ": tensor 'a': shape [2, 3] does not match the expected [3, 2]");
  EXPECT_EQ(error_of([&] { f.load_f32("c"); }),
            path + ": tensor 'c': dtype I32 cannot be loaded as float (only F32 and BF16 can)");
}

TEST(RuntimeSafetensors, WriterRejectsBadInputAndWritesNothing) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  EXPECT_EQ(error_of([&] { write_safetensors(path, {{"a", Dtype::F32, {1}, kA}, {"a", Dtype::F32, {1}, kA}}); }),
            path + ": tensor 'a': appears twice in the tensor list");
  EXPECT_EQ(error_of([&] { write_safetensors(path, {{"a", Dtype::F32, {-1}, kA}}); }),
            path + ": tensor 'a': invalid shape [-1]");
  EXPECT_EQ(error_of([&] { write_safetensors(path, {{"a", Dtype::F32, {2}, nullptr}}); }),
            path + ": tensor 'a': has no data");
  EXPECT_EQ(error_of([&] { write_safetensors(path, {{"", Dtype::F32, {1}, kA}}); }),
            path + ": a tensor has an empty name");
  EXPECT_EQ(error_of([&] { write_safetensors(path, {}, {{"format", "np"}}); }),
            path + ": metadata \"format\" must be \"pt\", not \"np\"");
  EXPECT_TRUE(entries(dir.str()).empty());
}

TEST(RuntimeSafetensors, TruncatedAtSeveralSizes) {
  TempDir dir;
  const std::string path = dir / "m.safetensors";
  write_safetensors(path, sample());
  const std::string full = read_bytes(path);
  const std::size_t h = header_of(full).size();
  const std::string n = std::to_string(h);
  const std::string cut = dir / "cut.safetensors";
  const auto error_at = [&](std::size_t size) {
    write_bytes(cut, full.substr(0, size));
    return error_of([&] { read_safetensors(cut); });
  };
  EXPECT_EQ(error_at(0),
            cut + ": file is 0 bytes, too short for a safetensors file (an 8-byte header length comes first)");
  EXPECT_EQ(error_at(7),
            cut + ": file is 7 bytes, too short for a safetensors file (an 8-byte header length comes first)");
  EXPECT_EQ(error_at(8 + h - 1), cut + ": byte 0: header length " + n + " runs past the end of the file (8 + " + n +
                                     " bytes needed, the file has " + std::to_string(8 + h - 1) + ")");
  EXPECT_EQ(error_at(8 + h), cut + ": tensor 'a': data_offsets [0, 24] run past the end of the data section (0 bytes)");
  EXPECT_EQ(error_at(full.size() - 1),
            cut + ": tensor 'c': data_offsets [28, 32] run past the end of the data section (31 bytes)");
}

TEST(RuntimeSafetensors, HeaderLengthLimits) {
  Fixture fx;
  write_bytes(fx.path, le64(200000000) + "{}");
  EXPECT_EQ(error_of([&] { read_safetensors(fx.path); }),
            fx.path + ": byte 0: header length 200000000 exceeds the limit of 100000000 bytes");
  write_bytes(fx.path, le64(100) + "{}      ");
  EXPECT_EQ(
      error_of([&] { read_safetensors(fx.path); }),
      fx.path + ": byte 0: header length 100 runs past the end of the file (8 + 100 bytes needed, the file has 16)");
}

TEST(RuntimeSafetensors, GarbageJson) {
  Fixture fx;
  EXPECT_EQ(fx.error("{\"a\": nope}     ", 0),
            fx.path +
                ": byte 15: header is not valid JSON: [json.exception.parse_error.101] parse error at line 1, "
                "column 8: syntax error while parsing value - invalid literal; last read: '\"a\": no'");
  EXPECT_EQ(fx.error("[1, 2]  ", 0), fx.path + ": header is not a JSON object");
}

TEST(RuntimeSafetensors, BadEntries) {
  Fixture fx;
  const std::string p = fx.path + ": tensor 'w': ";
  EXPECT_EQ(fx.error(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", 4), p + "missing \"dtype\"");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", 4), p + "missing \"shape\"");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[1]}})", 4), p + "missing \"data_offsets\"");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,4]}})", 4),
            p + "unknown dtype \"Q4\" (supported: F32, F64, BF16, F16, I32, I64, U16)");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
            p + "\"shape\" is not an array of non-negative integers: [-1]");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4),
            p + "\"data_offsets\" is not an array of two non-negative integers: [0]");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4),
            p + "data_offsets [4, 0] end before they begin");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4), p + "unexpected key \"x\"");
  EXPECT_EQ(fx.error(R"({"w":[1]})", 4), p + "entry is not a JSON object");
  EXPECT_EQ(fx.error(R"({"__metadata__":{"x":1}})", 0), fx.path + ": \"__metadata__\" value for 'x' is not a string");
}

TEST(RuntimeSafetensors, WrongByteLength) {
  Fixture fx;
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4),
            fx.path + ": tensor 'w': shape [2] of F32 needs 8 bytes, but data_offsets [0, 4] span 4");
  EXPECT_EQ(fx.error(R"({"w":{"dtype":"BF16","shape":[3, 2],"data_offsets":[0,8]}})", 8),
            fx.path + ": tensor 'w': shape [3, 2] of BF16 needs 12 bytes, but data_offsets [0, 8] span 8");
}

TEST(RuntimeSafetensors, OffsetsOutOfBoundsOverlappingOrNotContiguous) {
  Fixture fx;
  const std::string f32x1 = R"("dtype":"F32","shape":[1],"data_offsets")";
  const std::string f32x2 = R"("dtype":"F32","shape":[2],"data_offsets")";
  EXPECT_EQ(fx.error("{\"w\":{" + f32x2 + ":[0,8]}}", 4),
            fx.path + ": tensor 'w': data_offsets [0, 8] run past the end of the data section (4 bytes)");
  EXPECT_EQ(fx.error("{\"a\":{" + f32x2 + ":[0,8]},\"b\":{" + f32x2 + ":[4,12]}}", 12),
            fx.path + ": tensor 'b': data_offsets [4, 12] overlap tensor 'a' [0, 8]");
  EXPECT_EQ(fx.error("{\"a\":{" + f32x1 + ":[0,4]},\"b\":{" + f32x1 + ":[8,12]}}", 12),
            fx.path + ": tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a' (which ends at 4)");
  EXPECT_EQ(fx.error("{\"a\":{" + f32x1 + ":[4,8]}}", 8),
            fx.path + ": tensor 'a': data_offsets [4, 8] leave a gap of 4 bytes at the start of the data section");
  const std::string trailing = "{\"a\":{" + f32x1 + ":[0,4]}}";
  EXPECT_EQ(fx.error(trailing, 8), fx.path + ": byte " + std::to_string(8 + trailing.size() + 4) +
                                       ": 4 trailing bytes after the last tensor 'a' belong to no tensor");
}

TEST(RuntimeSafetensors, DuplicateNames) {
  Fixture fx;
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_EQ(fx.error("{\"a\":" + e + ",\"a\":" + e + "}", 4), fx.path + ": tensor 'a': appears twice in the header");
  EXPECT_EQ(fx.error(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
            fx.path + ": tensor 'a': key \"dtype\" appears twice");
}

TEST(RuntimeSafetensors, HandWrittenValidFileLoads) {
  Fixture fx;
  const float v[2] = {0.25f, -8};
  std::string data(8, '\0');
  std::memcpy(data.data(), v, 8);
  write_bytes(fx.path, st_bytes(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  EXPECT_EQ(read_safetensors(fx.path).load_f32("w"), (std::vector<float>{0.25f, -8}));
}

}  // namespace
}  // namespace gc::rt
