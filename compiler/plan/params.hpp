// The parameter table of a model: every trainable tensor with its name,
// class, layer, shape and fans. Initialization is filled in by the planner.
#pragma once

#include <vector>

#include "plan/plan.hpp"

namespace gc {

std::vector<ParamEntry> list_parameters(const Spec& spec, const std::vector<LayerPlan>& layers);

}  // namespace gc
