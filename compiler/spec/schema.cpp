#include "spec/schema.hpp"

#include <map>
#include <set>

#include "common/text.hpp"
#include "spec/classes.hpp"
#include "spec/schema_builder.hpp"

namespace gc {

namespace {

using namespace schema_detail;

void add_experiment(Builder& b) {
  example(required(b.add("experiment.name", KeyType::string,
                         "Name of the experiment; names the generated directory, so it may contain only "
                         "a-z, 0-9, '_', '.' and '-' (at most 64 characters).")),
          "\"moe_3b_gamma1\"");
  example(with_default(b.add("experiment.description", KeyType::string,
                             "Free text recorded in the generated tree (escaped wherever it is written)."),
                       Value::string("")),
          "\"γ = 1 with ε = 1e-12\"");
  example(at_least(with_default(b.add("experiment.seed", KeyType::integer,
                                      "Seed of the counter-based RNG for initialization and data order."),
                                Value::integer(1234)),
                   0),
          "42");
  example(b.add("experiment.extends", KeyType::string,
                "Base spec to merge under this one, relative to this file. Chains are allowed; this "
                "file overrides the base key by key; cycles are an error."),
          "\"../base/dense_0.1b.toml\"");
}

void add_optim(Builder& b) {
  example(at_least(required(b.add("optim.lr", KeyType::number, "Peak learning rate η of AdamW.")), 0, true),
          "6e-4");
  auto& betas = with_default(b.add("optim.betas", KeyType::number_list, "AdamW (β1, β2)."),
                             Value::list({Value::number(0.9), Value::number(0.95)}));
  betas.list_length = 2;
  betas.min = 0;
  betas.max = 0.999999;
  example(betas, "[0.9, 0.98]");
  example(at_least(with_default(b.add("optim.eps", KeyType::number, "AdamW ε."), Value::number(1e-8)), 0, true),
          "1e-15");
  example(at_least(with_default(b.add("optim.weight_decay", KeyType::number,
                                      "Decoupled weight decay λ: θ ← θ̂ − λ·η_t·θ (seed 003 eq. 1)."),
                                Value::number(0.1)),
                   0),
          "1.0");
  auto& nd = with_default(b.add("optim.no_decay", KeyType::choice_list,
                                "Classes exempt from weight decay (norm = RMSNorm gains)."),
                          strings({"norm"}));
  nd.choices = class_names();
  example(nd, "[\"norm\", \"embedding\"]");
  example(at_least(with_default(b.add("optim.grad_clip", KeyType::number,
                                      "Clip the global gradient norm to this value (0 = off)."),
                                Value::number(1.0)),
                   0),
          "0.5");
  for (const auto& cls : class_names()) {
    auto& m = with_default(b.add("optim.lr_mult." + cls, KeyType::formula,
                                 "Learning-rate multiplier for " + cls + " (μP-style presets set these)."),
                           Value::number(1.0));
    m.scope = FormulaScope::tensor;
    m.preset_allowed = true;
    example(m, "\"1/width_mult\"");
  }
}

void add_schedule(Builder& b) {
  auto& ratio = with_default(b.add("schedule.warmup_ratio", KeyType::number,
                                   "Linear warm-up as a fraction of all steps (seed 000: 0.03)."),
                             Value::number(0.03));
  between(ratio, 0, 1).exclusive_group = "schedule.warmup";
  example(ratio, "0.01");
  auto& steps = b.add("schedule.warmup_steps", KeyType::integer, "Linear warm-up in steps (instead of the ratio).");
  at_least(steps, 0).exclusive_group = "schedule.warmup";
  example(steps, "2000");
  auto& decay = with_default(b.add("schedule.decay", KeyType::choice, "Decay after warm-up."),
                             Value::string("cosine"));
  decay.choices = {"cosine", "linear", "constant"};
  example(decay, "\"linear\"");
  example(between(with_default(b.add("schedule.min_lr_ratio", KeyType::number,
                                     "Final learning rate as a fraction of the peak (seed 000: 0.1)."),
                               Value::number(0.1)),
                  0, 1),
          "0.0");
}

void add_train(Builder& b) {
  example(at_least(required(b.add("train.seq_len", KeyType::integer, "Tokens per training sequence T.")), 2),
          "2048");
  example(at_least(derived(b.add("train.micro_batch", KeyType::integer,
                                 "Sequences per forward/backward pass; gradients accumulate to global_batch."),
                           "= global_batch"),
                   1),
          "8");
  example(at_least(required(b.add("train.global_batch", KeyType::integer, "Sequences per optimizer step.")), 1),
          "256");
  auto& steps = b.add("train.steps", KeyType::integer, "Optimizer steps (give steps or tokens).");
  at_least(steps, 1).exclusive_group = "train.length";
  example(steps, "20000");
  auto& tokens = b.add("train.tokens", KeyType::integer,
                       "Training tokens; steps = tokens / (global_batch·seq_len), rounded up.");
  at_least(tokens, 1).exclusive_group = "train.length";
  example(tokens, "36000000000");
  auto& prec = with_default(b.add("train.precision", KeyType::choice,
                                  "CUDA backend: bf16 = bf16 activations and working weights, fp32 accumulation, master "
                                  "weights, gradients and moments; fp32 = all fp32, TF32 off (for parity with the CPU). "
                                  "The CPU backend always computes in fp32."),
                            Value::string("bf16"));
  prec.choices = {"bf16", "fp32"};
  example(prec, "\"fp32\"");
  example(at_least(with_default(b.add("train.eval_every", KeyType::integer,
                                      "Steps between validation passes (0 = only at the end)."),
                                Value::integer(100)),
                   0),
          "500");
  example(at_least(with_default(b.add("train.eval_batches", KeyType::integer, "Micro-batches per validation pass."),
                                Value::integer(10)),
                   1),
          "20");
  example(at_least(with_default(b.add("train.checkpoint_every", KeyType::integer,
                                      "Steps between checkpoints (0 = only at the end)."),
                                Value::integer(1000)),
                   0),
          "5000");
  example(at_least(with_default(b.add("train.log_every", KeyType::integer,
                                      "Steps between log lines (on a GPU also between the host's "
                                      "reads of a step's loss and gradient norm)."),
                                Value::integer(10)),
                   1),
          "1");
}

// data.format = "anchor" (runtime/anchor.hpp; docs/reproductions.md).
void add_anchor(Builder& b) {
  example(at_least(derived(b.add("data.anchor.seed", KeyType::integer,
                                 "anchor: seed of the generated sequences (training and evaluation sets)."),
                           "= experiment.seed"),
                   0),
          "7");
  example(between(with_default(b.add("data.anchor.train_sequences", KeyType::integer,
                                     "anchor: training sequences generated (the reader cycles through them)."),
                               Value::integer(20000)),
                  1, 100000000),
          "50000");
  example(between(with_default(b.add("data.anchor.eval_sequences", KeyType::integer,
                                     "anchor: sequences in each evaluation set (train keys, test keys, held-out pair)."),
                               Value::integer(1000)),
                  1, 1000000),
          "2000");
  auto& held = with_default(b.add("data.anchor.held_out", KeyType::integer_list,
                                  "anchor: the anchor pair never trained on; its mirror is trained with the composite "
                                  "plus 4 (x−6 for the default)."),
                            Value::list({Value::integer(4), Value::integer(3)}));
  held.list_length = 2;
  held.min = 1;
  held.max = 4;
  example(held, "[2, 1]");
}

void add_data(Builder& b) {
  auto& format = required(b.add("data.format", KeyType::choice,
                                "llmc: llm.c token shards; text: raw text tokenized with SentencePiece; "
                                "synthetic: a generated task (no files); anchor: the anchor-function task of "
                                "Zhang et al. (NeurIPS 2024), generated, loss on the last position only ([data.anchor])."));
  format.choices = {"llmc", "text", "synthetic", "anchor"};
  example(format, "\"llmc\"");
  example(derived(b.add("data.train", KeyType::string,
                        "Training data: a file, directory or glob; a relative path is relative to the spec file that sets it."),
                  "required for llmc and text"),
          "\"data/fineweb_train_*.bin\"");
  example(b.add("data.val", KeyType::string,
                "Validation data (llmc: required; text: optional, else val_fraction of train)."),
          "\"data/fineweb_val_*.bin\"");
  example(between(with_default(b.add("data.val_fraction", KeyType::number,
                                     "text: fraction of the tokens held out for validation when val is unset."),
                               Value::number(0.02)),
                  0.0001, 0.5),
          "0.05");
  example(b.add("data.tokenizer", KeyType::string,
                "text: an existing SentencePiece model; when unset one is trained with vocab_size tokens."),
          "\"tok/sp60k.model\"");
  auto& tt = with_default(b.add("data.tokenizer_type", KeyType::choice, "text: SentencePiece model type to train."),
                          Value::string("bpe"));
  tt.choices = {"bpe", "unigram"};
  example(tt, "\"unigram\"");
  example(with_default(b.add("data.text_extensions", KeyType::choice_list,
                             "text: file extensions read from a directory."),
                       strings({".txt", ".rst", ".md"})),
          "[\".txt\"]");
  // choice_list without choices = any non-empty strings
  example(b.add("data.cache_dir", KeyType::string,
                "Where prepared (tokenized or synthetic) data is cached; relative to the spec file that sets it. "
                "Unset: the user's cache directory, $GCOMPILE_CACHE_DIR, else $XDG_CACHE_HOME/gcompile, else "
                "~/.cache/gcompile (never beside the spec)."),
          "\"/scratch/gc-cache\"");
  auto& task = with_default(b.add("data.synthetic_task", KeyType::choice, "synthetic: which task to generate."),
                            Value::string("copy"));
  task.choices = {"copy", "reverse", "sort"};
  example(task, "\"sort\"");
  add_anchor(b);
}

void add_metrics(Builder& b) {
  for (const auto& m : metric_defaults()) {
    const std::string p = std::string("metrics.") + m.name + ".";
    example(with_default(b.add(p + "enabled", KeyType::boolean, m.doc), Value::boolean(m.enabled)), "false");
    if (std::string(m.name) != "initial_loss") {
      example(at_least(with_default(b.add(p + "interval", KeyType::integer, "Steps between measurements."),
                                    Value::integer(m.interval)),
                       1),
              "250");
    }
    if (m.has_classes) {
      auto& c = with_default(b.add(p + "classes", KeyType::choice_list, "Parameter classes measured."),
                             strings({"attn_q", "attn_k", "attn_v", "attn_o", "mlp_up", "mlp_down"}));
      c.choices = class_names();
      example(c, "[\"attn_q\", \"attn_k\"]");
    }
    if (m.has_layers) {
      auto& l = with_default(b.add(p + "layers", KeyType::integer_list, "Layers measured (0-based; [] = all)."),
                             Value::list({}));
      at_least(l, 0);
      example(l, "[0, 5, 11]");
    }
  }
  example(at_least(with_default(b.add("metrics.embedding_cosine.top_tokens", KeyType::integer,
                                      "How many of the most frequent tokens (seed 003 uses 350)."),
                                Value::integer(350)),
                   2),
          "200");
  auto& img = with_default(b.add("metrics.cosine_similarity.image_steps", KeyType::integer_list,
                                 "Steps at which full cosine matrices are saved as images."),
                           Value::list({}));
  at_least(img, 0);
  example(img, "[0, 1000, 10000]");
}

void add_distributed(Builder& b) {
  auto& backend = with_default(b.add("distributed.backend", KeyType::choice,
                                     "auto: data-parallel when launched by mpirun/srun with several ranks (NCCL "
                                     "on GPUs, MPI on the CPU backend), else one process; none: refuse a "
                                     "multi-rank launch; nccl: data parallelism on GPUs only (a multi-rank run "
                                     "on the CPU backend is refused)."),
                               Value::string("auto"));
  backend.choices = {"auto", "none", "nccl"};
  example(backend, "\"nccl\"");
  example(between(with_default(b.add("distributed.zero_stage", KeyType::integer,
                                     "ZeRO stage: 0 replicates the optimizer state on every rank; 1 shards the "
                                     "AdamW moments (and on GPUs under bf16 the fp32 master weights) over the "
                                     "ranks, or under expert_parallel the rank's expert-block state over the "
                                     "ranks owning the same block; 2-3 (also gradients, parameters) are refused "
                                     "at generation."),
                               Value::integer(0)),
                  0, 3),
          "1");
  auto& bucket = at_least(with_default(b.add("distributed.bucket_mb", KeyType::number,
                                    "On GPUs: the fp32 gradients are reduced in buckets of at least this many "
                                    "MiB (whole layers, last layer first) while the backward pass goes on "
                                    "(all-reduced; under zero_stage = 1 reduced to the ranks whose shards hold "
                                    "them); the embedding, final norm and LM head follow after it."),
                              Value::number(25.0)),
                          0.0, /*exclusive=*/true);
  example(bucket, "50");
  example(at_least(with_default(b.add("distributed.expert_parallel", KeyType::integer,
                                      "Expert parallelism (MoE): groups of this many consecutive ranks share the "
                                      "experts, each rank owning a contiguous block (uneven blocks allowed) and "
                                      "computing it for the whole group's tokens through all-to-all exchanges "
                                      "(MPI on the CPU backend, NCCL send/recv on GPUs); expert gradients are "
                                      "reduced over the ranks that own the same block, the rest over all ranks. "
                                      "A rank holds the weights, gradients, AdamW moments (and on GPUs fp32 "
                                      "masters) of its own block only, under zero_stage = 1 of the moments and "
                                      "masters its shard over the ranks owning the same block; checkpoints stay "
                                      "consolidated. Must divide the world size and not exceed "
                                      "moe.n_experts; train --expert-parallel N overrides it."),
                                Value::integer(1)),
                   1),
          "8");
  example(at_least(with_default(b.add("distributed.expert_exchange_factor", KeyType::number,
                                      "Expert parallelism: the rows a rank's experts may receive per MoE layer, as "
                                      "a multiple of the rank's own assignments (micro_batch x seq_len x top_k); "
                                      "sizes the exchange buffers. 0: the dropless worst case (expert_parallel "
                                      "times them). A step whose routing exceeds the bound stops with an error "
                                      "naming the ranks and rows; the training is the same for any factor that "
                                      "fits, and train --expert-exchange-factor F overrides it (also on --resume). "
                                      "0, or at least 1."),
                                Value::number(0.0)),
                   0.0),
          "2.0");
}

void add_preset_header(Builder& b) {
  // Only preset files may use [preset]; the loader enforces that.
  for (const char* key : {"name", "description", "source"}) {
    auto& k = b.add(std::string("preset.") + key, KeyType::string, std::string("Preset ") + key + ".");
    k.preset_allowed = true;
  }
  auto& scope = b.add("preset.scope", KeyType::choice,
                      "init-only: sets initialization only; full: also sets lr multipliers and forward scales.");
  scope.choices = {"init-only", "full"};
  scope.preset_allowed = true;
}

std::vector<KeySpec> build_schema() {
  Builder b;
  add_experiment(b);
  add_model(b);
  add_moe(b);
  add_init(b);
  add_optim(b);
  add_schedule(b);
  add_train(b);
  add_data(b);
  add_metrics(b);
  add_distributed(b);
  add_preset_header(b);
  return std::move(b.keys);
}

}  // namespace

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> keys = build_schema();
  return keys;
}

const KeySpec* find_key(const std::string& path) {
  static const std::map<std::string, const KeySpec*> index = [] {
    std::map<std::string, const KeySpec*> m;
    for (const auto& k : schema()) m[k.path] = &k;
    return m;
  }();
  auto it = index.find(path);
  return it == index.end() ? nullptr : it->second;
}

bool is_section(const std::string& path) {
  static const std::set<std::string> sections = [] {
    std::set<std::string> s;
    for (const auto& k : schema()) {
      std::string sec = section_of(k.path);
      while (!sec.empty()) {
        s.insert(sec);
        sec = section_of(sec);
      }
    }
    return s;
  }();
  return sections.count(path) > 0;
}

std::vector<std::string> keys_in_section(const std::string& section) {
  std::vector<std::string> out;
  for (const auto& k : schema()) {
    if (section_of(k.path) == section) out.push_back(k.path.substr(section.size() + 1));
  }
  return out;
}

std::vector<std::string> subsections_of(const std::string& section) {
  std::set<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& k : schema()) {
    if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = k.path.substr(prefix.size());
    const auto dot = rest.find('.');
    if (dot != std::string::npos) out.insert(rest.substr(0, dot));
  }
  return {out.begin(), out.end()};
}

const std::vector<std::string>& formula_variables(FormulaScope scope) {
  static const std::vector<std::string> none;
  static const std::vector<std::string> model = {"d_model", "n_layers", "d_ff",  "head_dim",
                                                 "n_heads", "n_kv_heads", "vocab", "width_mult"};
  static const std::vector<std::string> tensor = [] {
    std::vector<std::string> v = model;
    for (const char* extra : {"fan_in", "fan_out", "layer", "gamma"}) v.push_back(extra);
    return v;
  }();
  switch (scope) {
    case FormulaScope::none: return none;
    case FormulaScope::model: return model;
    case FormulaScope::tensor: return tensor;
  }
  return none;
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& m : metric_defaults()) v.push_back(m.name);
    return v;
  }();
  return names;
}

std::string key_type_name(const KeySpec& k) {
  std::string len = k.list_length ? " of " + std::to_string(k.list_length) : "";
  switch (k.type) {
    case KeyType::boolean: return "boolean";
    case KeyType::integer: return "integer";
    case KeyType::number: return "float";
    case KeyType::string: return "string";
    case KeyType::choice: return "string: " + join(k.choices, " | ");
    case KeyType::formula: return "float or expression";
    case KeyType::integer_list: return "array of integers" + len;
    case KeyType::number_list: return "array of floats" + len;
    case KeyType::choice_list: return "array of strings" + len;
  }
  return "value";
}
}  // namespace gc
