// The spec's enum values by the names the spec language gives them (the reverse of the choices
// validate.cpp reads): what explain prints, the knobs bind and the export writes.
#include "spec/spec.hpp"

namespace gc {

const char* to_string(Distribution d) {
  switch (d) {
    case Distribution::normal: return "normal";
    case Distribution::trunc_normal: return "trunc_normal";
    case Distribution::uniform: return "uniform";
  }
  return "normal";
}

const char* to_string(GatedAttention g) {
  switch (g) {
    case GatedAttention::none: return "none";
    case GatedAttention::headwise: return "headwise";
    case GatedAttention::elementwise: return "elementwise";
  }
  return "none";
}

const char* to_string(NormPlacement p) { return p == NormPlacement::sandwich ? "sandwich" : "pre"; }

const char* to_string(Precision p) { return p == Precision::fp32 ? "fp32" : "bf16"; }

const char* to_string(Decay d) {
  switch (d) {
    case Decay::cosine: return "cosine";
    case Decay::linear: return "linear";
    case Decay::constant: return "constant";
  }
  return "cosine";
}

}  // namespace gc
