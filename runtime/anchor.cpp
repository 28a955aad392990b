#include "runtime/anchor.hpp"

#include <algorithm>

namespace gc::rt::anchor {

namespace {

// SplitMix64: a small, fully specified generator (std:: distributions are not portable).
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n) by multiply-shift (bias below 2^-40 for the n used here).
  int below(int n) { return int((unsigned __int128)next() * std::uint64_t(n) >> 64); }
  int between(int lo, int hi) { return lo + below(hi - lo + 1); }
};

Rng sequence_rng(const Task& task, Stream stream, std::uint64_t index) {
  Rng seeder{task.seed ^ (0x51ed270b27a3b1f5ull * (std::uint64_t(stream) + 1))};
  Rng rng{seeder.next() ^ (index * 0xd1b54a32d192ed03ull)};
  rng.next();
  return rng;
}

bool key_in_split(int x, int position, Stream stream) {
  const bool test_key = x % 9 == position;
  return stream == Stream::test ? test_key : stream == Stream::train ? !test_key : true;
}

}  // namespace

int shift(int anchor) {
  static constexpr int kShift[] = {0, 5, 1, -2, -8};
  return anchor >= kAnchorLo && anchor <= kAnchorHi ? kShift[anchor] : 0;
}

int composite(int x, int a1, int a2) { return x + shift(a1) + shift(a2); }

int Task::trained_target(int x, int a1, int a2) const {
  return composite(x, a1, a2) + (is_mirror(a1, a2) ? kSymmetricOffset : 0);
}

int Task::min_vocab() const {
  int top = 0;
  for (int a1 = kAnchorLo; a1 <= kAnchorHi; ++a1) {
    for (int a2 = kAnchorLo; a2 <= kAnchorHi; ++a2) {
      const int extra = is_mirror(a1, a2) || is_held_out(a1, a2) ? kSymmetricOffset : 0;
      top = std::max(top, composite(kItemHi, a1, a2) + extra);
    }
  }
  return std::max(top, kItemHi) + 1;
}

std::string Task::check() const {
  for (int a : {held_first, held_second}) {
    if (a < kAnchorLo || a > kAnchorHi) return "anchors are tokens 1 to 4 (got " + std::to_string(a) + ")";
  }
  if (held_first == held_second) {
    return "the held-out pair needs two different anchors, so that its mirror is another pair (got [" +
           std::to_string(held_first) + ", " + std::to_string(held_second) + "])";
  }
  return "";
}

Sequence make_sequence(const Task& task, Stream stream, std::uint64_t index) {
  Rng rng = sequence_rng(task, stream, index);
  Sequence s;
  for (auto& t : s.tokens) t = rng.between(kItemLo, kItemHi);
  if (stream == Stream::held_out) {
    s.a1 = task.held_first;
    s.a2 = task.held_second;
  } else {
    do {  // one of the 15 trained pairs, uniformly
      s.a1 = rng.between(kAnchorLo, kAnchorHi);
      s.a2 = rng.between(kAnchorLo, kAnchorHi);
    } while (task.is_held_out(s.a1, s.a2));
  }
  s.position = rng.between(0, kMaxPosition);
  do {
    s.x = rng.between(kItemLo, kItemHi);
  } while (!key_in_split(s.x, s.position, stream));
  s.tokens[std::size_t(s.position)] = s.x;
  s.tokens[std::size_t(s.position) + 1] = s.a1;
  s.tokens[std::size_t(s.position) + 2] = s.a2;
  s.target = stream == Stream::held_out ? composite(s.x, s.a1, s.a2) : task.trained_target(s.x, s.a1, s.a2);
  return s;
}

std::vector<Sequence> make_sequences(const Task& task, Stream stream, std::uint64_t count) {
  std::vector<Sequence> out;
  out.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) out.push_back(make_sequence(task, stream, i));
  return out;
}

std::vector<std::uint32_t> sequence_tokens(const std::vector<Sequence>& sequences) {
  std::vector<std::uint32_t> out;
  out.reserve(sequences.size() * (kInputs + 1));
  for (const Sequence& s : sequences) {
    for (std::int32_t t : s.tokens) out.push_back(std::uint32_t(t));
    out.push_back(std::uint32_t(s.target));
  }
  return out;
}

bool parse_sequence(const std::int32_t* tokens, Sequence& out) {
  int first_anchor = -1, anchors = 0;
  for (int i = 0; i < kInputs; ++i) {
    const bool is_anchor = tokens[i] >= kAnchorLo && tokens[i] <= kAnchorHi;
    if (is_anchor && first_anchor < 0) first_anchor = i;
    anchors += is_anchor ? 1 : 0;
  }
  const int p = first_anchor - 1;
  if (anchors != 2 || p < 0 || p > kMaxPosition || !(tokens[p + 2] >= kAnchorLo && tokens[p + 2] <= kAnchorHi)) {
    return false;
  }
  std::copy(tokens, tokens + kInputs, out.tokens.begin());
  out.position = p;
  out.x = tokens[p];
  out.a1 = tokens[p + 1];
  out.a2 = tokens[p + 2];
  return out.x >= kItemLo && out.x <= kItemHi;
}

void score(Stream stream, const Sequence& s, std::int32_t predicted, Scores& out) {
  switch (stream) {
    case Stream::train: out.train.add(predicted == s.target); break;
    case Stream::test: out.test.add(predicted == s.target); break;
    case Stream::held_out:
      out.inferential.add(predicted == composite(s.x, s.a1, s.a2));
      out.symmetric.add(predicted == composite(s.x, s.a1, s.a2) + kSymmetricOffset);
      break;
  }
}

}  // namespace gc::rt::anchor
