// Where one rank keeps each tensor's gradients (and an engine its optimizer state: AdamW's
// moments, under bf16 the fp32 masters) in its flat arrays (issue 39 item 3).
//
//   whole          every tensor, at its kOffsets place (model/param_offsets.hpp): one process,
//                  data parallelism, ZeRO-1 (which shards the whole array its own way)
//   expert block   distributed.expert_parallel = G: of each stacked expert tensor
//                  [E, out, in] only the rank's own block of experts [lo, hi)
//                  (model/expert_parallel.hpp's expert_block), every other tensor whole. The
//                  rank computes and updates nothing else of an expert tensor, so it holds
//                  1/G of the experts' weights (BasicModel::use_weight_layout), gradients and
//                  state. Under ZeRO-1 the state is then cut over the block's owners.
//
// Each tensor's slots start on a multiple of kTensorAlign, as in the parameter array.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "config.hpp"
#include "model/moe_block.hpp"
#include "model/param_offsets.hpp"
#include "plan.hpp"

namespace gc::tree {

// Whether tensor i is a stacked expert tensor [E, out, in] (an MoE layer's gate, up or down).
inline bool is_expert_tensor(int i) {
  for (int l = 0; l < kLayers; ++l) {
    if (!is_moe_layer(l)) continue;
    const MoeParams P = moe_params(l);
    if (i == P.gate || i == P.up || i == P.down) return true;
  }
  return false;
}

// Expert parallelism: the flat elements [a, b) (kOffsets layout) of experts
// [block.first, block.second) of expert tensor i, or all of tensor i when it is not an expert
// tensor.
inline std::pair<std::int64_t, std::int64_t> expert_block_part(int i, std::pair<int, int> block) {
  if (!is_expert_tensor(i)) return {kOffsets.at[i], kOffsets.at[i] + kParams[i].numel};
  const std::int64_t per = kParams[i].numel / kExperts;
  return {kOffsets.at[i] + block.first * per, kOffsets.at[i] + block.second * per};
}

class StateLayout {
 public:
  // kOffsets' layout: every tensor whole.
  static StateLayout whole() { return StateLayout({0, kExperts}); }
  // Of each expert tensor only experts [block.first, block.second).
  static StateLayout of_expert_block(std::pair<int, int> block) { return StateLayout(block); }

  std::int64_t at(int i) const { return at_[std::size_t(i)]; }        // tensor i's first slot
  std::int64_t first(int i) const { return first_[std::size_t(i)]; }  // its first element held
  std::int64_t held(int i) const { return held_[std::size_t(i)]; }    // elements held
  std::int64_t total() const { return at_[std::size_t(kNumParams)]; }  // slots, alignment gaps included
  bool is_whole() const { return block_.first == 0 && block_.second == kExperts; }
  std::pair<int, int> expert_block() const { return block_; }
  // The slot of tensor i's element `from` (from the first held up to one past the last), which
  // this layout must hold; `what` names the array in the error ("weights", "gradients").
  std::int64_t slot_of(int i, std::int64_t from, const char* what) const {
    if (from < first(i) || from > first(i) + held(i)) {
      throw std::logic_error(std::string("the ") + what + " of " + kParams[i].name + " from element " +
                             std::to_string(from) + " are not held on this rank");
    }
    return at(i) + (from - first(i));
  }
  // Tensor i's held elements in the whole flat array (kOffsets layout): [a, b).
  std::pair<std::int64_t, std::int64_t> whole_part(int i) const {
    const std::int64_t a = kOffsets.at[i] + first(i);
    return {a, a + held(i)};
  }

 private:
  explicit StateLayout(std::pair<int, int> block) : block_(block) {
    for (int i = 0; i < kNumParams; ++i) {
      const auto [a, b] = expert_block_part(i, block);
      first_[std::size_t(i)] = a - kOffsets.at[i];
      held_[std::size_t(i)] = b - a;
      const std::int64_t end = at_[std::size_t(i)] + held_[std::size_t(i)];
      at_[std::size_t(i) + 1] = (end + kTensorAlign - 1) / kTensorAlign * kTensorAlign;
    }
  }
  std::pair<int, int> block_;
  std::array<std::int64_t, kNumParams + 1> at_{};
  std::array<std::int64_t, kNumParams> first_{}, held_{};
};

// This rank's part (`layout`) of a whole host array (kOffsets layout: a resume).
inline void keep_layout_part(const StateLayout& layout, float* mine, const float* whole) {
  for (int i = 0; i < kNumParams; ++i) {
    const auto [a, b] = layout.whole_part(i);
    std::copy(whole + a, whole + b, mine + layout.at(i));
  }
}

// The reverse: this rank's part (`layout`) into its places in a whole host array.
inline void put_layout_part(const StateLayout& layout, float* whole, const float* mine) {
  for (int i = 0; i < kNumParams; ++i) {
    const float* held = mine + layout.at(i);
    std::copy(held, held + layout.held(i), whole + layout.whole_part(i).first);
  }
}

}  // namespace gc::tree
