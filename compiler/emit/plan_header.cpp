// plan.hpp: what varies per tensor (names, shapes, init rules, optimizer
// settings) as constexpr tables, in the order of the plan's parameter table.
#include <sstream>

#include "common/text.hpp"
#include "emit/emit.hpp"

namespace gc {

namespace {

const char* dist_enum(const ParamEntry& p) {
  if (p.cls == ParamClass::norm) return "InitKind::ones";
  switch (p.distribution) {
    case Distribution::normal: return "InitKind::normal";
    case Distribution::trunc_normal: return "InitKind::trunc_normal";
    case Distribution::uniform: return "InitKind::uniform";
  }
  return "InitKind::normal";
}

std::string literal(double v) {
  std::string s = format_double(v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace

std::string plan_header(const Plan& plan, const std::string& banner) {
  std::ostringstream o;
  o << banner;
  o << "// The parameter table: every trainable tensor with its init rule (seed 000\n"
       "// §4.2: σ = fan^-γ unless the spec gives a std expression) and optimizer\n"
       "// settings. Row order is the order of the checkpoint and of the optimizer.\n"
       "#pragma once\n\n#include <cstdint>\n\nnamespace gcm {\n\n";
  o << "enum class InitKind { normal, trunc_normal, uniform, ones };\n\n";
  o << "struct ParamInfo {\n"
       "  const char* name;      // HF Llama-style name\n"
       "  const char* cls;       // parameter class\n"
       "  int layer;             // -1 outside the layer stack\n"
       "  int rank;\n"
       "  std::int64_t shape[3];\n"
       "  std::int64_t numel;\n"
       "  InitKind init;\n"
       "  double std;            // σ of the rule (trunc_normal: of the untruncated normal)\n"
       "  double cutoff;         // trunc_normal: ±cutoff·σ\n"
       "  double lr_mult;\n"
       "  double weight_decay;   // decoupled λ (seed 003 eq. 1); 0 when exempt\n"
       "};\n\n";
  o << "inline constexpr int kNumParams = " << plan.params.size() << ";\n";
  o << "inline constexpr std::int64_t kTotalParams = " << plan.counts.total << ";\n\n";
  o << "inline constexpr ParamInfo kParams[kNumParams] = {\n";
  for (const auto& p : plan.params) {
    o << "    {" << cpp_string_literal(p.name) << ", " << cpp_string_literal(class_name(p.cls)) << ", " << p.layer << ", "
      << p.shape.size() << ", {";
    for (std::size_t i = 0; i < 3; ++i) o << (i ? ", " : "") << (i < p.shape.size() ? p.shape[i] : 1);
    o << "}, " << p.numel() << ", " << dist_enum(p) << ", " << literal(p.std) << ", " << literal(p.cutoff) << ", "
      << literal(p.lr_mult) << ", " << literal(p.weight_decay) << "},\n";
  }
  o << "};\n\n}  // namespace gcm\n";
  return o.str();
}

}  // namespace gc
