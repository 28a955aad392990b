// The Backend contract (templates/model/backend_contract.hpp) is complete and
// typed: the whole model compiles against ContractBackend, a backend with
// three distinct element types whose kernels do nothing, and runs a forward
// and backward pass through it, calling attention once per layer each way.
// A model call missing from the contract, or passing a gradient where an
// activation belongs, stops this file from compiling.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "model/backend_contract.hpp"
#include "model/model.hpp"

// Every member of the model, instantiated against the contract (the default templates/config.hpp
// and plan.hpp: a dense model, so the branches of other features are discarded here; the
// coverage trees of tests/cuda/specs compile those against both real backends).
template class gc::tree::BasicModel<gc::tree::ContractBackend>;

namespace {

TEST(BackendContract, TheModelNeedsNothingBeyondTheContract) {
  const int batch = 2, seq_len = 8;
  gc::tree::BasicModel<gc::tree::ContractBackend> model(batch, seq_len);
  std::vector<std::int32_t> tokens(std::size_t(batch * seq_len), 1), targets(tokens.size(), 2);
  model.forward_backward(tokens.data(), targets.data(), 1.0);
  const auto& calls = model.backend().calls;
  EXPECT_EQ(calls.attention_forward, gc::tree::kLayers);
  EXPECT_EQ(calls.attention_backward, gc::tree::kLayers);
  EXPECT_GE(calls.linear, gc::tree::kLayers);  // at least the attention output projection per layer
}

}  // namespace
