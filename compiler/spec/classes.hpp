// Parameter classes: every trainable tensor belongs to one. Init rules,
// weight-decay exemptions and lr multipliers are stated per class.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gc {

enum class ParamClass {
  embedding, attn_q, attn_k, attn_v, attn_gate, attn_o, mlp_gate, mlp_up, mlp_down, router,
  expert_gate, expert_up, expert_down, shared_gate, shared_up, shared_down, lm_head,
  norm,  // RMSNorm gains: initialised to 1, never by an init rule
};

inline constexpr std::size_t kNumClasses = 18;
inline constexpr std::size_t kNumWeightClasses = 17;  // all but norm

const char* class_name(ParamClass c);
std::optional<ParamClass> class_from_name(std::string_view name);
// All class names, or only the weight classes (those an init rule covers).
const std::vector<std::string>& class_names();
const std::vector<std::string>& weight_class_names();
const std::array<ParamClass, kNumClasses>& all_classes();

// Expert and shared-expert classes take the matching mlp class's rule where
// they have none of their own (DESIGN §4).
std::optional<ParamClass> fallback_class(ParamClass c);

}  // namespace gc
