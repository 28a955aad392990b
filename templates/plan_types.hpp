// The types of the plan's tables (plan.hpp). gcompile writes plan.hpp as data only: the rows of
// kParams and kLayerParams, in the order of the fields declared here (compiler/emit/plan_header.cpp
// reads LayerParams' fields from this file and stops if it meets one it cannot fill).
#pragma once

#include <cstdint>

namespace gc::tree {

enum class InitKind { normal, trunc_normal, uniform, ones };

// One trainable tensor: its name, shape, init rule and optimizer settings.
struct ParamInfo {
  const char* name;  // HF Llama-style name
  const char* cls;   // parameter class
  int layer;         // -1 outside the layer stack
  int rank;
  std::int64_t shape[3];
  std::int64_t numel;
  InitKind init;        // σ of the rule: kInitStd[row] (plan_init.cpp)
  double cutoff;        // trunc_normal: ±cutoff·σ
  double lr_mult;
  double weight_decay;  // decoupled λ (seed 003 eq. 1); 0 when exempt
};

// Steps defined in plan_init.cpp (a list whose length the spec sets), read with begin() and end().
struct StepList {
  const std::int64_t* first;
  int count;
  const std::int64_t* begin() const { return first; }
  const std::int64_t* end() const { return first + count; }
};

// One layer's tensors: each field is a row index into kParams, -1 where the layer has no such
// tensor (a dense layer has no router, a layer without QK-norm no q_norm).
struct LayerParams {
  int input_norm;
  int q;
  int k;
  int v;
  int q_norm;
  int k_norm;
  int gate;
  int o;
  int attn_out_norm;
  int post_attn_norm;
  int mlp_gate;
  int mlp_up;
  int mlp_down;
  int mlp_out_norm;
  int router;
  int experts_gate;
  int experts_up;
  int experts_down;
  int shared_gate;
  int shared_up;
  int shared_down;
};

}  // namespace gc::tree
