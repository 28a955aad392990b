// The pieces of an HF export that depend only on the plan: the class choice
// (hf_export.hpp), config.json and the tensors under that class's names.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "export/hf_export.hpp"
#include "plan/plan.hpp"

namespace gc {

struct HfTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// Where the trained values come from (a checkpoint; a test's fake).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The parameter under its checkpoint name, checked against `shape`.
  virtual std::vector<float> weight(const std::string& name, const std::vector<std::int64_t>& shape) const = 0;
  // The aux_free selection biases of MoE layer `layer` (n_experts values).
  virtual std::vector<float> selection_bias(int layer, std::int64_t n_experts) const = 0;
};

// config.json; `provenance` goes under "gcompile" (experiment, spec hash, step).
nlohmann::json hf_config(const Plan& plan, const HfLayout& layout, bool bf16, const nlohmann::json& provenance);

// Every tensor of the export, in plan order (then the added zero biases and gates).
std::vector<HfTensor> hf_tensors(const Plan& plan, const HfLayout& layout, const TensorSource& source);

}  // namespace gc
