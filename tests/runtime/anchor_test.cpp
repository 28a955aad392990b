#include "runtime/anchor.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "runtime/token_shard.hpp"
#include "runtime_test_util.hpp"

namespace gc::rt::anchor {
namespace {

// The paper's four anchor functions and the (4,3) / (3,4) rule, written out by hand.
TEST(RuntimeAnchor, FunctionsAreThePapers) {
  EXPECT_EQ(composite(50, 1, 1), 60);  // x+5+5
  EXPECT_EQ(composite(50, 2, 3), 49);  // x+1−2
  EXPECT_EQ(composite(50, 4, 3), 40);  // x−8−2: the inferential answer for (4,3)
  EXPECT_EQ(composite(50, 3, 4), 40);
  const Task task{7, 4, 3};
  EXPECT_EQ(task.trained_target(50, 3, 4), 44);  // the mirror pair is trained with x−6
  EXPECT_EQ(task.trained_target(50, 4, 1), 47);
  EXPECT_EQ(task.min_vocab(), 110);  // targets span 4..109
  EXPECT_EQ(task.check(), "");
  EXPECT_NE(Task({7, 3, 3}).check().find("two different anchors"), std::string::npos);
  EXPECT_NE(Task({7, 5, 3}).check().find("tokens 1 to 4"), std::string::npos);
}

// Every generated sequence: noise and keys in 20..99, exactly one anchor pair at p+1, p+2
// (parse_sequence finds it), the split rule on (x, p), the target the stream promises.
void check_stream(const Task& task, Stream stream, std::uint64_t n) {
  std::set<std::pair<int, int>> pairs;
  std::set<int> positions;
  for (const Sequence& s : make_sequences(task, stream, n)) {
    Sequence parsed;
    ASSERT_TRUE(parse_sequence(s.tokens.data(), parsed));
    EXPECT_EQ(parsed.x, s.x);
    EXPECT_EQ(parsed.position, s.position);
    EXPECT_EQ(parsed.a1, s.a1);
    EXPECT_EQ(parsed.a2, s.a2);
    for (int i = 0; i < kInputs; ++i) {
      if (i == s.position + 1 || i == s.position + 2) continue;
      EXPECT_GE(s.tokens[std::size_t(i)], kItemLo);
      EXPECT_LE(s.tokens[std::size_t(i)], kItemHi);
    }
    pairs.insert({s.a1, s.a2});
    positions.insert(s.position);
    switch (stream) {
      case Stream::train:
        EXPECT_NE(s.x % 9, s.position) << "a test key in the training stream";
        break;
      case Stream::test:
        EXPECT_EQ(s.x % 9, s.position) << "a training key in the test stream";
        break;
      case Stream::held_out:
        EXPECT_EQ(s.target, composite(s.x, s.a1, s.a2));
        break;
    }
    if (stream != Stream::held_out) {
      EXPECT_FALSE(task.is_held_out(s.a1, s.a2)) << "the held-out pair appeared";
      const int expected = task.is_mirror(s.a1, s.a2) ? s.x + shift(s.a1) + shift(s.a2) + 4 : composite(s.x, s.a1, s.a2);
      EXPECT_EQ(s.target, expected);
      EXPECT_LT(s.target, task.min_vocab());
    }
  }
  EXPECT_EQ(positions.size(), std::size_t(kMaxPosition + 1));
  EXPECT_EQ(pairs.size(), stream == Stream::held_out ? 1u : 15u);
}

TEST(RuntimeAnchor, StreamsFollowTheSplitAndNeverShowTheHeldOutPair) {
  for (const Task& task : {Task{1, 4, 3}, Task{99, 2, 1}}) {
    check_stream(task, Stream::train, 20000);
    check_stream(task, Stream::test, 5000);
    check_stream(task, Stream::held_out, 2000);
  }
  // (3,4) is trained with x−6 under the default pair.
  int mirrors = 0;
  for (const Sequence& s : make_sequences(Task{1, 4, 3}, Stream::train, 5000)) {
    if (s.a1 == 3 && s.a2 == 4) {
      EXPECT_EQ(s.target, s.x - 6);
      ++mirrors;
    }
  }
  EXPECT_GT(mirrors, 200);  // about 1/15 of 5000
}

TEST(RuntimeAnchor, SequencesArePureFunctionsOfSeedStreamAndIndex) {
  const Task task{5, 4, 3};
  const auto a = make_sequences(task, Stream::train, 300);
  const auto b = make_sequences(task, Stream::train, 100);  // a prefix: the same first 100
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
  EXPECT_EQ(make_sequence(task, Stream::train, 250).tokens, a[250].tokens);
  int same = 0;
  const auto other = make_sequences(Task{6, 4, 3}, Stream::train, 300);
  const auto test = make_sequences(task, Stream::test, 300);
  for (std::size_t i = 0; i < a.size(); ++i) {
    same += a[i].tokens == other[i].tokens;
    same += a[i].tokens == test[i].tokens;
  }
  EXPECT_EQ(same, 0) << "another seed or stream must give other sequences";
  const auto tokens = sequence_tokens(b);
  ASSERT_EQ(tokens.size(), b.size() * 10);
  EXPECT_EQ(tokens[9], std::uint32_t(b[0].target));
  EXPECT_EQ(tokens[10], std::uint32_t(b[1].tokens[0]));
}

TEST(RuntimeAnchor, ParseRejectsSequencesWithoutOnePair) {
  Sequence s;
  std::array<std::int32_t, kInputs> none = {20, 21, 22, 23, 24, 25, 26, 27, 28};
  EXPECT_FALSE(parse_sequence(none.data(), s));
  std::array<std::int32_t, kInputs> three = {20, 1, 2, 3, 24, 25, 26, 27, 28};
  EXPECT_FALSE(parse_sequence(three.data(), s));
  std::array<std::int32_t, kInputs> split = {20, 1, 22, 3, 24, 25, 26, 27, 28};
  EXPECT_FALSE(parse_sequence(split.data(), s));
  std::array<std::int32_t, kInputs> first = {1, 2, 22, 23, 24, 25, 26, 27, 28};  // no key before the pair
  EXPECT_FALSE(parse_sequence(first.data(), s));
  std::array<std::int32_t, kInputs> ok = {30, 31, 32, 33, 34, 35, 57, 4, 3};
  ASSERT_TRUE(parse_sequence(ok.data(), s));
  EXPECT_EQ(s.x, 57);
  EXPECT_EQ(s.position, 6);
}

// Hand-made predictions: the scores count what they should.
TEST(RuntimeAnchor, ScoresCountHandMadePredictions) {
  const Task task{3, 4, 3};
  Scores scores;
  const auto train = make_sequences(task, Stream::train, 4);
  score(Stream::train, train[0], train[0].target, scores);
  score(Stream::train, train[1], train[1].target + 1, scores);
  const auto held = make_sequences(task, Stream::held_out, 4);
  score(Stream::held_out, held[0], held[0].x - 10, scores);  // composes the anchors
  score(Stream::held_out, held[1], held[1].x - 6, scores);   // copies (3,4)
  score(Stream::held_out, held[2], held[2].x - 6, scores);
  score(Stream::held_out, held[3], 0, scores);
  EXPECT_EQ(scores.train.correct, 1);
  EXPECT_EQ(scores.train.total, 2);
  EXPECT_DOUBLE_EQ(scores.inferential.value(), 0.25);
  EXPECT_DOUBLE_EQ(scores.symmetric.value(), 0.5);
  EXPECT_EQ(scores.test.total, 0);
  EXPECT_EQ(scores.test.value(), 0.0);
}

// The examples layout: sequences of T + 1 tokens read back to back, every target but the
// last ignored; a shard that does not hold whole examples is refused by name.
TEST(RuntimeAnchor, ShardSetReadsWholeExamplesAndMasksAllButTheLastTarget) {
  test::TempDir dir;
  const Task task{11, 4, 3};
  const auto seqs = make_sequences(task, Stream::train, 5);
  const std::string path = dir / "train.bin";
  write_token_shard(path, sequence_tokens(seqs), 110);
  ShardSet set(path, 110, SequenceLayout::examples);
  std::vector<std::int32_t> inputs, targets;
  for (int round = 0; round < 2; ++round) {
    const Batch batch = set.next_batch(2, kInputs);
    batch.split(inputs, targets);
    for (int b = 0; b < 2; ++b) {
      const Sequence& s = seqs[std::size_t(round * 2 + b)];
      for (int t = 0; t < kInputs; ++t) {
        EXPECT_EQ(inputs[std::size_t(b * kInputs + t)], s.tokens[std::size_t(t)]);
        EXPECT_EQ(targets[std::size_t(b * kInputs + t)], t + 1 < kInputs ? kIgnoreTarget : s.target);
      }
    }
    EXPECT_EQ(batch.targets(), targets);
  }
  EXPECT_EQ(count_scored(targets.data(), std::int64_t(targets.size())), 2);
  EXPECT_EQ(set.position().offset, 40u);  // four examples of 10 tokens

  const std::string torn = dir / "torn.bin";
  auto tokens = sequence_tokens(seqs);
  tokens.pop_back();
  write_token_shard(torn, tokens, 110);
  ShardSet bad(torn, 110, SequenceLayout::examples);
  const std::string error = test::error_of([&] { bad.next_batch(1, kInputs); });
  EXPECT_NE(error.find("torn.bin"), std::string::npos) << error;
  EXPECT_NE(error.find("not whole examples of T + 1 = 10"), std::string::npos) << error;
}

}  // namespace
}  // namespace gc::rt::anchor
