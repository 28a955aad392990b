// `gcompile explain`: the plan as a readable report (rows group layers that
// share a tensor's shape and rule) or as JSON with every tensor for tools.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "plan/plan.hpp"

namespace gc {

std::string explain_text(const Plan& plan);
nlohmann::ordered_json explain_json(const Plan& plan);

}  // namespace gc
