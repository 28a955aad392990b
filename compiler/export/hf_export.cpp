// `gcompile export`: reading the checkpoint and the run's spec and tokenizer,
// and writing the Hugging Face directory (layout and names: hf_layout.cpp).
#include "export/hf_export.hpp"

#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/embedded.hpp"
#include "common/version.hpp"
#include "export/hf_layout.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/checkpoint.hpp"
#include "runtime/error.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/sha256.hpp"
#include "spec/spec.hpp"

namespace gc {

namespace fs = std::filesystem;
using rt::RuntimeError;

namespace {

// The weights of one checkpoint (files verified against state.json first).
class CheckpointSource : public TensorSource {
 public:
  CheckpointSource(const std::string& dir, const rt::CheckpointState& state)
      : file_(rt::read_safetensors((fs::path(dir) / rt::kModelFile).string())),
        biases_(state.extra.value("moe_bias", nlohmann::json::object())),
        state_file_((fs::path(dir) / rt::kStateFile).string()) {}

  std::vector<float> weight(const std::string& name, const std::vector<std::int64_t>& shape) const override {
    std::vector<float> out(std::size_t(rt::numel(shape)));
    file_.load_f32(name, shape, out.data());
    return out;
  }

  std::vector<float> selection_bias(int layer, std::int64_t n_experts) const override {
    const std::string key = std::to_string(layer);
    if (!biases_.contains(key) || !biases_[key].is_array() || biases_[key].size() != std::size_t(n_experts)) {
      throw RuntimeError(state_file_, "extra.moe_bias lacks layer " + key + "'s " + std::to_string(n_experts) +
                                          " selection biases (moe.load_balance = \"aux_free\")");
    }
    std::vector<float> out;
    for (const auto& b : biases_[key]) out.push_back(b.get<float>());
    return out;
  }

 private:
  rt::SafetensorsFile file_;
  nlohmann::json biases_;
  std::string state_file_;
};

// RUN for RUN/checkpoints/step_N.
fs::path run_dir_of(const std::string& checkpoint) {
  return fs::weakly_canonical(fs::path(checkpoint)).parent_path().parent_path();
}

// The run's spec, checked against the hash the checkpoint recorded.
Plan load_run_plan(const fs::path& run, const rt::CheckpointState& state) {
  const std::string path = (run / "spec.resolved.toml").string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw RuntimeError(path, "missing: the export needs the run's resolved spec (./train writes it into every run)");
  }
  Diagnostics diags;
  std::optional<Plan> plan;
  if (auto spec = load_spec(path, diags)) plan = make_plan(*spec, diags);
  if (diags.has_errors() || !plan) {
    diags.print(std::cerr);
    throw RuntimeError(path, "the run's spec does not load (errors above)");
  }
  const std::string hash = rt::sha256_hex(resolved_toml(plan->spec));
  if (!state.spec_hash.empty() && hash != state.spec_hash) {
    throw RuntimeError(path, "spec hash " + hash.substr(0, 12) + " differs from the checkpoint's " +
                                 state.spec_hash.substr(0, 12) + ": this checkpoint belongs to another spec");
  }
  return *plan;
}

std::uint16_t to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return std::uint16_t(u >> 16);
}

void write_weights(const std::string& path, const std::vector<HfTensor>& tensors, bool bf16) {
  std::vector<std::vector<std::uint16_t>> halves;
  halves.reserve(tensors.size());
  std::vector<rt::TensorView> views;
  for (const HfTensor& t : tensors) {
    if (bf16) {
      std::vector<std::uint16_t> h(t.data.size());
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = to_bf16(t.data[i]);
      halves.push_back(std::move(h));
      views.push_back({t.name, rt::Dtype::BF16, t.shape, halves.back().data()});
    } else {
      views.push_back({t.name, rt::Dtype::F32, t.shape, t.data.data()});
    }
  }
  rt::write_safetensors(path, views, {{"format", "pt"}});
}

struct Tokenizer {
  std::string model;  // serialized SentencePiece model
  std::string unk, bos, eos;
  int bos_id = -1, eos_id = -1;
};

// The SentencePiece model: --tokenizer, else the run's tokenizer.model.
std::optional<Tokenizer> load_tokenizer(const Plan& plan, const fs::path& run, const std::string& override_path) {
  std::error_code ec;
  std::string path = override_path;
  if (path.empty()) {
    if (plan.spec.data.format != DataFormat::text) return std::nullopt;
    path = (run / "tokenizer.model").string();
    if (!fs::exists(path, ec)) {
      throw RuntimeError(path, "missing: this run's data is text but its tokenizer was not saved with it (a run "
                               "from an older tree); pass --tokenizer FILE (the data cache's tokenizer.model)");
    }
  }
  Tokenizer t;
  t.model = rt::read_file(path);
  sentencepiece::SentencePieceProcessor sp;
  if (!sp.LoadFromSerializedProto(t.model).ok()) throw RuntimeError(path, "not a SentencePiece model");
  if (sp.GetPieceSize() > plan.spec.model.vocab_size) {
    throw RuntimeError(path, "the tokenizer has " + std::to_string(sp.GetPieceSize()) + " pieces, more than the model's " +
                                 std::to_string(plan.spec.model.vocab_size) + " embeddings");
  }
  if (sp.bos_id() < 0 || sp.eos_id() < 0 || sp.unk_id() < 0) {
    throw RuntimeError(path, "the tokenizer lacks a BOS, EOS or UNK piece (a Llama tokenizer needs all three)");
  }
  t.unk = sp.IdToPiece(sp.unk_id());
  t.bos = sp.IdToPiece(sp.bos_id());
  t.eos = sp.IdToPiece(sp.eos_id());
  t.bos_id = sp.bos_id();
  t.eos_id = sp.eos_id();
  return t;
}

// A Llama (SentencePiece) tokenizer that reproduces gcompile's encoding: the
// model encodes text as is (no dummy prefix: add_prefix_space false, legacy
// mode) and every document starts with BOS, as the training data did.
void write_tokenizer(const std::string& dir, const Tokenizer& t, std::int64_t max_len) {
  rt::write_file_atomic(dir + "/tokenizer.model", t.model);
  const nlohmann::json config = {
      {"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", true},  {"add_eos_token", false},
      {"bos_token", t.bos},                  {"eos_token", t.eos},     {"unk_token", t.unk},
      {"pad_token", nullptr},                {"legacy", true},         {"add_prefix_space", false},
      {"clean_up_tokenization_spaces", false}, {"model_max_length", max_len}, {"sp_model_kwargs", nlohmann::json::object()},
  };
  rt::write_file_atomic(dir + "/tokenizer_config.json", config.dump(2) + "\n");
  const nlohmann::json special = {{"bos_token", t.bos}, {"eos_token", t.eos}, {"unk_token", t.unk}};
  rt::write_file_atomic(dir + "/special_tokens_map.json", special.dump(2) + "\n");
}

void write_custom_code(const std::string& dir) {
  for (const EmbeddedFile& f : embedded_hf_code()) rt::write_file_atomic(dir + "/" + f.path, f.text);
}

// OUT must be new (or an empty directory), and the names the atomic swap
// uses beside it (OUT.tmp, OUT.old) free: an export never replaces files.
void check_output(const std::string& out) {
  std::error_code ec;
  if (fs::path(out).filename().empty() || out == "." || out == "..") {
    throw RuntimeError(out, "not a usable output directory name");
  }
  for (const char* suffix : {".tmp", ".old"}) {
    if (fs::exists(out + suffix, ec)) {
      throw RuntimeError(out + suffix, "exists; the export writes its files there before moving them into " + out +
                                           ": remove it or choose another output directory");
    }
  }
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)) {
    throw RuntimeError(out, "already exists and is not an empty directory; choose a new output directory");
  }
}

constexpr const char* kUsage =
    "usage: gcompile export CHECKPOINT --hf OUT [--dtype fp32|bf16] [--tokenizer FILE]\n"
    "  CHECKPOINT  RUN/checkpoints/step_N, or a run directory (its latest checkpoint)\n"
    "  --hf OUT    a new directory for the Hugging Face model (config, weights, tokenizer)\n"
    "  --dtype     weights as fp32 (default) or bf16\n"
    "  --tokenizer a SentencePiece model to ship instead of the run's tokenizer.model\n";

int usage(const std::string& message) {
  std::cerr << "gcompile export: error: " << message << "\n" << kUsage;
  return 2;
}

}  // namespace

int export_hf(const HfExportOptions& options) {
  try {
    check_output(options.out);
    const std::string ckpt = rt::resolve_checkpoint(options.checkpoint);
    const rt::CheckpointState state = rt::read_checkpoint_state(ckpt);
    rt::verify_checkpoint_files(ckpt, state);
    const fs::path run = run_dir_of(ckpt);
    const Plan plan = load_run_plan(run, state);
    const HfLayout layout = choose_hf_layout(plan);
    const std::optional<Tokenizer> tokenizer = load_tokenizer(plan, run, options.tokenizer);

    const nlohmann::json provenance = {{"experiment", plan.spec.experiment.name},
                                       {"spec_hash", state.spec_hash},
                                       {"step", state.step},
                                       {"gcompile_version", kVersion}};
    nlohmann::json config = hf_config(plan, layout, options.bf16, provenance);
    nlohmann::json generation = {{"_from_model_config", true}};
    if (tokenizer) {
      config["bos_token_id"] = tokenizer->bos_id;
      config["eos_token_id"] = tokenizer->eos_id;
      generation["bos_token_id"] = tokenizer->bos_id;
      generation["eos_token_id"] = tokenizer->eos_id;
    }
    const std::vector<HfTensor> tensors = hf_tensors(plan, layout, CheckpointSource(ckpt, state));

    const fs::path parent = fs::absolute(options.out).parent_path();
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) throw RuntimeError(parent.string(), "cannot create the output's parent directory: " + ec.message());
    rt::replace_dir_atomic(options.out, [&](const std::string& dir) {
      rt::write_file_atomic(dir + "/config.json", config.dump(2) + "\n");
      rt::write_file_atomic(dir + "/generation_config.json", generation.dump(2) + "\n");
      write_weights(dir + "/model.safetensors", tensors, options.bf16);
      if (tokenizer) write_tokenizer(dir, *tokenizer, config["max_position_embeddings"].get<std::int64_t>());
      if (layout.kind == HfKind::gcompile) write_custom_code(dir);
    });

    std::cout << "exported " << ckpt << " (step " << state.step << ") as " << hf_architecture(layout.kind) << " ("
              << (options.bf16 ? "bf16" : "fp32") << ", " << tensors.size() << " tensors) -> " << options.out << "\n";
    if (layout.kind == HfKind::gcompile) {
      std::cout << "  custom code (load with trust_remote_code=True) for:";
      for (std::size_t i = 0; i < layout.reasons.size(); ++i) std::cout << (i ? ", " : " ") << layout.reasons[i];
      std::cout << "\n";
    }
    if (!tokenizer) std::cout << "  no tokenizer: the run's data is not text (data.format); pass --tokenizer FILE to add one\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gcompile export: error: " << e.what() << "\n";
    return 1;
  }
}

int export_command(int argc, char** argv) {
  HfExportOptions options;
  for (int i = 0; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else if (arg == "--hf") {
      if (!has_value) return usage("--hf needs an output directory");
      options.out = argv[++i];
      while (options.out.size() > 1 && options.out.back() == '/') options.out.pop_back();  // "OUT/" is OUT
    } else if (arg == "--dtype") {
      if (!has_value) return usage("--dtype needs fp32 or bf16");
      const std::string d = argv[++i];
      if (d != "fp32" && d != "bf16") return usage("--dtype must be fp32 or bf16 (got '" + d + "')");
      options.bf16 = d == "bf16";
    } else if (arg == "--tokenizer") {
      if (!has_value) return usage("--tokenizer needs a SentencePiece model file");
      options.tokenizer = argv[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      return usage("unknown option '" + arg + "'");
    } else if (options.checkpoint.empty()) {
      options.checkpoint = arg;
    } else {
      return usage("unexpected argument '" + arg + "' (one CHECKPOINT)");
    }
  }
  if (options.checkpoint.empty()) return usage("no CHECKPOINT given");
  if (options.out.empty()) return usage("--hf OUT is required (the only export format)");
  return export_hf(options);
}

}  // namespace gc
