// ./probe OUT.safetensors [--threads N]: one forward and backward pass of this
// experiment's model, written out for outside checks (the PyTorch reference in
// gcompile's tests/reference, init statistics). The parameters are initialized
// exactly as ./train does; the batch (B = 2, T = min(seq_len, 16)) is fixed
// pseudo-random tokens and targets from Philox. The file holds, all F32 unless
// noted: every parameter under its HF name, "grad." + name for each gradient,
// "logits" [B·T, V] (after the logit scale: the input of the softmax),
// "loss" [1], "tokens" and "targets" (I32, [B, T]); metadata "format" = "pt"
// and the exact forward scales, ε, seed, loss and batch shape as strings.
// --threads N runs with OMP_NUM_THREADS=N (the same as setting it yourself).
// --checkpoint PATH starts from a checkpoint's weights instead of the init
// (PATH: a checkpoint directory, or a run directory for its latest), so a
// trained model can be compared with its Hugging Face export (gcompile export);
// --init-from DIR reads the weights of such an export instead (the check that
// exporting and importing loses nothing).
// --perturb-norms moves every norm gain off 1 by up to ±0.15 after the init
// (as ./gradcheck does), so a comparison also sees how the gains are applied.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "config.hpp"
#include "core/philox.hpp"
#include "engine/cpu_model.hpp"
#include "plan.hpp"
#include "runtime/safetensors.hpp"
#include "train/load_weights.hpp"

namespace {

constexpr int kBatch = 2;
constexpr int kLen = gc::tree::kSeqLen < 16 ? gc::tree::kSeqLen : 16;
constexpr std::uint64_t kBatchKey = 0x70726f6265;  // "probe"

std::string exact(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::int32_t pick(std::uint32_t stream, std::uint64_t i) {
  const double u = gc::tree::core::philox_uniform(kBatchKey, stream, i);
  const std::int64_t v = std::int64_t(u * double(gc::tree::kVocab));
  return std::int32_t(v < gc::tree::kVocab ? v : gc::tree::kVocab - 1);
}

int usage(const char* message) {
  std::fprintf(stderr, "probe: error: %s\nusage: probe OUT.safetensors [--threads N] [--perturb-norms] [--checkpoint PATH | --init-from DIR]\n", message);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out, threads, checkpoint, init_from;
  bool perturb = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::puts("usage: probe OUT.safetensors [--threads N] [--perturb-norms] [--checkpoint PATH | --init-from DIR]\n"
                "Writes the initial parameters, one batch's logits, loss and gradients.\n"
                "  --threads N       OpenMP threads (the same as OMP_NUM_THREADS=N)\n"
                "  --perturb-norms   move the norm gains off 1 (by up to +-0.15) before the pass\n"
                "  --checkpoint PATH the weights of a checkpoint (or a run's latest) instead of the init\n"
                "  --init-from DIR   the weights of a `gcompile export` directory instead of the init");
      return 0;
    }
    if (arg == "--perturb-norms") {
      perturb = true;
    } else if (arg == "--checkpoint") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        return usage("--checkpoint needs a checkpoint or run directory");
      }
      checkpoint = argv[++i];
    } else if (arg == "--init-from") {
      if (i + 1 >= argc || argv[i + 1][0] == '\0') {
        return usage("--init-from needs an export directory");
      }
      init_from = argv[++i];
    } else if (arg == "--threads") {
      if (i + 1 >= argc) {
        return usage("--threads needs a value");
      }
      threads = argv[++i];
      if (threads.empty() || threads.find_first_not_of("0123456789") != std::string::npos || threads.size() > 4 ||
          std::atoi(threads.c_str()) < 1) {
        return usage("--threads needs a positive integer");
      }
    } else if (out.empty() && !arg.empty() && arg[0] != '-') {
      out = arg;
    } else {
      return usage(("unexpected argument '" + arg + "'").c_str());
    }
  }
  if (out.empty()) {
    return usage("no output file");
  }
  if (!checkpoint.empty() && !init_from.empty()) {
    return usage("--checkpoint and --init-from both choose the weights (use one)");
  }
  if (!threads.empty()) {
    // The OpenMP runtime reads OMP_NUM_THREADS when it starts: run again with it set.
    setenv("OMP_NUM_THREADS", threads.c_str(), 1);
    char perturb_flag[] = "--perturb-norms";
    char checkpoint_flag[] = "--checkpoint";
    std::vector<char*> args = {argv[0], const_cast<char*>(out.c_str())};
    if (perturb) args.push_back(perturb_flag);
    if (!checkpoint.empty()) {
      args.push_back(checkpoint_flag);
      args.push_back(const_cast<char*>(checkpoint.c_str()));
    }
    char init_flag[] = "--init-from";
    if (!init_from.empty()) {
      args.push_back(init_flag);
      args.push_back(const_cast<char*>(init_from.c_str()));
    }
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
    std::perror("probe: exec");
    return 1;
  }
  try {
    gc::tree::Model<float> model(kBatch, kLen, gc::tree::kKeepLogits);
    gc::tree::init_parameters(model.params.data(), gc::tree::kSeed);
    std::int64_t checkpoint_step = -1;
    if (!checkpoint.empty()) {
      checkpoint_step = gc::tree::load_weights(checkpoint, model);
    }
    if (!init_from.empty()) {
      gc::tree::load_export_weights(init_from, model);
    }
    if (perturb) {
      for (int i = 0; i < gc::tree::kNumParams; ++i) {
        if (gc::tree::kParams[i].init != gc::tree::InitKind::ones) {
          continue;
        }
        for (std::int64_t j = 0; j < gc::tree::kParams[i].numel; ++j) {
          model.param(i)[j] +=
              float(0.3 * (gc::tree::core::philox_uniform(kBatchKey, 100 + i, std::uint64_t(j)) - 0.5));
        }
      }
    }
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(kBatch * kLen));
    std::vector<std::int32_t> targets(tokens.size());
    for (std::size_t j = 0; j < tokens.size(); ++j) {
      tokens[j] = pick(1, j);
      targets[j] = pick(2, j);
    }
    model.zero_grads();
    const double loss = model.forward(tokens.data(), targets.data());
    model.backward();

    const std::int64_t rows = model.rows();
    std::vector<float> logits(static_cast<std::size_t>(rows * gc::tree::kVocab));
    for (std::size_t j = 0; j < logits.size(); ++j) {
      logits[j] = model.logits()[j] * gc::tree::kLogitScale;
    }
    const float loss_f = float(loss);

    std::vector<std::string> grad_names(static_cast<std::size_t>(gc::tree::kNumParams));
    std::vector<gc::rt::TensorView> views;
    for (int i = 0; i < gc::tree::kNumParams; ++i) {
      const gc::tree::ParamInfo& p = gc::tree::kParams[i];
      const std::vector<std::int64_t> shape(p.shape, p.shape + p.rank);
      views.push_back({p.name, gc::rt::Dtype::F32, shape, model.param(i)});
      grad_names[std::size_t(i)] = std::string("grad.") + p.name;
    }
    for (int i = 0; i < gc::tree::kNumParams; ++i) {
      const gc::tree::ParamInfo& p = gc::tree::kParams[i];
      views.push_back({grad_names[std::size_t(i)], gc::rt::Dtype::F32,
                       std::vector<std::int64_t>(p.shape, p.shape + p.rank), model.grad(i)});
    }
    views.push_back({"logits", gc::rt::Dtype::F32, {rows, gc::tree::kVocab}, logits.data()});
    views.push_back({"loss", gc::rt::Dtype::F32, {1}, &loss_f});
    views.push_back({"tokens", gc::rt::Dtype::I32, {kBatch, kLen}, tokens.data()});
    views.push_back({"targets", gc::rt::Dtype::I32, {kBatch, kLen}, targets.data()});

    const std::map<std::string, std::string> metadata = {
        {"format", "pt"},
        {"experiment", gc::tree::kExperimentName},
        {"seed", std::to_string(gc::tree::kSeed)},
        {"batch", std::to_string(kBatch)},
        {"seq_len", std::to_string(kLen)},
        {"loss", exact(loss)},
        {"norm_eps", exact(double(gc::tree::kNormEps))},
        {"embedding_scale", exact(double(gc::tree::kEmbeddingScale))},
        {"attn_scale", exact(double(gc::tree::kAttnScale))},
        {"logit_scale", exact(double(gc::tree::kLogitScale))},
        {"perturbed_norms", perturb ? "true" : "false"},
        {"checkpoint_step", std::to_string(checkpoint_step)},
    };
    gc::rt::write_safetensors(out, views, metadata);
    std::printf("probe: loss %.6f, %d tensors, batch %dx%d -> %s\n", loss, gc::tree::kNumParams, kBatch, kLen,
                out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
