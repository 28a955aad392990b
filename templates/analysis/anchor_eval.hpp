// The anchor-function task's accuracies (data.format = "anchor"; runtime/anchor.hpp):
// train (seen pairs, training keys: the first sequences of train.bin), test (seen pairs,
// test keys), and on the held-out pair inferential (the composite, x−10 for (4,3)) and
// symmetric (the mirror's answer, x−6). A prediction is the argmax of the logits at the
// last position. Used in the training loop (a record at every evaluation) and by
// `analyze anchor`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "config.hpp"
#include "runtime/anchor.hpp"
#include "runtime/token_shard.hpp"

namespace gc::tree {

// How the data's sequences lie in the shards: the anchor task's are whole examples.
inline gc::rt::SequenceLayout sequence_layout() {
  return kAnchorTask ? gc::rt::SequenceLayout::examples : gc::rt::SequenceLayout::stream;
}

inline gc::rt::anchor::Task anchor_task() { return {kAnchorSeed, kAnchorHeldFirst, kAnchorHeldSecond}; }

// The index of the largest logit (the first of equals).
inline std::int32_t argmax_token(const float* row) {
  return std::int32_t(std::max_element(row, row + kVocab) - row);
}

// Scores `sequences` of one stream, kMicroBatch at a time. forward(inputs, targets) runs
// one micro-batch of kMicroBatch × kSeqLen tokens and returns its logits on the host
// ([rows, kVocab], fp32). The last micro-batch is filled up with its first sequence,
// whose repeats are not scored.
template <typename Forward>
void score_stream(gc::rt::anchor::Stream stream, const std::vector<gc::rt::anchor::Sequence>& sequences,
                  Forward&& forward, gc::rt::anchor::Scores& scores) {
  static_assert(!kAnchorTask || kSeqLen == gc::rt::anchor::kInputs, "the anchor task reads sequences of 9 tokens");
  std::vector<std::int32_t> inputs(std::size_t(kMicroBatch) * kSeqLen);
  std::vector<std::int32_t> targets(inputs.size(), gc::rt::kIgnoreTarget);
  for (std::size_t first = 0; first < sequences.size(); first += std::size_t(kMicroBatch)) {
    const std::size_t count = std::min(sequences.size() - first, std::size_t(kMicroBatch));
    for (std::size_t b = 0; b < std::size_t(kMicroBatch); ++b) {
      const auto& s = sequences[first + (b < count ? b : 0)];
      std::copy(s.tokens.begin(), s.tokens.end(), inputs.begin() + std::ptrdiff_t(b * kSeqLen));
      targets[(b + 1) * kSeqLen - 1] = s.target;
    }
    const float* logits = forward(inputs.data(), targets.data());
    for (std::size_t b = 0; b < count; ++b) {
      const float* last = logits + ((b + 1) * std::size_t(kSeqLen) - 1) * std::size_t(kVocab);
      gc::rt::anchor::score(stream, sequences[first + b], argmax_token(last), scores);
    }
  }
}

// The four accuracies over kAnchorEvalSequences sequences of each evaluation set.
template <typename Forward>
gc::rt::anchor::Scores anchor_scores(Forward&& forward) {
  using gc::rt::anchor::Stream;
  const gc::rt::anchor::Task task = anchor_task();
  gc::rt::anchor::Scores scores;
  for (Stream stream : {Stream::train, Stream::test, Stream::held_out}) {
    score_stream(stream, gc::rt::anchor::make_sequences(task, stream, std::uint64_t(kAnchorEvalSequences)), forward,
                 scores);
  }
  return scores;
}

// The metrics.jsonl record (docs/metrics.md, "anchor").
inline nlohmann::json anchor_record(std::int64_t step, const gc::rt::anchor::Scores& s) {
  return {{"step", step},
          {"metric", "anchor"},
          {"values",
           {{"train", s.train.value()},
            {"test", s.test.value()},
            {"inferential", s.inferential.value()},
            {"symmetric", s.symmetric.value()}}},
          {"sequences", s.test.total}};
}

}  // namespace gc::tree
