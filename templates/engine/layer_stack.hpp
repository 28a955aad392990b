// Where each layer's tensors lie in the flat gradient array (model/state_layout.hpp), for the CUDA
// engine's bucketed gradient reduction (engine/cuda_engine.cu, plan_buckets): buckets follow the
// layer stack only when each layer's tensors are one run of the array, the layers follow each
// other, and every other tensor lies before or after the stack (plan.hpp's order).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/model.hpp"
#include "model/state_layout.hpp"
#include "plan.hpp"

namespace gc::tree {

struct LayerStack {
  std::vector<std::int64_t> begin;  // each layer's first element
  std::int64_t end = 0;             // one past the last layer's last element
};

// The layer stack in `layout`, or nothing when the layout does not allow buckets by layer.
inline std::optional<LayerStack> contiguous_layer_stack(const StateLayout& layout) {
  std::vector<std::int64_t> begin(kLayers, -1), end(kLayers, -1);
  for (int i = 0; i < kNumParams; ++i) {
    const int l = kParams[i].layer;
    if (l < 0) continue;
    if (begin[std::size_t(l)] < 0) begin[std::size_t(l)] = layout.at(i);
    end[std::size_t(l)] = layout.at(i + 1);
  }
  for (int i = 0; i < kNumParams; ++i) {
    const bool outside = layout.at(i + 1) <= begin.front() || layout.at(i) >= end.back();
    if (kParams[i].layer < 0 && !outside) return std::nullopt;
  }
  for (int l = 0; l + 1 < kLayers; ++l) {
    if (end[std::size_t(l)] != begin[std::size_t(l + 1)]) return std::nullopt;
  }
  return LayerStack{begin, end.back()};
}

}  // namespace gc::tree
