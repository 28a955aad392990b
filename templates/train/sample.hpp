// A short greedy sample after training on text: the model continues the
// start of the first validation sequence. Tokens are decoded with the
// SentencePiece vocabulary gcompile saved ("id<TAB>piece" lines): "▁" is a
// space and "<0xNN>" a raw byte.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "config.hpp"
#include "engine/cpu_model.hpp"
#include "train/utf8.hpp"

namespace gc::tree {

inline std::vector<std::string> load_vocab(const std::string& path) {
  std::vector<std::string> pieces(static_cast<std::size_t>(kVocab));
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    const long id = std::strtol(line.c_str(), nullptr, 10);
    if (id >= 0 && id < kVocab) pieces[std::size_t(id)] = line.substr(tab + 1);
  }
  return pieces;
}

inline std::string decode(const std::vector<std::string>& pieces, const std::vector<std::int32_t>& tokens) {
  std::string out;
  for (std::int32_t t : tokens) {
    const std::string& p = pieces[std::size_t(t)];
    if (p.size() == 6 && p.rfind("<0x", 0) == 0 && p.back() == '>') {
      out += char(std::strtol(p.substr(3, 2).c_str(), nullptr, 16));
    } else if (p == "<s>" || p == "</s>" || p == "<unk>") {
      continue;
    } else {
      for (std::size_t i = 0; i < p.size(); ++i) {
        if (p.compare(i, 3, "\xE2\x96\x81") == 0) {  // U+2581 "▁"
          out += ' ';
          i += 2;
        } else {
          out += p[i];
        }
      }
    }
  }
  return out;
}

// Greedy continuation of `prompt` by `n_new` tokens, with the given weights
// (and, for aux_free MoE routing, the selection biases).
inline std::vector<std::int32_t> greedy_continue(const std::vector<float>& params, std::vector<std::int32_t> prompt,
                                                 int n_new, const std::vector<std::vector<float>>& moe_biases = {}) {
  Model<float> model(1, kSeqLen, kKeepLogits);
  model.params = params;
  set_moe_biases(model, moe_biases);
  std::vector<std::int32_t> window(static_cast<std::size_t>(kSeqLen)), unused(static_cast<std::size_t>(kSeqLen), 0);
  for (int i = 0; i < n_new; ++i) {
    const std::size_t len = std::min<std::size_t>(prompt.size(), std::size_t(kSeqLen));
    std::fill(window.begin(), window.end(), 0);
    std::copy(prompt.end() - std::ptrdiff_t(len), prompt.end(), window.begin());
    model.forward(window.data(), unused.data());
    const float* row = model.logits() + (len - 1) * std::size_t(kVocab);
    prompt.push_back(std::int32_t(std::max_element(row, row + kVocab) - row));
  }
  return prompt;
}

}  // namespace gc::tree
