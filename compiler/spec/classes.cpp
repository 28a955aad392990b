#include "spec/classes.hpp"

namespace gc {

namespace {
constexpr std::array<const char*, kNumClasses> kNames = {
    "embedding",   "attn_q",      "attn_k",      "attn_v",      "attn_gate", "attn_o",
    "mlp_gate",    "mlp_up",      "mlp_down",    "router",      "expert_gate", "expert_up",
    "expert_down", "shared_gate", "shared_up",   "shared_down", "lm_head",   "norm",
};
}  // namespace

const char* class_name(ParamClass c) { return kNames[static_cast<std::size_t>(c)]; }

std::optional<ParamClass> class_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kNumClasses; ++i) {
    if (name == kNames[i]) return static_cast<ParamClass>(i);
  }
  return std::nullopt;
}

const std::vector<std::string>& class_names() {
  static const std::vector<std::string> names(kNames.begin(), kNames.end());
  return names;
}

const std::vector<std::string>& weight_class_names() {
  static const std::vector<std::string> names(kNames.begin(), kNames.begin() + kNumWeightClasses);
  return names;
}

const std::array<ParamClass, kNumClasses>& all_classes() {
  static const std::array<ParamClass, kNumClasses> classes = [] {
    std::array<ParamClass, kNumClasses> a{};
    for (std::size_t i = 0; i < kNumClasses; ++i) a[i] = static_cast<ParamClass>(i);
    return a;
  }();
  return classes;
}

std::optional<ParamClass> fallback_class(ParamClass c) {
  switch (c) {
    case ParamClass::expert_gate:
    case ParamClass::shared_gate: return ParamClass::mlp_gate;
    case ParamClass::expert_up:
    case ParamClass::shared_up: return ParamClass::mlp_up;
    case ParamClass::expert_down:
    case ParamClass::shared_down: return ParamClass::mlp_down;
    default: return std::nullopt;
  }
}

}  // namespace gc
