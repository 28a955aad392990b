#include "data/text_data.hpp"

#include "common/cache_dir.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <glob.h>
#include <optional>
#include <random>
#include <sstream>
#include <unistd.h>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "common/text.hpp"
#include "runtime/sha256.hpp"
#include "runtime/anchor.hpp"
#include "runtime/token_shard.hpp"

namespace gc {

namespace fs = std::filesystem;

namespace {

// A data path: absolute as written, else relative to the directory of the
// file that set it (a base spec's paths stay relative to the base).
fs::path resolve(const Spec& spec, const std::string& key, const std::string& path) {
  const fs::path p(path);
  if (p.is_absolute()) return p.lexically_normal();
  fs::path dir = fs::path(spec.where(key).file).parent_path();
  if (dir.empty()) dir = ".";
  return fs::absolute(dir / p).lexically_normal();
}

// Where prepared data is cached: data.cache_dir when the spec sets it, else
// the user's cache directory (common/cache_dir.hpp), never beside the spec.
fs::path cache_root(const Spec& spec) {
  if (!spec.data.cache_dir.empty()) return resolve(spec, "data.cache_dir", spec.data.cache_dir);
  return user_cache_dir();
}

// Moves a completely written staging directory to `cache`. When another
// gcompile finished the same entry first, its copy is kept and ours dropped,
// so an entry in use is never deleted.
bool publish(const fs::path& staging, const fs::path& cache, const char* what, Diagnostics& diags) {
  std::error_code ec;
  if (fs::exists(cache / "complete", ec)) {
    fs::remove_all(staging, ec);
    return true;
  }
  fs::remove_all(cache, ec);  // an incomplete entry of a crashed run
  fs::rename(staging, cache, ec);
  if (ec && fs::exists(cache / "complete")) {
    fs::remove_all(staging, ec);
    return true;
  }
  if (ec) diags.error({cache.string(), 0, 0}, std::string("cannot move ") + what + " into place: " + ec.message());
  return !ec;
}

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::vector<fs::path> expand_glob(const std::string& pattern) {
  std::vector<fs::path> out;
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

// The text files of a data.train setting, sorted by path.
std::vector<fs::path> text_files(const Spec& spec, Diagnostics& diags) {
  const fs::path root = resolve(spec, "data.train", spec.data.train);
  std::vector<fs::path> files;
  std::error_code ec;
  if (has_glob_chars(spec.data.train)) {
    files = expand_glob(root.string());
  } else if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::recursive_directory_iterator(root, ec)) {
      if (!entry.is_regular_file()) continue;
      const std::string name = entry.path().filename().string();
      for (const auto& ext : spec.data.text_extensions) {
        if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0) {
          files.push_back(entry.path());
          break;
        }
      }
    }
    std::sort(files.begin(), files.end());
  } else if (fs::is_regular_file(root, ec)) {
    files.push_back(root);
  }
  if (files.empty()) {
    std::string hint = fs::exists(root, ec) ? " (no file with extension " + join(spec.data.text_extensions, ", ") + ")"
                                            : " (no such file or directory)";
    if (root.string().rfind("/usr/share/doc/python3.11", 0) == 0) hint += "; run scripts/setup to install python3.11-doc";
    diags.error(spec.where("data.train"), "no text files found at '" + root.string() + "'" + hint);
  }
  return files;
}

std::optional<std::string> read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Feeds the corpus to SentencePiece one line at a time.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& docs) : docs_(docs) { advance(); }
  bool done() const override { return doc_ >= docs_.size(); }
  void Next() override { advance(); }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  void advance() {
    while (doc_ < docs_.size()) {
      const std::string& d = docs_[doc_];
      if (pos_ >= d.size()) {
        ++doc_;
        pos_ = 0;
        continue;
      }
      const std::size_t nl = d.find('\n', pos_);
      const std::size_t end = nl == std::string::npos ? d.size() : nl;
      line_ = d.substr(pos_, end - pos_);
      pos_ = end + 1;
      if (!line_.empty()) return;
    }
  }

  const std::vector<std::string>& docs_;
  std::size_t doc_ = 0, pos_ = 0;
  std::string line_;
};

std::string train_tokenizer(const Spec& spec, const std::vector<std::string>& docs, Diagnostics& diags) {
  const std::unordered_map<std::string, std::string> options = {
      {"model_type", spec.data.tokenizer_type},
      {"vocab_size", std::to_string(spec.model.vocab_size)},
      {"character_coverage", "1.0"},
      // Every byte stays encodable, when the vocabulary has room for 256 byte pieces.
      {"byte_fallback", spec.model.vocab_size >= 512 ? "true" : "false"},
      {"split_digits", "true"},
      {"normalization_rule_name", "identity"},  // keep code and markup exactly
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"max_sentence_length", "16384"},
      {"input_sentence_size", "0"},  // use every line: no sampling, deterministic
      {"shuffle_input_sentence", "false"},
      {"hard_vocab_limit", "false"},
      {"num_threads", "1"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},
  };
  LineIterator lines(docs);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(options, &lines, &model);
  if (!status.ok()) {
    diags.error(spec.where("model.vocab_size"), "SentencePiece could not train a " + std::to_string(spec.model.vocab_size) +
                                                    "-token tokenizer on this text: " + status.ToString());
    return "";
  }
  return model;
}

std::string cache_key(const Spec& spec, const std::vector<fs::path>& files, const std::vector<std::string>& docs,
                      const std::string& tokenizer) {
  std::string material = "gcompile-text-data-v1\n";
  material += "vocab=" + std::to_string(spec.model.vocab_size) + "\ntype=" + spec.data.tokenizer_type +
              "\nval_fraction=" + format_double(spec.data.val_fraction) + "\ntokenizer=" + rt::sha256_hex(tokenizer) + "\n";
  for (std::size_t i = 0; i < files.size(); ++i) material += files[i].string() + "\t" + rt::sha256_hex(docs[i]) + "\n";
  return rt::sha256_hex(material).substr(0, 16);
}

bool write_text_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  return static_cast<bool>(out);
}

}  // namespace

// Synthetic tasks, one example per sequence-sized chunk: [BOS] x SEP f(x),
// where x is a random token string and f copies, reverses or sorts it.
std::vector<std::uint32_t> synthetic_tokens(const Spec& spec, std::uint64_t seed, std::int64_t count) {
  std::mt19937_64 rng(seed);
  const std::uint32_t first = 3, span = std::uint32_t(std::max<std::int64_t>(1, spec.model.vocab_size - first));
  const std::int64_t length = std::max<std::int64_t>(1, std::min<std::int64_t>(32, (spec.train.seq_len - 2) / 2));
  std::vector<std::uint32_t> out;
  out.reserve(std::size_t(count));
  while (std::int64_t(out.size()) < count) {
    std::vector<std::uint32_t> x(std::size_t(rng() % std::uint64_t(length)) + 1);
    for (auto& t : x) t = first + std::uint32_t(rng() % span);
    std::vector<std::uint32_t> y = x;
    if (spec.data.synthetic_task == "reverse") std::reverse(y.begin(), y.end());
    if (spec.data.synthetic_task == "sort") std::sort(y.begin(), y.end());
    out.push_back(1);  // BOS
    out.insert(out.end(), x.begin(), x.end());
    out.push_back(2);  // separator
    out.insert(out.end(), y.begin(), y.end());
  }
  out.resize(std::size_t(count));
  return out;
}

// Generated data (the synthetic and anchor tasks): train.bin and val.bin from `make`,
// written once into cache_root/NAME-KEY through a staging directory and reused after.
// A fresh write sets the token counts; a reused cache leaves them to the caller.
using ShardPair = std::pair<std::vector<std::uint32_t>, std::vector<std::uint32_t>>;
std::optional<PreparedData> generated_data(const Spec& spec, const std::string& name, const std::string& key_text,
                                           const std::function<ShardPair()>& make, const char* what,
                                           Diagnostics& diags) {
  PreparedData out;
  const fs::path cache = cache_root(spec) / (name + "-" + rt::sha256_hex(key_text).substr(0, 16));
  out.train = (cache / "train.bin").string();
  out.val = (cache / "val.bin").string();
  std::error_code ec;
  if (fs::exists(cache / "complete", ec)) {
    out.reused = true;
    return out;
  }
  const fs::path staging = cache.string() + ".tmp" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  try {
    const auto [train, val] = make();
    rt::write_token_shard((staging / "train.bin").string(), train, spec.model.vocab_size);
    rt::write_token_shard((staging / "val.bin").string(), val, spec.model.vocab_size);
    out.train_tokens = std::int64_t(train.size());
    out.val_tokens = std::int64_t(val.size());
  } catch (const std::exception& e) {
    diags.error({staging.string(), 0, 0}, e.what());
    return std::nullopt;
  }
  std::ofstream(staging / "complete") << out.train_tokens << " " << out.val_tokens << "\n";
  if (!publish(staging, cache, what, diags)) return std::nullopt;
  return out;
}

std::optional<PreparedData> synthetic_data(const Spec& spec, std::int64_t train_tokens, Diagnostics& diags) {
  const std::string key = "gcompile-synthetic-v1\n" + spec.data.synthetic_task + "\n" +
                          std::to_string(spec.model.vocab_size) + "\n" + std::to_string(spec.train.seq_len) + "\n" +
                          std::to_string(spec.experiment.seed) + "\n" + std::to_string(train_tokens);
  return generated_data(
      spec, "synthetic", key,
      [&] {
        return ShardPair{synthetic_tokens(spec, spec.experiment.seed, train_tokens),
                         synthetic_tokens(spec, spec.experiment.seed ^ 0x9e3779b97f4a7c15ull, 1 << 16)};
      },
      "synthetic data", diags);
}

// The anchor task (runtime/anchor.hpp): train.bin holds the training stream, val.bin the
// test-key stream of the trained pairs (val_loss is the test loss), 10 tokens a sequence.
std::optional<PreparedData> anchor_data(const Spec& spec, Diagnostics& diags) {
  namespace anchor = rt::anchor;
  const auto& d = spec.data;
  const anchor::Task task{d.anchor_seed, d.anchor_held_first, d.anchor_held_second};
  const std::string key = "gcompile-anchor-v1\n" + std::to_string(task.seed) + "\n" + std::to_string(task.held_first) +
                          "," + std::to_string(task.held_second) + "\n" + std::to_string(d.anchor_train_sequences) +
                          "\n" + std::to_string(d.anchor_eval_sequences) + "\n" + std::to_string(spec.model.vocab_size);
  auto out = generated_data(
      spec, "anchor", key,
      [&] {
        return ShardPair{anchor::sequence_tokens(anchor::make_sequences(
                             task, anchor::Stream::train, std::uint64_t(d.anchor_train_sequences))),
                         anchor::sequence_tokens(anchor::make_sequences(task, anchor::Stream::test,
                                                                        std::uint64_t(d.anchor_eval_sequences)))};
      },
      "anchor-task data", diags);
  if (out) {  // known without reading the cache
    out->train_tokens = d.anchor_train_sequences * (anchor::kInputs + 1);
    out->val_tokens = d.anchor_eval_sequences * (anchor::kInputs + 1);
  }
  return out;
}

std::optional<PreparedData> prepare_data(const Spec& spec, Diagnostics& diags) {
  PreparedData out;
  if (spec.data.format == DataFormat::anchor) return anchor_data(spec, diags);
  if (spec.data.format == DataFormat::synthetic) {
    // Enough for the whole run (the reader wraps around), within reason.
    const std::int64_t needed = std::int64_t(spec.train.global_batch) * (spec.train.seq_len + 1) *
                                (spec.train.steps ? *spec.train.steps : 1000);
    return synthetic_data(spec, std::clamp<std::int64_t>(needed, 1 << 16, 1 << 24), diags);
  }
  if (spec.data.format == DataFormat::llmc) {
    out.train = resolve(spec, "data.train", spec.data.train).string();
    out.val = resolve(spec, "data.val", spec.data.val).string();
    return out;
  }
  const std::vector<fs::path> files = text_files(spec, diags);
  if (files.empty()) return std::nullopt;
  std::vector<std::string> docs;
  for (const auto& f : files) {
    auto text = read_all(f);
    if (!text) {
      diags.error({f.string(), 0, 0}, "cannot read text file");
      return std::nullopt;
    }
    docs.push_back(std::move(*text));
  }
  std::string tokenizer;
  if (!spec.data.tokenizer.empty()) {
    auto model = read_all(resolve(spec, "data.tokenizer", spec.data.tokenizer));
    if (!model) {
      diags.error(spec.where("data.tokenizer"), "cannot read tokenizer model '" +
                                                    resolve(spec, "data.tokenizer", spec.data.tokenizer).string() + "'");
      return std::nullopt;
    }
    tokenizer = std::move(*model);
  }
  const fs::path cache = cache_root(spec) / ("text-" + cache_key(spec, files, docs, tokenizer));
  out.train = (cache / "train.bin").string();
  out.val = (cache / "val.bin").string();
  out.vocab_file = (cache / "vocab.txt").string();
  out.tokenizer_file = (cache / "tokenizer.model").string();
  std::error_code ec;
  if (fs::exists(cache / "complete", ec)) {
    out.reused = true;
    return out;
  }
  if (tokenizer.empty()) tokenizer = train_tokenizer(spec, docs, diags);
  if (tokenizer.empty()) return std::nullopt;

  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(tokenizer).ok()) {
    diags.error(spec.where("data.tokenizer"), "not a SentencePiece model");
    return std::nullopt;
  }
  if (sp.GetPieceSize() > spec.model.vocab_size) {
    diags.error(spec.where("model.vocab_size"), "the tokenizer has " + std::to_string(sp.GetPieceSize()) +
                                                    " pieces, more than model.vocab_size (" +
                                                    std::to_string(spec.model.vocab_size) + ")");
    return std::nullopt;
  }
  // Every k-th document is held out for validation (k = 1 / val_fraction),
  // so both splits sample the whole corpus.
  const std::size_t stride = std::max<std::size_t>(2, std::size_t(std::llround(1.0 / spec.data.val_fraction)));
  std::vector<std::uint32_t> train, val;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    std::vector<int> ids;
    sp.Encode(docs[i], &ids);
    auto& split = (docs.size() >= stride && i % stride == stride / 2) ? val : train;
    split.push_back(std::uint32_t(sp.bos_id()));
    for (int id : ids) split.push_back(std::uint32_t(id));
  }
  // Few documents (a single file, say): hold out the tail of the training
  // stream instead, so validation always has whole sequences to read.
  const std::size_t min_val = std::max<std::size_t>(
      4 * std::size_t(spec.train.seq_len + 1), std::size_t(double(train.size() + val.size()) * spec.data.val_fraction));
  if (val.size() < min_val && train.size() > 2 * min_val) {
    const std::size_t n = min_val - val.size();
    val.insert(val.end(), train.end() - std::ptrdiff_t(n), train.end());
    train.resize(train.size() - n);
  }
  std::string vocab;
  for (int id = 0; id < sp.GetPieceSize(); ++id) vocab += std::to_string(id) + "\t" + sp.IdToPiece(id) + "\n";

  const fs::path staging = cache.string() + ".tmp" + std::to_string(::getpid());
  fs::remove_all(staging, ec);
  fs::create_directories(staging, ec);
  try {
    rt::write_token_shard((staging / "train.bin").string(), train, spec.model.vocab_size);
    rt::write_token_shard((staging / "val.bin").string(), val, spec.model.vocab_size);
  } catch (const std::exception& e) {
    diags.error({staging.string(), 0, 0}, e.what());
    return std::nullopt;
  }
  if (!write_text_file(staging / "tokenizer.model", tokenizer) || !write_text_file(staging / "vocab.txt", vocab) ||
      !write_text_file(staging / "complete", std::to_string(train.size()) + " " + std::to_string(val.size()) + "\n")) {
    diags.error({staging.string(), 0, 0}, "cannot write the tokenized data");
    return std::nullopt;
  }
  if (!publish(staging, cache, "tokenized data", diags)) return std::nullopt;
  out.train_tokens = std::int64_t(train.size());
  out.val_tokens = std::int64_t(val.size());
  return out;
}

}  // namespace gc
