// The anchor-function task (data.format = "anchor"; Zhang et al., "Initialization is
// Critical to Whether Transformers Fit Composite Functions by Reasoning or Memorizing",
// NeurIPS 2024, cited by seed 000 as zhang2024initialization).
//
// Items are tokens 20..99; anchors are tokens 1..4, each a shift:
//   g(x;1) = x+5, g(x;2) = x+1, g(x;3) = x−2, g(x;4) = x−8.
// A pair (a1, a2) maps the key x to g(g(x;a1);a2). A sequence is 9 tokens drawn uniformly
// from 20..99 in which positions p, p+1, p+2 (p in 0..6) are replaced by x, a1, a2; its
// target is predicted at the last position only. Of the 16 ordered pairs, the held-out pair
// (default (4,3)) never appears in training and its mirror (3,4) is trained with the
// composite plus 4 (x−6 instead of x−10), so on the held-out pair a model that composes the
// two anchors answers the composite ("inferential", x−10) and one that copies the mirror's
// answer answers the composite plus 4 ("symmetric", x−6). Keys split train/test by
// position: training keys have x mod 9 ≠ p, test keys x mod 9 = p.
//
// Every sequence is a pure function of (seed, stream, index), so the data gcompile writes
// and the evaluation sets the generated program rebuilds agree exactly.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace gc::rt::anchor {

inline constexpr int kInputs = 9;                   // tokens per sequence (= train.seq_len)
inline constexpr int kItemLo = 20, kItemHi = 99;    // noise tokens and keys
inline constexpr int kAnchorLo = 1, kAnchorHi = 4;  // anchor tokens
inline constexpr int kMaxPosition = kInputs - 3;    // p in 0..6: x, a1, a2 fit
inline constexpr int kSymmetricOffset = 4;          // the mirror pair's target: composite + 4

// The shift of anchor a (1..4).
int shift(int anchor);
// g(g(x; a1); a2) = x + shift(a1) + shift(a2).
int composite(int x, int a1, int a2);

struct Task {
  std::uint64_t seed = 0;
  int held_first = 4, held_second = 3;  // the pair never trained on; its mirror is (second, first)

  bool is_held_out(int a1, int a2) const { return a1 == held_first && a2 == held_second; }
  bool is_mirror(int a1, int a2) const { return a1 == held_second && a2 == held_first; }
  // The target a training sequence of pair (a1, a2) and key x carries.
  int trained_target(int x, int a1, int a2) const;
  // The smallest vocabulary that holds every token and target of this task.
  int min_vocab() const;
  // "" or what is wrong with the held-out pair.
  std::string check() const;
};

enum class Stream {
  train,     // the 15 trained pairs, training keys (x mod 9 ≠ p): train.bin, in this order
  test,      // the 15 trained pairs, test keys (x mod 9 = p): val.bin and test accuracy
  held_out,  // the held-out pair, every key: inferential and symmetric accuracy
};

struct Sequence {
  std::array<std::int32_t, kInputs> tokens{};
  int x = 0, position = 0, a1 = 0, a2 = 0;
  std::int32_t target = 0;  // what training (or, for the held-out pair, composition) expects
};

Sequence make_sequence(const Task& task, Stream stream, std::uint64_t index);
std::vector<Sequence> make_sequences(const Task& task, Stream stream, std::uint64_t count);
// The sequences as a token stream: 9 inputs and the target each (a shard's contents).
std::vector<std::uint32_t> sequence_tokens(const std::vector<Sequence>& sequences);

// Finds x, a1, a2 in 9 input tokens (the first anchor token starts the pair). Returns
// false when the tokens do not hold exactly one pair in the task's layout.
bool parse_sequence(const std::int32_t* tokens, Sequence& out);

// Correct / total, as a fraction (0 when empty).
struct Accuracy {
  std::int64_t correct = 0, total = 0;
  void add(bool ok) {
    correct += ok ? 1 : 0;
    ++total;
  }
  double value() const { return total > 0 ? double(correct) / double(total) : 0.0; }
};

// The four measures of the task: seen pairs on training keys (train) and test keys (test);
// on the held-out pair the composite (inferential) and the mirror's answer (symmetric).
struct Scores {
  Accuracy train, test, inferential, symmetric;
};

// Adds one prediction (the model's argmax at the last position) for a sequence of a stream.
void score(Stream stream, const Sequence& s, std::int32_t predicted, Scores& out);

}  // namespace gc::rt::anchor
