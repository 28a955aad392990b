#include "runtime/token_shard.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "runtime_test_util.hpp"

namespace gc::rt {
namespace {

using test::entries;
using test::error_of;
using test::le32;
using test::read_bytes;
using test::TempDir;
using test::write_bytes;

// A shard built by hand (independent of the writer).
std::string shard_bytes(std::uint32_t magic, std::uint32_t version, std::uint32_t count, const std::string& payload) {
  std::string s = le32(magic) + le32(version) + le32(count);
  s.resize(1024, '\0');
  return s + payload;
}

std::string u16s(const std::vector<std::uint16_t>& v) {
  std::string s;
  for (auto t : v) s += std::string{char(t & 0xFF), char(t >> 8)};
  return s;
}

std::vector<std::uint32_t> iota_tokens(std::size_t n, std::uint32_t first) {
  std::vector<std::uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// ---- single shards --------------------------------------------------------

TEST(RuntimeTokenShard, RoundTripUint16) {
  TempDir dir;
  const std::string path = dir / "s.bin";
  const std::vector<std::uint32_t> tokens = {0, 1, 65535, 42, 7};
  write_token_shard(path, tokens, 65536);
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 2 * 5);
  EXPECT_EQ(bytes.substr(0, 12), le32(20240520) + le32(1) + le32(5));
  EXPECT_EQ(bytes.substr(12, 1012), std::string(1012, '\0'));
  EXPECT_EQ(bytes.substr(1024), u16s({0, 1, 65535, 42, 7}));
  EXPECT_EQ(read_token_shard(path, 65536), tokens);
  const TokenShard shard = TokenShard::open(path, 65536);
  EXPECT_EQ(shard.format(), TokenFormat::U16);
  EXPECT_EQ(shard.size(), 5u);
  EXPECT_EQ(shard.token(2), 65535u);
  EXPECT_EQ(entries(dir.str()), std::vector<std::string>{"s.bin"});
}

TEST(RuntimeTokenShard, RoundTripUint32) {
  TempDir dir;
  const std::string path = dir / "s.bin";
  const std::vector<std::uint32_t> tokens = {128255, 0, 70000};
  write_token_shard(path, tokens, 128256);
  const std::string bytes = read_bytes(path);
  ASSERT_EQ(bytes.size(), 1024u + 4 * 3);
  EXPECT_EQ(bytes.substr(0, 12), le32(20240801) + le32(7) + le32(3));
  EXPECT_EQ(bytes.substr(1024), le32(128255) + le32(0) + le32(70000));
  EXPECT_EQ(read_token_shard(path, 128256), tokens);
  EXPECT_EQ(read_shard_header(path).format, TokenFormat::U32);
}

TEST(RuntimeTokenShard, EmptyShardIsValid) {
  TempDir dir;
  write_token_shard(dir / "e.bin", {}, 100);
  EXPECT_EQ(read_bytes(dir / "e.bin").size(), 1024u);
  EXPECT_TRUE(read_token_shard(dir / "e.bin", 100).empty());
}

TEST(RuntimeTokenShard, TruncatedHeaderAtSeveralSizes) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  const std::string full = shard_bytes(20240520, 1, 3, u16s({1, 2, 3}));
  for (std::size_t size : {0, 4, 7, 12, 1023}) {
    write_bytes(path, full.substr(0, size));
    EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }),
              path + ": file is " + std::to_string(size) + " bytes, shorter than the 1024-byte llm.c shard header");
  }
}

TEST(RuntimeTokenShard, TruncatedTokensAtSeveralSizes) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  const std::string full = shard_bytes(20240520, 1, 3, u16s({1, 2, 3}));
  for (std::size_t size : {1024, 1025, 1029}) {
    write_bytes(path, full.substr(0, size));
    EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }),
              path + ": byte 8: token count 3 does not match file size " + std::to_string(size) +
                  " (expected 1024 + 2\u00b73 = 1030 bytes)");
  }
}

TEST(RuntimeTokenShard, ExtraBytesAreASizeMismatch) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  write_bytes(path, shard_bytes(20240801, 7, 2, le32(1) + le32(2) + "xx"));
  EXPECT_EQ(error_of([&] { read_shard_header(path); }),
            path + ": byte 8: token count 2 does not match file size 1034 (expected 1024 + 4\u00b72 = 1032 bytes)");
}

TEST(RuntimeTokenShard, WrongMagic) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  write_bytes(path, shard_bytes(12345, 1, 0, ""));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }),
            path +
                ": byte 0: bad magic 12345 (expected 20240520 for uint16 tokens or 20240801 for uint32 tokens): "
                "not an llm.c token shard");
}

TEST(RuntimeTokenShard, WrongVersion) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  write_bytes(path, shard_bytes(20240520, 7, 0, ""));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }),
            path + ": byte 4: version 7 does not match magic 20240520 (expected version 1)");
  write_bytes(path, shard_bytes(20240801, 1, 0, ""));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }),
            path + ": byte 4: version 1 does not match magic 20240801 (expected version 7)");
}

TEST(RuntimeTokenShard, NegativeCount) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  write_bytes(path, shard_bytes(20240520, 1, 0xFFFFFFFFu, ""));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 10); }), path + ": byte 8: negative token count -1");
}

TEST(RuntimeTokenShard, TokenOutOfVocabNamesTheByteOffset) {
  TempDir dir;
  const std::string path = dir / "t.bin";
  write_bytes(path, shard_bytes(20240520, 1, 5, u16s({1, 2, 3, 99, 5})));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 50); }),
            path + ": byte 1030: token 3 has id 99, which is not below vocab_size 50");
  EXPECT_EQ(read_token_shard(path, 100).size(), 5u);
  write_bytes(path, shard_bytes(20240801, 7, 2, le32(1) + le32(70000)));
  EXPECT_EQ(error_of([&] { read_token_shard(path, 70000); }),
            path + ": byte 1028: token 1 has id 70000, which is not below vocab_size 70000");
}

TEST(RuntimeTokenShard, NotAFile) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { read_token_shard(dir.str(), 10); }), dir.str() + ": is a directory, not a file");
  EXPECT_EQ(error_of([&] { read_token_shard(dir / "x.bin", 10); }),
            dir / "x.bin" + ": cannot open: No such file or directory");
}

TEST(RuntimeTokenShard, WriterRejectsBadTokensAndWritesNothing) {
  TempDir dir;
  const std::string path = dir / "w.bin";
  EXPECT_EQ(error_of([&] { write_token_shard(path, {1, 2, 70000}, 50257); }),
            path + ": byte 1028: token 2 has id 70000, which is not below vocab_size 50257");
  const std::vector<std::uint32_t> big = {5, 70000};
  EXPECT_EQ(error_of([&] { write_token_shard(path, big.data(), big.size(), TokenFormat::U16); }),
            path + ": byte 1026: token 1 has id 70000, which does not fit uint16 tokens");
  EXPECT_TRUE(entries(dir.str()).empty());
}

TEST(RuntimeTokenShard, ReadOutOfRange) {
  TempDir dir;
  const std::string path = dir / "s.bin";
  write_token_shard(path, {1, 2, 3}, 10);
  const TokenShard shard = TokenShard::open(path, 10);
  std::int32_t out[4];
  EXPECT_EQ(error_of([&] { shard.read(1, 3, out); }), path + ": tokens [1, 4) are out of range (3 tokens)");
  EXPECT_EQ(error_of([&] { shard.token(3); }), path + ": token index 3 is out of range (3 tokens)");
}

// ---- shard sets -----------------------------------------------------------

TEST(RuntimeShardSet, ExpandsGlobsDirectoriesAndFiles) {
  TempDir dir;
  for (const char* name : {"b.bin", "a.bin", "c.txt"}) write_token_shard(dir / name, {1, 2}, 10);
  EXPECT_EQ(expand_shard_paths(dir / "*.bin"), (std::vector<std::string>{dir / "a.bin", dir / "b.bin"}));
  EXPECT_EQ(expand_shard_paths(dir.str()), (std::vector<std::string>{dir / "a.bin", dir / "b.bin"}));
  EXPECT_EQ(expand_shard_paths(dir / "c.txt"), std::vector<std::string>{dir / "c.txt"});
}

TEST(RuntimeShardSet, NothingMatches) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { ShardSet(dir / "train_*.bin", 10); }),
            "no token shards match '" + dir / "train_*.bin" + "'");
  EXPECT_EQ(error_of([&] { ShardSet(dir.str(), 10); }), dir.str() + ": directory contains no *.bin token shards");
  EXPECT_EQ(error_of([&] { ShardSet(dir / "none.bin", 10); }),
            dir / "none.bin" + ": cannot open: No such file or directory");
}

TEST(RuntimeShardSet, HeadersAreValidatedUpFront) {
  TempDir dir;
  write_token_shard(dir / "a.bin", {1, 2, 3}, 10);
  write_bytes(dir / "b.bin", shard_bytes(20240520, 1, 9, u16s({1})));
  EXPECT_EQ(
      error_of([&] { ShardSet(dir.str(), 10); }),
      dir / "b.bin" + ": byte 8: token count 9 does not match file size 1026 (expected 1024 + 2\u00b79 = 1042 bytes)");
}

// a.bin = 0..9, b.bin = 100..106; B = 2, T = 3: sequences of 4 tokens, stride 3.
struct TwoShards {
  TempDir dir;
  TwoShards() {
    write_token_shard(dir / "a.bin", iota_tokens(10, 0), 1000);
    write_token_shard(dir / "b.bin", iota_tokens(7, 100), 1000);
  }
  std::string glob() const { return dir / "*.bin"; }
};

std::vector<std::int32_t> seq(std::int32_t first) { return {first, first + 1, first + 2, first + 3}; }

std::vector<std::int32_t> rows(std::int32_t a, std::int32_t b) {
  auto out = seq(a);
  const auto second = seq(b);
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

TEST(RuntimeShardSet, BatchesAreSequentialAndWrapAcrossShardsAndEpochs) {
  TwoShards data;
  ShardSet set(data.glob(), 1000);
  EXPECT_EQ(set.total_tokens(), 17u);
  EXPECT_EQ(set.next_batch(2, 3).tokens, rows(0, 3));
  EXPECT_EQ(set.next_batch(2, 3).tokens, rows(6, 100));  // 9 + 4 > 10: on to b.bin
  EXPECT_EQ(set.position(), (DataPosition{1, 3, 0, "b.bin"}));
  EXPECT_EQ(set.next_batch(2, 3).tokens, rows(103, 0));  // past the last shard: epoch 1
  EXPECT_EQ(set.position(), (DataPosition{0, 3, 1, "a.bin"}));
}

// whole_sequences counts what the reader yields before it wraps: stride T in the stream
// layout (a: offsets 0, 3, 6; b: 0, 3), stride T + 1 for whole examples.
TEST(RuntimeShardSet, WholeSequencesCountsWhatIsReadBeforeWrapping) {
  TwoShards data;
  ShardSet stream(data.glob(), 1000);
  EXPECT_EQ(stream.whole_sequences(3), 5);
  for (int i = 0; i < 5; ++i) stream.next_batch(1, 3);
  EXPECT_EQ(stream.position().epoch, 0u);
  stream.next_batch(1, 3);
  EXPECT_EQ(stream.position().epoch, 1u);
  EXPECT_EQ(stream.whole_sequences(9), 1);   // only a.bin holds 10 tokens
  EXPECT_EQ(stream.whole_sequences(10), 0);

  TempDir dir;
  write_token_shard(dir / "a.bin", iota_tokens(8, 0), 1000);
  write_token_shard(dir / "b.bin", iota_tokens(4, 100), 1000);
  ShardSet examples(dir / "*.bin", 1000, SequenceLayout::examples);
  EXPECT_EQ(examples.whole_sequences(3), 3);
  for (int i = 0; i < 3; ++i) examples.next_batch(1, 3);
  EXPECT_EQ(examples.position().epoch, 0u);
  examples.next_batch(1, 3);
  EXPECT_EQ(examples.position().epoch, 1u);
}

TEST(RuntimeShardSet, InputsAndTargetsAreShiftedByOne) {
  TwoShards data;
  ShardSet set(data.glob(), 1000);
  const Batch b = set.next_batch(2, 3);
  EXPECT_EQ(b.inputs(), (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(b.targets(), (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(b.row(1)[0], 3);
}

TEST(RuntimeShardSet, SavedPositionResumesExactly) {
  TwoShards data;
  ShardSet first(data.glob(), 1000);
  for (int i = 0; i < 2; ++i) first.next_batch(2, 3);
  const DataPosition saved = first.position();
  std::vector<std::vector<std::int32_t>> expected;
  for (int i = 0; i < 7; ++i) expected.push_back(first.next_batch(2, 3).tokens);

  ShardSet resumed(data.glob(), 1000);
  resumed.seek(saved);
  EXPECT_EQ(resumed.position(), saved);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(resumed.next_batch(2, 3).tokens, expected[std::size_t(i)]) << i;
  EXPECT_EQ(resumed.position(), first.position());
}

TEST(RuntimeShardSet, ValidationBatchesAreFixed) {
  TwoShards data;
  ShardSet set(data.glob(), 1000);
  set.next_batch(2, 3);
  const DataPosition before = set.position();
  const auto v1 = set.validation_batches(2, 3, 4);
  set.next_batch(2, 3);
  const auto v2 = set.validation_batches(2, 3, 4);
  EXPECT_EQ(set.position().offset, 3u);
  EXPECT_NE(set.position(), before);
  ASSERT_EQ(v1.size(), 4u);
  ShardSet fresh(data.glob(), 1000);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(v1[i].tokens, v2[i].tokens);
    EXPECT_EQ(v1[i].tokens, fresh.next_batch(2, 3).tokens);
  }
}

TEST(RuntimeShardSet, SeekRejectsPositionsThatDoNotFit) {
  TwoShards data;
  ShardSet set(data.glob(), 1000);
  const std::string src = data.glob();
  EXPECT_EQ(error_of([&] { set.seek({5, 0, 0, ""}); }),
            src + ": data position names shard index 5, but the set has 2 shard(s)");
  EXPECT_EQ(error_of([&] { set.seek({0, 0, 0, "z.bin"}); }),
            src +
                ": data position names shard 'z.bin' at index 0, but that index is now 'a.bin': "
                "the data set changed since the position was saved");
  EXPECT_EQ(error_of([&] { set.seek({0, 11, 0, "a.bin"}); }),
            src + ": data position offset 11 is past the end of 'a.bin' (10 tokens)");
}

TEST(RuntimeShardSet, BadBatchShapes) {
  TwoShards data;
  ShardSet set(data.glob(), 1000);
  EXPECT_EQ(error_of([&] { set.next_batch(2, 10); }),
            data.glob() + ": no shard holds T + 1 = 11 tokens (the largest, " + data.dir / "a.bin" + ", holds 10)");
  EXPECT_EQ(error_of([&] { set.next_batch(0, 3); }), data.glob() + ": batch shape B=0, T=3 must be positive");
}

TEST(RuntimeShardSet, TokenOutOfVocabSurfacesWhenTheShardIsOpened) {
  TempDir dir;
  write_token_shard(dir / "a.bin", iota_tokens(4, 0), 1000);
  write_bytes(dir / "b.bin", shard_bytes(20240520, 1, 4, u16s({1, 2, 500, 3})));
  ShardSet set(dir.str(), 100);
  EXPECT_EQ(set.next_batch(1, 3).tokens, seq(0));
  EXPECT_EQ(error_of([&] { set.next_batch(1, 3); }),
            dir / "b.bin" + ": byte 1028: token 2 has id 500, which is not below vocab_size 100");
}

TEST(RuntimeShardSet, MixedFormats) {
  TempDir dir;
  write_token_shard(dir / "a.bin", iota_tokens(4, 0), 100);
  write_token_shard(dir / "b.bin", iota_tokens(4, 70000), 80000);
  ShardSet set(dir.str(), 80000);
  EXPECT_EQ(set.next_batch(2, 3).tokens, rows(0, 70000));
}

}  // namespace
}  // namespace gc::rt
