// `gcompile explain`: the plan as a readable report (rows group layers that
// share a tensor's shape and rule) or as JSON with every tensor for tools.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"

namespace gc {

std::string explain_text(const Plan& plan);
// Per-rank view of a data-parallel job of `world_size` ranks (explain --world-size N):
// micro-batches per rank and the model state each rank holds.
std::string explain_world(const Plan& plan, int world_size);
// Its expert-parallel part for a mixture-of-experts spec (explain_experts.cpp; "" when dense).
std::string explain_experts(const Plan& plan, int world_size);
nlohmann::ordered_json explain_json(const Plan& plan);

}  // namespace gc
