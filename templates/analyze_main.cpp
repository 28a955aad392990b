// ./analyze: the papers' analyses from checkpoints (docs/metrics.md).
//
//   analyze metrics CHECKPOINT     every in-loop metric on the validation set
//   analyze tokens CHECKPOINT      per-token log p of the targets, to a token file
//   analyze compare A B            seed 000 §2.5: Δp, Δsym p, difficulty deciles
//   analyze anchor CHECKPOINT      the anchor task's accuracies (data.format = "anchor")
//
// CHECKPOINT is a checkpoint directory (RUN/checkpoints/step_N) or a run
// directory (its latest checkpoint) of this experiment. compare takes token
// files (from this or another tree: γ ablations are different specs) or
// checkpoints of this experiment.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "analysis/anchor_eval.hpp"
#include "analysis/token_compare.hpp"
#include "config.hpp"
#include "cpu/metric_ops.hpp"
#include "engine/cpu_model.hpp"
#include "engine/make_engine.hpp"
#include "metrics/collector.hpp"
#include "plan.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/metrics_log.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/token_shard.hpp"
#include "train/load_weights.hpp"
#include "train/moe_state.hpp"
#include "train/sample.hpp"

namespace {

namespace fs = std::filesystem;
using gc::rt::RuntimeError;
using gc::tree::Json;

const char* const kUsage =
    "usage: analyze metrics CHECKPOINT [-o FILE.jsonl] [--images DIR] [--batches N] [--val-data P] [--train-data P]\n"
    "                          [--device cpu|cuda|auto]\n"
    "       analyze tokens CHECKPOINT -o FILE.safetensors [--batches N] [--val-data P]\n"
    "       analyze compare A B [-o FILE.json] [--tokens-out FILE.tsv] [--top N] [--context N]\n"
    "                           [--label-a NAME] [--label-b NAME] [--batches N] [--val-data P]\n"
    "       analyze anchor CHECKPOINT [-o FILE.jsonl]\n\n"
    "CHECKPOINT: a checkpoint directory (RUN/checkpoints/step_N) or a run directory (its latest).\n"
    "  metrics   every metric of docs/metrics.md at that checkpoint, as metrics.jsonl records\n"
    "            (stdout unless -o); --images DIR also writes the cosine heatmaps under DIR\n"
    "  tokens    log p of every validation target, for compare (possibly with another tree's file)\n"
    "  compare   token-level comparison (seed 000 §2.5), A = the small-init model: Δp, Δsym p,\n"
    "            its histogram, ten difficulty deciles, the largest gains in context.\n"
    "            A and B: token files or checkpoints of this experiment.\n"
    "  anchor    data.format = \"anchor\" only: accuracy on seen pairs (train and test keys) and\n"
    "            on the held-out pair, inferential (composite) and symmetric (mirror's answer)\n"
    "  --device D      metrics only: cpu, cuda or auto (default: the GPU when this tree has the CUDA\n"
    "                  backend and one is usable, else the CPU); the same measurements either way\n"
    "  --batches N     validation batches (default: metrics the spec's eval_batches; tokens and\n"
    "                  compare the whole validation set, at most 2^20 tokens)\n";

struct Args {
  std::string command, out, images, val_data = gc::tree::kValData, train_data = gc::tree::kTrainData, tokens_out;
  std::string device = "auto";
  std::string label_a, label_b;
  std::vector<std::string> inputs;
  std::int64_t batches = 0;
  int top = 20, context = 24;
};

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int positive(const std::string& flag, const std::string& v) {
  if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) <= 0) {
    throw UsageError(flag + " needs a positive integer, not '" + v + "'");
  }
  return std::stoi(v);
}

Args parse(int argc, char** argv) {
  Args a;
  if (argc < 2) throw UsageError("missing command (metrics, tokens, compare or anchor)");
  a.command = argv[1];
  if (a.command != "metrics" && a.command != "tokens" && a.command != "compare" && a.command != "anchor") {
    throw UsageError("unknown command '" + a.command + "' (metrics, tokens, compare or anchor)");
  }
  if (a.command == "anchor" && !gc::tree::kAnchorTask) {
    throw UsageError("'anchor' needs a tree of data.format = \"anchor\" (this experiment's data is not the anchor task)");
  }
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "-o" || arg == "--out") {
      a.out = value();
    } else if (arg == "--images") {
      a.images = value();
    } else if (arg == "--device") {
      a.device = value();
      if (a.device != "cpu" && a.device != "cuda" && a.device != "auto") {
        throw UsageError("--device needs cpu, cuda or auto, not '" + a.device + "'");
      }
    } else if (arg == "--val-data") {
      a.val_data = value();
    } else if (arg == "--train-data") {
      a.train_data = value();
    } else if (arg == "--tokens-out") {
      a.tokens_out = value();
    } else if (arg == "--label-a") {
      a.label_a = value();
    } else if (arg == "--label-b") {
      a.label_b = value();
    } else if (arg == "--batches") {
      a.batches = positive(arg, value());
    } else if (arg == "--top") {
      a.top = positive(arg, value());
    } else if (arg == "--context") {
      a.context = positive(arg, value());
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      a.inputs.push_back(arg);
    }
  }
  const std::size_t want = a.command == "compare" ? 2 : 1;
  if (a.inputs.size() != want) {
    throw UsageError("'" + a.command + "' takes " + std::to_string(want) + " input" + (want > 1 ? "s" : "") +
                     " (got " + std::to_string(a.inputs.size()) + ")");
  }
  if (a.command == "tokens" && a.out.empty()) throw UsageError("'tokens' needs -o FILE.safetensors");
  return a;
}

// Whole batches available in the validation shards without wrapping around.
std::int64_t available_batches(const gc::rt::ShardSet& val) {
  return val.whole_sequences(gc::tree::kSeqLen) / gc::tree::kMicroBatch;
}

std::vector<gc::rt::Batch> validation(const Args& a, std::int64_t default_batches) {
  gc::rt::ShardSet val(a.val_data, gc::tree::kVocab, gc::tree::sequence_layout());
  const std::int64_t available = available_batches(val);
  if (available == 0) {
    throw RuntimeError(a.val_data, "too little validation data for one batch of " +
                                       std::to_string(gc::tree::kMicroBatch) + " sequences of " +
                                       std::to_string(gc::tree::kSeqLen + 1) + " tokens");
  }
  const std::int64_t n = a.batches > 0 ? a.batches : std::min(default_batches, available);
  if (n > available) {
    throw RuntimeError(a.val_data, "--batches " + std::to_string(n) + " exceeds the " + std::to_string(available) +
                                       " batches the validation data holds");
  }
  return val.validation_batches(gc::tree::kMicroBatch, gc::tree::kSeqLen, n);
}

void emit(const std::string& out, const std::string& text) {
  if (out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
  } else {
    gc::rt::write_file_atomic(out, text);
  }
}

// The engine that measures: the CUDA engine (metrics reduced on the GPU: cuda/metric_ops.cuh,
// cuda/weight_stats.cuh) or the CPU engine over a host model, both holding the checkpoint's
// weights; the measurements below are the same code for both.
struct Measurer {
  std::unique_ptr<gc::tree::Model<float>> host;  // the CPU engine's model
  std::vector<float> params, m, v;           // the weights on the host (the CUDA engine's upload), zero moments
  std::unique_ptr<gc::tree::Engine> engine;
  std::int64_t step = 0;
};

Measurer open_measurer(const Args& a) {
  Measurer out;
  const bool on_gpu = gc::tree::runs_on_gpu(a.device);
  if (on_gpu) {  // the weights go to the device: a host copy of the parameters, no host model
    out.params.assign(std::size_t(gc::tree::kOffsets.at[gc::tree::kNumParams]), 0.0f);
    std::vector<std::vector<float>> biases;
    out.step = gc::tree::load_weights(a.inputs[0], out.params.data(), biases);
    out.engine = gc::tree::make_engine(true, {});
    out.m.assign(out.params.size(), 0.0f);
    out.engine->upload(out.params.data(), out.m.data(), out.m.data());
    if (!biases.empty()) out.engine->set_moe_biases(biases);
    out.engine->prepare_metrics(/*every_metric=*/true);
    return out;
  }
  out.host = std::make_unique<gc::tree::Model<float>>(gc::tree::kMicroBatch, gc::tree::kSeqLen, gc::tree::kKeepLogits);
  out.step = load_weights(a.inputs[0], *out.host);
  out.engine = gc::tree::make_engine(false, [&] { return gc::tree::HostEngineState{out.host.get(), &out.m, &out.v}; });
  return out;
}

int run_metrics(const Args& a) {
  Measurer measurer = open_measurer(a);
  gc::tree::Engine& engine = *measurer.engine;
  const std::int64_t step = measurer.step;
  const auto batches = validation(a, gc::tree::kEvalBatches);
  gc::tree::metrics::MetricsDue due = gc::tree::metrics::MetricsDue::all();
  due.cosine_images = !a.images.empty();
  std::vector<int> top_tokens;  // embedding_cosine ranks tokens by their frequency in the training data
  try {
    top_tokens = gc::tree::metrics::most_frequent_tokens(a.train_data, gc::tree::kEmbeddingTopTokens);
  } catch (const RuntimeError& e) {
    std::fprintf(stderr, "analyze: note: no embedding_cosine (training data unreadable: %s)\n", e.what());
  }
  gc::tree::metrics::ActivationMetrics activations(due);
  double loss = 0.0;
  engine.zero_grads();
  engine.track_logit_moments(activations.needs_logit_moments());
  for (const auto& batch : batches) {
    const auto inputs = batch.inputs(), targets = batch.targets();
    // Cross-entropy alone, as train logs val_loss; then the batch's activations, and its
    // routing loads joining the window once (the backward's second forward routes the same
    // tokens again: its loads are dropped by the next moe_begin_step).
    engine.moe_begin_step();
    loss += engine.forward_loss(inputs.data(), targets.data()) / double(batches.size());
    engine.measure_activations(activations);
    engine.moe_accumulate_window();
    engine.forward_backward(inputs.data(), targets.data(), 1.0 / double(batches.size()));
  }
  std::vector<Json> records = {{{"step", step},
                                {"val_loss", loss},
                                {"tokens", std::int64_t(batches.size()) * gc::tree::kMicroBatch * gc::tree::kSeqLen}}};
  gc::tree::append_validation_routing(records, engine, step);
  for (auto& r : activations.records(step)) records.push_back(r);
  // Gradient norms per class of the validation loss (training logs them per step instead).
  const std::vector<double> squares = engine.gradient_squares();
  const Json grads =
      gc::tree::metrics::per_class_norm(gc::tree::kGradNormTensors, [&](int i) { return squares[std::size_t(i)]; });
  records.push_back({{"step", step}, {"metric", "grad_norm"}, {"values", grads}, {"data", "validation"}});
  if (due.cosine_images) fs::create_directories(a.images);
  gc::tree::metrics::HostWeightStats on_host(measurer.host ? measurer.host->params.data() : measurer.params.data());
  gc::tree::metrics::WeightStats* on_device = engine.weight_stats();
  for (auto& r : gc::tree::metrics::weight_records(step, on_device ? *on_device : on_host, due, top_tokens, a.images)) {
    records.push_back(r);
  }
  if (measurer.host == nullptr) {
    std::fprintf(stderr, "analyze: measured on %s\n", engine.describe().c_str());
  }
  std::string text;
  for (const auto& r : records) text += gc::rt::metrics_line(r) + "\n";
  emit(a.out, text);
  return 0;
}

// Per-token log p of the targets of one model, with the tokens it was computed on.
struct TokenLogProbs {
  std::string source, label, vocab_hash;
  std::int64_t step = 0, vocab = 0, sequences = 0, seq_len = 0;
  std::vector<std::int32_t> inputs, targets;
  std::vector<double> logp;
};

std::string vocab_hash() {
  if (std::string(gc::tree::kVocabFile).empty()) return "";
  const std::string bytes = gc::rt::read_file(gc::tree::kVocabFile);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

TokenLogProbs evaluate_tokens(const Args& a, const std::string& checkpoint) {
  gc::tree::Model<float> model(gc::tree::kMicroBatch, gc::tree::kSeqLen, gc::tree::kKeepLogits);
  TokenLogProbs out;
  out.step = load_weights(checkpoint, model);
  out.source = checkpoint;
  out.label = gc::tree::kExperimentName;
  out.vocab = gc::tree::kVocab;
  out.seq_len = gc::tree::kSeqLen;
  out.vocab_hash = vocab_hash();
  for (const auto& batch : validation(a, (std::int64_t(1) << 20) / (gc::tree::kMicroBatch * gc::tree::kSeqLen))) {
    const auto inputs = batch.inputs(), targets = batch.targets();
    model.forward(inputs.data(), targets.data());
    const float* loss = model.token_losses();
    for (int i = 0; i < model.rows(); ++i) out.logp.push_back(-double(loss[i]));
    out.inputs.insert(out.inputs.end(), inputs.begin(), inputs.end());
    out.targets.insert(out.targets.end(), targets.begin(), targets.end());
    out.sequences += gc::tree::kMicroBatch;
  }
  return out;
}

void write_token_file(const std::string& path, const TokenLogProbs& t) {
  const std::vector<std::int64_t> shape = {t.sequences, t.seq_len};
  gc::rt::write_safetensors(path,
                            {{"inputs", gc::rt::Dtype::I32, shape, t.inputs.data()},
                             {"targets", gc::rt::Dtype::I32, shape, t.targets.data()},
                             {"logp", gc::rt::Dtype::F64, shape, t.logp.data()}},
                            {{"format", "pt"},
                             {"gcompile.kind", "token_logp"},
                             {"experiment", t.label},
                             {"spec_hash", gc::tree::kSpecHash},
                             {"checkpoint", t.source},
                             {"step", std::to_string(t.step)},
                             {"vocab_size", std::to_string(t.vocab)},
                             {"vocab_hash", t.vocab_hash}});
}

template <typename T>
std::vector<T> read_tensor(const gc::rt::SafetensorsFile& f, const char* name, gc::rt::Dtype dtype,
                           const std::vector<std::int64_t>& shape) {
  const gc::rt::TensorInfo& info = f.tensor(name);
  if (info.dtype != dtype || info.shape != shape) {
    throw gc::rt::tensor_error(f.path(), name, std::string("expected ") + gc::rt::dtype_name(dtype) + " " +
                                                   gc::rt::shape_text(shape) + ", found " +
                                                   gc::rt::dtype_name(info.dtype) + " " + gc::rt::shape_text(info.shape));
  }
  std::vector<T> out(std::size_t(info.numel()));
  std::memcpy(out.data(), f.bytes(info), info.nbytes());
  return out;
}

TokenLogProbs read_token_file(const std::string& path) {
  const gc::rt::SafetensorsFile f = gc::rt::read_safetensors(path);
  const auto& meta = f.metadata();
  auto field = [&](const char* key) {
    const auto it = meta.find(key);
    if (it == meta.end()) throw RuntimeError(path, std::string("not a token file from 'analyze tokens' (no ") + key + ")");
    return it->second;
  };
  if (field("gcompile.kind") != "token_logp") throw RuntimeError(path, "not a token file from 'analyze tokens'");
  TokenLogProbs t;
  t.source = path;
  t.label = field("experiment");
  t.step = std::stoll(field("step"));
  t.vocab = std::stoll(field("vocab_size"));
  t.vocab_hash = field("vocab_hash");
  const auto& shape = f.tensor("targets").shape;
  if (shape.size() != 2) throw gc::rt::tensor_error(path, "targets", "expected a [sequences, seq_len] tensor");
  t.sequences = shape[0];
  t.seq_len = shape[1];
  t.inputs = read_tensor<std::int32_t>(f, "inputs", gc::rt::Dtype::I32, shape);
  t.targets = read_tensor<std::int32_t>(f, "targets", gc::rt::Dtype::I32, shape);
  t.logp = read_tensor<double>(f, "logp", gc::rt::Dtype::F64, shape);
  return t;
}

TokenLogProbs load_side(const Args& a, const std::string& input) {
  std::error_code ec;
  if (fs::is_regular_file(input, ec)) return read_token_file(input);
  return evaluate_tokens(a, input);
}

// Both sides must score the same tokens with the same vocabulary.
void check_comparable(const TokenLogProbs& A, const TokenLogProbs& B) {
  const std::string both = A.source + " and " + B.source;
  if (A.vocab != B.vocab || (!A.vocab_hash.empty() && !B.vocab_hash.empty() && A.vocab_hash != B.vocab_hash)) {
    throw RuntimeError(both + ": mismatched vocabularies (vocab_size " + std::to_string(A.vocab) + ", tokenizer " +
                       (A.vocab_hash.empty() ? "-" : A.vocab_hash) + " vs vocab_size " + std::to_string(B.vocab) +
                       ", tokenizer " + (B.vocab_hash.empty() ? "-" : B.vocab_hash) + ")");
  }
  if (A.targets.size() != B.targets.size()) {
    throw RuntimeError(both + ": scored different numbers of tokens (" + std::to_string(A.targets.size()) + " vs " +
                       std::to_string(B.targets.size()) + "); use the same validation data and --batches");
  }
  for (std::size_t i = 0; i < A.targets.size(); ++i) {
    if (A.targets[i] != B.targets[i] || A.inputs[i] != B.inputs[i]) {
      throw RuntimeError(both + ": were evaluated on different tokens (first difference at token " +
                         std::to_string(i) + ")");
    }
  }
}

Json side_json(const TokenLogProbs& t, const std::string& label, double mean_loss) {
  return {{"label", label.empty() ? t.label : label}, {"source", t.source}, {"step", t.step}, {"mean_loss", mean_loss}};
}

// The positions whose targets are scored (all but kIgnoreTarget: the anchor task scores the
// last position of each sequence only), and the log p of those positions.
std::vector<std::size_t> scored_positions(const std::vector<std::int32_t>& targets) {
  std::vector<std::size_t> kept;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] >= 0) kept.push_back(i);
  }
  return kept;
}

std::vector<double> logp_at(const TokenLogProbs& t, const std::vector<std::size_t>& kept) {
  std::vector<double> out;
  out.reserve(kept.size());
  for (std::size_t i : kept) out.push_back(t.logp[i]);
  return out;
}

// The top gains with their preceding context, decoded when the tree has a vocabulary.
// delta_sym[j] belongs to position kept[j].
Json top_gains(const Args& a, const TokenLogProbs& A, const std::vector<double>& delta_sym,
               const std::vector<std::size_t>& kept) {
  const bool text = !std::string(gc::tree::kVocabFile).empty();
  const std::vector<std::string> pieces =
      text ? gc::tree::load_vocab(gc::tree::kVocabFile) : std::vector<std::string>();
  auto show = [&](std::vector<std::int32_t> ids) {
    if (text) return gc::tree::decode(pieces, ids);
    std::string s;
    for (auto id : ids) s += "<" + std::to_string(id) + ">";
    return s;
  };
  Json out = Json::array();
  for (std::size_t j : gc::tree::analysis::largest_gains(delta_sym, std::size_t(a.top))) {
    const std::size_t i = kept[j];
    const std::size_t seq = i / std::size_t(A.seq_len), pos = i % std::size_t(A.seq_len);
    const std::size_t from = seq * std::size_t(A.seq_len) + (pos + 1 > std::size_t(a.context) ? pos + 1 - a.context : 0);
    const std::vector<std::int32_t> context(A.inputs.begin() + std::ptrdiff_t(from), A.inputs.begin() + std::ptrdiff_t(i) + 1);
    out.push_back({{"position", i}, {"context", show(context)}, {"token", show({A.targets[i]})},
                   {"delta_sym_p", delta_sym[j]}, {"p_a", std::exp(A.logp[i])}});
  }
  return out;
}

int run_compare(const Args& a) {
  const TokenLogProbs A = load_side(a, a.inputs[0]);
  const TokenLogProbs B = load_side(a, a.inputs[1]);
  check_comparable(A, B);
  const std::vector<std::size_t> kept = scored_positions(A.targets);
  const auto c = gc::tree::analysis::compare_tokens(logp_at(A, kept), logp_at(B, kept));
  Json deciles = Json::array();
  for (const auto& d : c.deciles) {
    deciles.push_back({{"decile", d.index}, {"count", d.count}, {"difficulty_min", d.difficulty_min},
                       {"difficulty_max", d.difficulty_max}, {"mean", d.mean}, {"median", d.median}});
  }
  Json gains = top_gains(a, A, c.delta_sym, kept);
  for (auto& g : gains) g["p_b"] = std::exp(B.logp[g["position"].get<std::size_t>()]);
  const Json out = {{"a", side_json(A, a.label_a, c.mean_loss_a)},
                    {"b", side_json(B, a.label_b, c.mean_loss_b)},
                    {"tokens", c.tokens},
                    {"mean_delta_p", c.mean_delta_p},
                    {"mean_delta_sym_p", c.mean_delta_sym_p},
                    {"median_delta_sym_p", c.median_delta_sym_p},
                    {"fraction_improved", c.fraction_improved},
                    {"histogram", {{"edges", c.histogram.edges}, {"counts", c.histogram.counts}}},
                    {"deciles", deciles},
                    {"top_gains", gains}};
  if (!a.tokens_out.empty()) {
    gc::rt::write_file_atomic(a.tokens_out, [&](gc::rt::FileWriter& w) {
      w.write("index\ttarget\tp_a\tp_b\tloss_a\tloss_b\tdelta_p\tdelta_sym_p\n");
      char line[256];
      for (std::size_t j = 0; j < kept.size(); ++j) {
        const std::size_t i = kept[j];
        const double pa = std::exp(A.logp[i]), pb = std::exp(B.logp[i]);
        const int n = std::snprintf(line, sizeof line, "%zu\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\t%.9g\n", i, A.targets[i],
                                    pa, pb, -A.logp[i], -B.logp[i], pa - pb, c.delta_sym[j]);
        w.write(line, std::size_t(n));
      }
    });
  }
  emit(a.out, out.dump(2) + "\n");
  std::fprintf(stderr, "analyze: %lld tokens: mean loss %.4f (a) vs %.4f (b); mean Δsym p %+.4f, median %+.4f\n",
               (long long)c.tokens, c.mean_loss_a, c.mean_loss_b, c.mean_delta_sym_p, c.median_delta_sym_p);
  return 0;
}

// The anchor task's accuracies at one checkpoint, as the training loop records them.
int run_anchor(const Args& a) {
  gc::tree::Model<float> model(gc::tree::kMicroBatch, gc::tree::kSeqLen, gc::tree::kKeepLogits);
  const std::int64_t step = load_weights(a.inputs[0], model);
  const gc::rt::anchor::Scores scores =
      gc::tree::anchor_scores([&](const std::int32_t* inputs, const std::int32_t* targets) {
        model.forward(inputs, targets);
        return model.logits();
      });
  emit(a.out, gc::rt::metrics_line(gc::tree::anchor_record(step, scores)) + "\n");
  std::fprintf(stderr,
               "analyze: step %lld, %lld sequences per set: train %.3f, test %.3f; held-out pair [%d, %d]: "
               "inferential %.3f, symmetric %.3f\n",
               (long long)step, (long long)scores.test.total, scores.train.value(), scores.test.value(),
               gc::tree::kAnchorHeldFirst, gc::tree::kAnchorHeldSecond, scores.inferential.value(),
               scores.symmetric.value());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-h") == 0 || std::strcmp(argv[i], "--help") == 0) {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  try {
    const Args a = parse(argc, argv);
    if (a.command == "metrics") return run_metrics(a);
    if (a.command == "tokens") {
      write_token_file(a.out, evaluate_tokens(a, a.inputs[0]));
      return 0;
    }
    if (a.command == "anchor") return run_anchor(a);
    return run_compare(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "analyze: error: %s\nRun './analyze --help' for usage.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "analyze: error: %s\n", e.what());
    return 1;
  }
}
