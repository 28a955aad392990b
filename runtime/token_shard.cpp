#include "runtime/token_shard.hpp"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <filesystem>

#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::rt {

namespace fs = std::filesystem;

namespace {

std::string file_name(const std::string& path) { return fs::path(path).filename().string(); }

std::uint64_t token_offset(std::uint64_t index, TokenFormat f) {
  return kShardHeaderBytes + index * bytes_per_token(f);
}

std::string not_below_vocab(std::uint64_t index, std::uint64_t id, std::int64_t vocab_size) {
  return "token " + std::to_string(index) + " has id " + std::to_string(id) + ", which is not below vocab_size " +
         std::to_string(vocab_size);
}

// Scans every token; the error names the first bad one by byte offset.
void check_token_range(const std::string& path, const std::uint8_t* tokens, const ShardHeader& h,
                       std::int64_t vocab_size) {
  const auto limit = std::uint64_t(vocab_size);
  for (std::uint64_t i = 0; i < h.count; ++i) {
    const std::uint64_t id = h.format == TokenFormat::U16 ? load_le16(tokens + 2 * i) : load_le32(tokens + 4 * i);
    if (id >= limit) throw RuntimeError(path, token_offset(i, h.format), not_below_vocab(i, id, vocab_size));
  }
}

std::string format_size_text(TokenFormat f, std::uint64_t count) {
  const std::uint64_t expected = token_offset(count, f);
  return "expected 1024 + " + std::to_string(bytes_per_token(f)) + "\u00b7" + std::to_string(count) + " = " +
         std::to_string(expected) + " bytes";
}

void put_le32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::uint8_t(v >> (8 * i));
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> out;
  if (rc == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) throw RuntimeError("no token shards match '" + pattern + "'");
  if (rc != 0) throw RuntimeError("cannot expand '" + pattern + "' (glob error " + std::to_string(rc) + ")");
  return out;  // glob(3) sorts
}

std::vector<std::string> list_bin_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".bin" && it->is_regular_file()) out.push_back(it->path().string());
  }
  if (ec) throw RuntimeError(dir, "cannot list directory: " + ec.message());
  if (out.empty()) throw RuntimeError(dir, "directory contains no *.bin token shards");
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

ShardHeader parse_shard_header(const std::string& path, const std::uint8_t* header, std::uint64_t file_size) {
  if (file_size < kShardHeaderBytes) {
    throw RuntimeError(
        path, "file is " + std::to_string(file_size) + " bytes, shorter than the 1024-byte llm.c shard header");
  }
  const auto magic = std::int32_t(load_le32(header));
  const auto version = std::int32_t(load_le32(header + 4));
  const auto count = std::int32_t(load_le32(header + 8));
  ShardHeader h;
  if (magic == kShardMagicU16) {
    h.format = TokenFormat::U16;
  } else if (magic == kShardMagicU32) {
    h.format = TokenFormat::U32;
  } else {
    throw RuntimeError(path, 0,
                       "bad magic " + std::to_string(magic) +
                           " (expected 20240520 for uint16 tokens or 20240801 for uint32 tokens): "
                           "not an llm.c token shard");
  }
  const std::int32_t want = h.format == TokenFormat::U16 ? kShardVersionU16 : kShardVersionU32;
  if (version != want) {
    throw RuntimeError(path, 4,
                       "version " + std::to_string(version) + " does not match magic " + std::to_string(magic) +
                           " (expected version " + std::to_string(want) + ")");
  }
  if (count < 0) throw RuntimeError(path, 8, "negative token count " + std::to_string(count));
  h.count = std::uint64_t(count);
  if (file_size != token_offset(h.count, h.format)) {
    throw RuntimeError(path, 8,
                       "token count " + std::to_string(count) + " does not match file size " +
                           std::to_string(file_size) + " (" + format_size_text(h.format, h.count) + ")");
  }
  return h;
}

ShardHeader read_shard_header(const std::string& path) {
  // Map lazily: mmap touches no pages beyond the header here.
  const MappedFile file = MappedFile::open(path);
  return parse_shard_header(path, file.data(), file.size());
}

TokenShard TokenShard::open(const std::string& path, std::int64_t vocab_size) {
  TokenShard shard;
  shard.file_ = MappedFile::open(path);
  shard.header_ = parse_shard_header(path, shard.file_.data(), shard.file_.size());
  if (vocab_size > 0) check_token_range(path, shard.file_.data() + kShardHeaderBytes, shard.header_, vocab_size);
  return shard;
}

std::uint32_t TokenShard::token(std::uint64_t i) const {
  if (i >= header_.count) {
    throw RuntimeError(
        path(), "token index " + std::to_string(i) + " is out of range (" + std::to_string(header_.count) + " tokens)");
  }
  const std::uint8_t* p = file_.data() + token_offset(i, header_.format);
  return header_.format == TokenFormat::U16 ? load_le16(p) : load_le32(p);
}

void TokenShard::read(std::uint64_t start, std::uint64_t n, std::int32_t* out) const {
  if (start > header_.count || n > header_.count - start) {
    throw RuntimeError(path(), "tokens [" + std::to_string(start) + ", " + std::to_string(start + n) +
                                   ") are out of range (" + std::to_string(header_.count) + " tokens)");
  }
  const std::uint8_t* p = file_.data() + token_offset(start, header_.format);
  if (header_.format == TokenFormat::U16) {
    for (std::uint64_t i = 0; i < n; ++i) out[i] = std::int32_t(load_le16(p + 2 * i));
  } else {
    for (std::uint64_t i = 0; i < n; ++i) out[i] = std::int32_t(load_le32(p + 4 * i));
  }
}

std::vector<std::uint32_t> TokenShard::tokens() const {
  std::vector<std::uint32_t> out(header_.count);
  for (std::uint64_t i = 0; i < header_.count; ++i) out[i] = token(i);
  return out;
}

std::vector<std::uint32_t> read_token_shard(const std::string& path, std::int64_t vocab_size) {
  return TokenShard::open(path, vocab_size).tokens();
}

void write_token_shard(const std::string& path, const std::vector<std::uint32_t>& tokens, std::int64_t vocab_size) {
  write_token_shard(path, tokens.data(), tokens.size(), format_for_vocab(vocab_size), vocab_size);
}

void write_token_shard(const std::string& path, const std::uint32_t* tokens, std::size_t n, TokenFormat format,
                       std::int64_t vocab_size) {
  if (n > std::size_t(INT32_MAX)) {
    throw RuntimeError(
        path, std::to_string(n) + " tokens exceed the llm.c shard limit of " + std::to_string(INT32_MAX) + " tokens");
  }
  const std::uint64_t max_id = format == TokenFormat::U16 ? 0xFFFFu : 0xFFFFFFFFu;
  for (std::size_t i = 0; i < n; ++i) {
    if (vocab_size > 0 && tokens[i] >= std::uint64_t(vocab_size)) {
      throw RuntimeError(path, token_offset(i, format), not_below_vocab(i, tokens[i], vocab_size));
    }
    if (tokens[i] > max_id) {
      throw RuntimeError(
          path, token_offset(i, format),
          "token " + std::to_string(i) + " has id " + std::to_string(tokens[i]) + ", which does not fit uint16 tokens");
    }
  }
  write_file_atomic(path, [&](FileWriter& w) {
    std::vector<std::uint8_t> header(kShardHeaderBytes, 0);
    const bool u16 = format == TokenFormat::U16;
    put_le32(header.data(), std::uint32_t(u16 ? kShardMagicU16 : kShardMagicU32));
    put_le32(header.data() + 4, std::uint32_t(u16 ? kShardVersionU16 : kShardVersionU32));
    put_le32(header.data() + 8, std::uint32_t(n));
    w.write(header.data(), header.size());
    const std::size_t bpt = u16 ? 2 : 4, chunk = 1 << 16;
    std::vector<std::uint8_t> buf(chunk * bpt);
    for (std::size_t start = 0; start < n; start += chunk) {
      const std::size_t m = std::min(chunk, n - start);
      for (std::size_t i = 0; i < m; ++i) {
        for (std::size_t b = 0; b < bpt; ++b) buf[i * bpt + b] = std::uint8_t(tokens[start + i] >> (8 * b));
      }
      w.write(buf.data(), m * bpt);
    }
  });
}

std::vector<std::string> expand_shard_paths(const std::string& source) {
  if (has_glob_chars(source)) return expand_glob(source);
  struct stat st{};
  if (::stat(source.c_str(), &st) != 0) throw RuntimeError(source, "cannot open: " + errno_text(errno));
  if (S_ISDIR(st.st_mode)) return list_bin_files(source);
  return {source};
}

std::vector<std::int32_t> Batch::inputs() const {
  std::vector<std::int32_t> out(std::size_t(B * T));
  for (std::int64_t b = 0; b < B; ++b) std::copy(row(b), row(b) + T, out.begin() + b * T);
  return out;
}

std::vector<std::int32_t> Batch::targets() const {
  std::vector<std::int32_t> inputs, out;
  split(inputs, out);
  return out;
}

void Batch::split(std::vector<std::int32_t>& inputs, std::vector<std::int32_t>& targets) const {
  inputs.resize(std::size_t(B * T));
  targets.resize(std::size_t(B * T));
  for (std::int64_t b = 0; b < B; ++b) {
    std::copy(row(b), row(b) + T, inputs.begin() + b * T);
    if (layout == SequenceLayout::examples) {
      std::fill(targets.begin() + b * T, targets.begin() + (b + 1) * T - 1, kIgnoreTarget);
      targets[std::size_t((b + 1) * T - 1)] = row(b)[T];
    } else {
      std::copy(row(b) + 1, row(b) + 1 + T, targets.begin() + b * T);
    }
  }
}

ShardSet::ShardSet(const std::string& source, std::int64_t vocab_size, SequenceLayout layout)
    : source_(source), vocab_size_(vocab_size), layout_(layout), files_(expand_shard_paths(source)) {
  for (const auto& f : files_) counts_.push_back(read_shard_header(f).count);
  validated_.assign(files_.size(), false);
}

std::uint64_t ShardSet::total_tokens() const {
  std::uint64_t total = 0;
  for (auto c : counts_) total += c;
  return total;
}

std::int64_t ShardSet::whole_sequences(std::int64_t T) const {
  const std::uint64_t need = std::uint64_t(T) + 1;
  const std::uint64_t stride = layout_ == SequenceLayout::examples ? need : std::uint64_t(T);
  std::int64_t sequences = 0;
  for (std::uint64_t count : counts_) {
    if (count >= need) sequences += std::int64_t((count - need) / stride + 1);
  }
  return sequences;
}

void ShardSet::check_shape(std::int64_t B, std::int64_t T) const {
  if (B < 1 || T < 1) {
    throw RuntimeError(source_,
                       "batch shape B=" + std::to_string(B) + ", T=" + std::to_string(T) + " must be positive");
  }
  const auto largest = std::max_element(counts_.begin(), counts_.end());
  if (*largest < std::uint64_t(T) + 1) {
    throw RuntimeError(source_, "no shard holds T + 1 = " + std::to_string(T + 1) + " tokens (the largest, " +
                                    files_[std::size_t(largest - counts_.begin())] + ", holds " +
                                    std::to_string(*largest) + ")");
  }
  if (layout_ == SequenceLayout::examples) {
    for (std::size_t i = 0; i < files_.size(); ++i) {
      if (counts_[i] % std::uint64_t(T + 1) != 0) {
        throw RuntimeError(files_[i], "holds " + std::to_string(counts_[i]) +
                                          " tokens, not whole examples of T + 1 = " + std::to_string(T + 1) +
                                          " tokens (T inputs and the target): was it written for this seq_len?");
      }
    }
  }
}

const TokenShard& ShardSet::shard(Cursor& cursor) const {
  const std::size_t i = cursor.pos.shard;
  if (!cursor.open || cursor.open->path() != files_[i]) {
    cursor.open.reset();
    cursor.open = TokenShard::open(files_[i], validated_[i] ? 0 : vocab_size_);
    validated_[i] = true;
    if (cursor.open->size() != counts_[i]) {
      throw RuntimeError(files_[i], "changed while training (" + std::to_string(counts_[i]) + " tokens, now " +
                                        std::to_string(cursor.open->size()) + ")");
    }
  }
  return *cursor.open;
}

void ShardSet::read_sequence(Cursor& cursor, std::int64_t T, std::int32_t* out) const {
  const auto need = std::uint64_t(T) + 1;
  DataPosition& pos = cursor.pos;
  // check_shape guarantees some shard fits, so this ends within one cycle.
  while (counts_[pos.shard] < need || pos.offset > counts_[pos.shard] - need) {
    pos.offset = 0;
    if (++pos.shard == files_.size()) {
      pos.shard = 0;
      ++pos.epoch;
    }
  }
  shard(cursor).read(pos.offset, need, out);
  pos.offset += layout_ == SequenceLayout::examples ? need : std::uint64_t(T);
}

void ShardSet::read_batch(Cursor& cursor, std::int64_t B, std::int64_t T, Batch& out) const {
  check_shape(B, T);
  out.B = B;
  out.T = T;
  out.layout = layout_;
  out.tokens.resize(std::size_t(B * (T + 1)));
  for (std::int64_t b = 0; b < B; ++b) read_sequence(cursor, T, out.tokens.data() + b * (T + 1));
}

Batch ShardSet::next_batch(std::int64_t B, std::int64_t T) {
  Batch batch;
  read_batch(cursor_, B, T, batch);
  return batch;
}

void ShardSet::next_batch(std::int64_t B, std::int64_t T, Batch& out) { read_batch(cursor_, B, T, out); }

DataPosition ShardSet::position() const {
  DataPosition p = cursor_.pos;
  p.shard_name = file_name(files_[p.shard]);
  return p;
}

void ShardSet::seek(const DataPosition& p) {
  if (p.shard >= files_.size()) {
    throw RuntimeError(source_, "data position names shard index " + std::to_string(p.shard) + ", but the set has " +
                                    std::to_string(files_.size()) + " shard(s)");
  }
  const std::string actual = file_name(files_[p.shard]);
  if (!p.shard_name.empty() && p.shard_name != actual) {
    throw RuntimeError(source_, "data position names shard '" + p.shard_name + "' at index " + std::to_string(p.shard) +
                                    ", but that index is now '" + actual +
                                    "': the data set changed since the position was saved");
  }
  if (p.offset > counts_[p.shard]) {
    throw RuntimeError(source_, "data position offset " + std::to_string(p.offset) + " is past the end of '" + actual +
                                    "' (" + std::to_string(counts_[p.shard]) + " tokens)");
  }
  if (p.shard != cursor_.pos.shard) cursor_.open.reset();
  cursor_.pos = p;
  cursor_.pos.shard_name.clear();
}

std::vector<Batch> ShardSet::validation_batches(std::int64_t B, std::int64_t T, std::int64_t n_batches) const {
  Cursor cursor;
  std::vector<Batch> out(std::size_t(n_batches > 0 ? n_batches : 0));
  for (Batch& batch : out) read_batch(cursor, B, T, batch);
  return out;
}

}  // namespace gc::rt
