// The template <-> spec contract. A knob is
//
//   inline constexpr float kNormEps = gc::knob<float>("model.norm_eps", 1e-5f);
//
// gc::knob is the identity, so templates compile as plain C++/CUDA with their
// defaults (and are tested that way). gcompile's specializer replaces each
// such initializer with the spec's value, checked against the C++ type, and
// drops this include from the generated sources.
#pragma once

namespace gc {

template <typename T>
constexpr T knob(const char* /*spec_key*/, T default_value) {
  return default_value;
}

}  // namespace gc
