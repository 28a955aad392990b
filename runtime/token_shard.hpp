// llm.c token shards and the deterministic batch reader built on them.
//
// A shard is a 1024-byte header of 256 little-endian int32 (magic, version,
// token count, then zeros) followed by the tokens:
//   magic 20240520, version 1: uint16 tokens (GPT-2 style vocabularies)
//   magic 20240801, version 7: uint32 tokens (llm.c's Llama-3 variant)
// and the file size must be exactly 1024 + bytes_per_token * count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/mapped_file.hpp"

namespace gc::rt {

enum class TokenFormat { U16, U32 };

inline constexpr std::uint64_t kShardHeaderBytes = 1024;
inline constexpr std::int32_t kShardMagicU16 = 20240520, kShardVersionU16 = 1;
inline constexpr std::int32_t kShardMagicU32 = 20240801, kShardVersionU32 = 7;

inline std::uint64_t bytes_per_token(TokenFormat f) { return f == TokenFormat::U16 ? 2 : 4; }
// The narrowest format that holds every id below vocab_size.
inline TokenFormat format_for_vocab(std::int64_t vocab_size) {
  return vocab_size <= 65536 ? TokenFormat::U16 : TokenFormat::U32;
}

struct ShardHeader {
  TokenFormat format = TokenFormat::U16;
  std::uint64_t count = 0;  // tokens
};

// Validates a header against the file size. Errors: "PATH: byte N: ...".
ShardHeader parse_shard_header(const std::string& path, const std::uint8_t* header, std::uint64_t file_size);
// Reads and validates only the header (cheap; no token scan).
ShardHeader read_shard_header(const std::string& path);

// A validated, memory-mapped shard. open() checks the header and, when
// vocab_size > 0, that every token is below it (the error names the byte offset).
class TokenShard {
 public:
  static TokenShard open(const std::string& path, std::int64_t vocab_size);

  const std::string& path() const { return file_.path(); }
  TokenFormat format() const { return header_.format; }
  std::uint64_t size() const { return header_.count; }
  std::uint32_t token(std::uint64_t i) const;
  // Copies tokens [start, start + n) into out (bounds-checked).
  void read(std::uint64_t start, std::uint64_t n, std::int32_t* out) const;
  std::vector<std::uint32_t> tokens() const;

 private:
  MappedFile file_;
  ShardHeader header_;
};

// Reads a whole shard (validated as by TokenShard::open).
std::vector<std::uint32_t> read_token_shard(const std::string& path, std::int64_t vocab_size);

// Writes a shard atomically; every token must be below vocab_size (when > 0)
// and fit the format. The first overload picks format_for_vocab(vocab_size).
void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab_size);
void write_token_shard(const std::string& path, const std::uint32_t* tokens, std::size_t n, TokenFormat format,
                       std::int64_t vocab_size = 0);

// Expands a shard source: a glob pattern (glob(3), sorted), a directory (its
// *.bin files, sorted) or a single file. Throws when nothing matches.
std::vector<std::string> expand_shard_paths(const std::string& source);

// How sequences lie in the shards.
//   stream:   llm.c's token stream; sequences of T + 1 tokens overlap by one, so every
//             token is a target exactly once.
//   examples: back-to-back examples of exactly T + 1 tokens (T inputs, then the one
//             target), read without overlap; only the last position is scored, the other
//             targets are kIgnoreTarget (data.format = "anchor", runtime/anchor.hpp).
enum class SequenceLayout { stream, examples };

// A target the loss skips (cross-entropy counts and differentiates only targets ≥ 0).
inline constexpr std::int32_t kIgnoreTarget = -1;

// How many of n targets are scored (≥ 0): the divisor of the mean loss, on every backend.
inline std::int64_t count_scored(const std::int32_t* targets, std::int64_t n) {
  std::int64_t scored = 0;
  for (std::int64_t i = 0; i < n; ++i) scored += targets[i] >= 0 ? 1 : 0;
  return scored;
}

// B sequences of T + 1 tokens: row b holds inputs row(b)[0..T) and targets
// row(b)[1..T] (inputs shifted by one; in the examples layout all but the last
// are kIgnoreTarget).
struct Batch {
  std::int64_t B = 0, T = 0;
  SequenceLayout layout = SequenceLayout::stream;
  std::vector<std::int32_t> tokens;  // B * (T + 1), row-major

  const std::int32_t* row(std::int64_t b) const { return tokens.data() + b * (T + 1); }
  std::vector<std::int32_t> inputs() const;   // B * T
  std::vector<std::int32_t> targets() const;  // B * T
  // Both at once into the caller's buffers (no allocation once they are sized).
  void split(std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) const;
};

// Where the reader stands: the next sequence starts at token `offset` of shard
// `shard`. `epoch` counts wraps past the last shard. shard_name (the file name)
// lets seek() detect that the data set changed since the position was saved.
struct DataPosition {
  std::uint64_t shard = 0;
  std::uint64_t offset = 0;
  std::uint64_t epoch = 0;
  std::string shard_name;

  bool operator==(const DataPosition& o) const {
    return shard == o.shard && offset == o.offset && epoch == o.epoch && shard_name == o.shard_name;
  }
  bool operator!=(const DataPosition& o) const { return !(*this == o); }
};

// A sorted set of shards read as one deterministic stream. Each sequence is
// T + 1 consecutive tokens of one shard; consecutive sequences overlap by one
// token (stride T, as in llm.c), so every token is a target exactly once; in the
// examples layout they do not overlap (stride T + 1). When
// fewer than T + 1 tokens remain in a shard, reading moves to the next shard;
// past the last shard it wraps to the first and increments the epoch. Headers
// are validated on construction; a shard's tokens when it is first opened.
// Not thread-safe.
class ShardSet {
 public:
  // In the examples layout every shard must hold whole examples (a multiple of T + 1 tokens).
  ShardSet(const std::string& source, std::int64_t vocab_size, SequenceLayout layout = SequenceLayout::stream);

  const std::string& source() const { return source_; }
  const std::vector<std::string>& files() const { return files_; }
  const std::vector<std::uint64_t>& counts() const { return counts_; }
  std::uint64_t total_tokens() const;
  // Sequences of T + 1 tokens the set holds without wrapping around, in its layout.
  std::int64_t whole_sequences(std::int64_t T) const;

  Batch next_batch(std::int64_t B, std::int64_t T);
  // The same into `out`, reusing its storage (the training loop: no allocation per step).
  void next_batch(std::int64_t B, std::int64_t T, Batch& out);
  DataPosition position() const;
  // Restores a saved position exactly; throws if it does not fit this set.
  void seek(const DataPosition& position);

  // The fixed evaluation set: n_batches batches read from the start of the set
  // (wrapping when short). Same (B, T, n_batches), same tokens; the training
  // position is not touched.
  std::vector<Batch> validation_batches(std::int64_t B, std::int64_t T, std::int64_t n_batches) const;

 private:
  struct Cursor {
    DataPosition pos;
    std::optional<TokenShard> open;
  };
  void read_sequence(Cursor& cursor, std::int64_t T, std::int32_t* out) const;
  void read_batch(Cursor& cursor, std::int64_t B, std::int64_t T, Batch& out) const;
  const TokenShard& shard(Cursor& cursor) const;
  void check_shape(std::int64_t B, std::int64_t T) const;

  std::string source_;
  std::int64_t vocab_size_;
  SequenceLayout layout_;
  std::vector<std::string> files_;
  std::vector<std::uint64_t> counts_;
  mutable std::vector<bool> validated_;  // token scan done for shard i
  Cursor cursor_;
};

}  // namespace gc::rt
