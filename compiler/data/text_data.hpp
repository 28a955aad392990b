// Text data: a spec with data.format = "text" names text files (a file, a
// directory searched recursively for data.text_extensions, or a glob). gcompile
// trains a SentencePiece tokenizer on them (or loads data.tokenizer), encodes
// every document as [BOS] + tokens, and writes llm.c token shards plus the
// vocabulary into a cache directory keyed by the content and the settings, so
// a second run reuses them. Everything is deterministic.
#pragma once

#include <optional>
#include <string>

#include "common/diagnostics.hpp"
#include "spec/spec.hpp"

namespace gc {

struct PreparedData {
  std::string train;       // shard file or glob, absolute
  std::string val;         // shard file or glob, absolute
  std::string vocab_file;  // "id<TAB>piece" lines, absolute ("" when unknown)
  std::string tokenizer_file;  // the SentencePiece model, absolute ("" for token or synthetic data)
  std::int64_t train_tokens = 0, val_tokens = 0;
  bool reused = false;  // served from the cache
};

// Resolves the spec's data section into shard paths, tokenizing text data
// when needed. Paths in the spec are relative to the spec file's directory.
std::optional<PreparedData> prepare_data(const Spec& spec, Diagnostics& diags);

}  // namespace gc
