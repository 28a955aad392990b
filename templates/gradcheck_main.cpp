// ./gradcheck: checks this experiment's whole-model gradients against central
// finite differences in float64, on a small batch with the spec's exact
// architecture and initialization. Norm gains are perturbed away from 1 so
// their gradients are exercised too. Prints one line per tensor; exits 1 if
// any relative error exceeds the tolerance. The model's LM head runs in chunks of kHeadRows rows
// (forward_backward fuses each chunk's backward into the forward, as training does); the
// gradients must also equal, to rounding, those of a model that keeps every row's logits and
// those of the chunked model's plain forward + backward (which recomputes the chunks).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "config.hpp"
#include "core/philox.hpp"
#include "engine/cpu_model.hpp"
#include "plan.hpp"

namespace {

constexpr int kBatch = 2;
constexpr int kLen = gc::tree::kSeqLen < 6 ? gc::tree::kSeqLen : 6;
constexpr int kEntriesPerTensor = 6;
constexpr int kHeadRows = 5;  // three chunks of 12 rows (kLen = 6), the last one short
constexpr double kSamePathTolerance = 1e-12;
constexpr double kStep = 1e-5;
constexpr double kTolerance = 1e-6;
// Central differences of a double loss carry ~1e-16·|L|/h of rounding error,
// so entries whose gradient is below ~1e-8 are judged absolutely.
constexpr double kAbsoluteFloor = 1e-9;

// Deterministic pseudo-random integer in [0, n) from the Philox stream.
std::int64_t pick(std::uint64_t stream, std::uint64_t i, std::int64_t n) {
  const double u = gc::tree::core::philox_uniform(0x6772616463686b, std::uint32_t(stream), i);
  return std::min<std::int64_t>(n - 1, std::int64_t(u * double(n)));
}

// max |a − b| / max |b| over the flat gradient arrays.
double relative_max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return scale > 0.0 ? diff / scale : diff;
}

void initialize(gc::tree::Model<double>& model) {
  gc::tree::init_parameters(model.params.data(), gc::tree::kSeed);
  for (int i = 0; i < gc::tree::kNumParams; ++i) {
    if (gc::tree::kParams[i].init != gc::tree::InitKind::ones) continue;
    double* g = model.param(i);
    for (std::int64_t j = 0; j < gc::tree::kParams[i].numel; ++j)
      g[j] += 0.3 * (gc::tree::core::philox_uniform(7, i, j) - 0.5);
  }
}

// The gradients of a model with every row's logits (forward, backward) and of the chunked model's
// plain forward + backward, against `fused` (forward_backward). Returns false on a mismatch.
bool same_gradients_on_every_head_path(const std::vector<double>& fused, const std::int32_t* tokens,
                                       const std::int32_t* targets) {
  gc::tree::Model<double> kept(kBatch, kLen, gc::tree::kKeepLogits), recomputed(kBatch, kLen, kHeadRows);
  bool ok = true;
  for (auto* m : {&kept, &recomputed}) {
    initialize(*m);
    m->zero_grads();
    m->forward(tokens, targets);
    m->backward();
    const double diff = relative_max_difference(m->grads, fused);
    const bool same = diff <= kSamePathTolerance;
    std::printf("gradcheck: %s head vs chunked forward_backward: max difference %.2e%s\n",
                m == &kept ? "unchunked" : "chunked (recomputed)", diff, same ? "" : "  FAIL");
    ok = ok && same;
  }
  return ok;
}

// The logit moments a chunked forward tracks (the logit_std metric) against the sums over a kept
// model's logits. Returns false on a mismatch.
bool chunked_logit_moments_match(const std::int32_t* tokens, const std::int32_t* targets) {
  gc::tree::Model<double> kept(kBatch, kLen, gc::tree::kKeepLogits), chunked(kBatch, kLen, kHeadRows);
  initialize(kept);
  initialize(chunked);
  kept.forward(tokens, targets);
  chunked.track_logit_moments(true);
  chunked.forward(tokens, targets);
  double sum = 0.0, sum_sq = 0.0;
  for (std::int64_t i = 0; i < std::int64_t(kept.rows()) * gc::tree::kVocab; ++i) {
    const double z = double(gc::tree::kLogitScale) * kept.logits()[i];
    sum += z;
    sum_sq += z * z;
  }
  const double diff = std::max(std::fabs(chunked.logit_moments[0] - sum) / std::max(std::fabs(sum), 1e-300),
                               std::fabs(chunked.logit_moments[1] - sum_sq) / sum_sq);
  const bool same = diff <= kSamePathTolerance;
  std::printf("gradcheck: chunked head's logit moments vs the logits': relative difference %.2e%s\n", diff,
              same ? "" : "  FAIL");
  return same;
}

}  // namespace

int main() {
  gc::tree::Model<double> model(kBatch, kLen, kHeadRows);
  initialize(model);
  std::vector<std::int32_t> tokens(kBatch * kLen), targets(kBatch * kLen);
  for (std::size_t j = 0; j < tokens.size(); ++j) {
    tokens[j] = std::int32_t(pick(1, j, gc::tree::kVocab));
    targets[j] = std::int32_t(pick(2, j, gc::tree::kVocab));
  }
  model.zero_grads();
  const double loss = model.forward_backward(tokens.data(), targets.data(), 1.0);
  const bool same_paths = same_gradients_on_every_head_path(model.grads, tokens.data(), targets.data()) &&
                          chunked_logit_moments_match(tokens.data(), targets.data());
  std::printf("gradcheck: loss %.6f, %d tensors, %d entries each, step %g\n", loss, gc::tree::kNumParams,
              kEntriesPerTensor, kStep);
  double worst = 0.0;
  for (int i = 0; i < gc::tree::kNumParams; ++i) {
    const gc::tree::ParamInfo& p = gc::tree::kParams[i];
    double* w = model.param(i);
    double num_sq = 0.0, diff_sq = 0.0;
    for (int e = 0; e < kEntriesPerTensor; ++e) {
      const std::int64_t j = pick(100 + i, e, p.numel);
      const double saved = w[j];
      w[j] = saved + kStep;
      const double up = model.forward(tokens.data(), targets.data());
      w[j] = saved - kStep;
      const double down = model.forward(tokens.data(), targets.data());
      w[j] = saved;
      const double numeric = (up - down) / (2.0 * kStep);
      const double analytic = model.grads[std::size_t(gc::tree::kOffsets.at[i] + j)];
      num_sq += numeric * numeric;
      diff_sq += (numeric - analytic) * (numeric - analytic);
    }
    // Relative to the sampled gradient's norm, with an absolute floor.
    const double error = std::sqrt(diff_sq) / (std::sqrt(num_sq) + kAbsoluteFloor / kTolerance);
    worst = std::max(worst, error);
    std::printf("  %-48s |g| %.3e  |dg| %.2e  rel err %.2e%s\n", p.name, std::sqrt(num_sq), std::sqrt(diff_sq),
                error, error > kTolerance ? "  FAIL" : "");
  }
  const bool ok = worst <= kTolerance && same_paths;
  std::printf("gradcheck: worst relative error %.2e (tolerance %.0e): %s\n", worst, kTolerance, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
