// The step profile's outputs: RUN/profile.json (schema "gcompile-profile-1", shared with
// bench/torch_baseline.py's profile of the PyTorch baseline) and the table `train --profile`
// prints. Rates: TFLOP/s for GEMMs and attention (FLOPs counted as in step_profile.hpp), GB/s
// for memory-bound ops (the fewest bytes the op must move), each as a share of the ceilings
// given (--profile-ceilings: the kit measures them) when given.
#pragma once

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "profile/step_profile.hpp"

namespace gcm::profile {

struct ReportInfo {
  std::string implementation = "gcompile";
  std::string backend;  // "cpu" or "cuda"
  std::string device;   // the engine's description
  std::string spec;
  int warmup_steps = 0;
  double tokens_per_step = 0.0;
  int micro_batches_per_step = 1;
  double ceiling_tflops = 0.0;  // 0: unknown
  double ceiling_gbps = 0.0;
};

// One row of the op table, per profiled step.
struct OpRow {
  const OpTotals* op;
  double calls, ms, tflops, gbps;  // tflops / gbps: 0 when the op has no FLOP / byte count
};

inline std::vector<OpRow> op_rows(const Recorder& r) {
  std::vector<OpRow> rows;
  const double steps = std::max(r.steps(), 1);
  for (const OpTotals& t : r.totals()) {
    if (t.calls == 0) continue;
    const double seconds = t.ms * 1e-3;
    rows.push_back({&t, double(t.calls) / steps, t.ms / steps, seconds > 0 && t.flops > 0 ? t.flops / seconds / 1e12 : 0.0,
                    seconds > 0 && t.bytes > 0 ? t.bytes / seconds / 1e9 : 0.0});
  }
  std::stable_sort(rows.begin(), rows.end(), [](const OpRow& a, const OpRow& b) { return a.ms > b.ms; });
  return rows;
}

// Timed ops a step (each is one or a few kernel launches: a launch-count proxy).
inline double ops_per_step(const std::vector<OpRow>& rows) {
  double calls = 0.0;
  for (const OpRow& row : rows) calls += row.calls;
  return calls;
}

// Milliseconds per step of each category, and the ops' sum.
inline std::vector<double> category_ms(const std::vector<OpRow>& rows, double* ops_ms) {
  std::vector<double> ms(kCategories, 0.0);
  *ops_ms = 0.0;
  for (const OpRow& row : rows) {
    ms[std::size_t(row.op->tag.category)] += row.ms;
    *ops_ms += row.ms;
  }
  return ms;
}

inline nlohmann::json profile_json(const Recorder& r, const ReportInfo& info) {
  const std::vector<OpRow> rows = op_rows(r);
  double ops_ms = 0.0;
  const std::vector<double> by_category = category_ms(rows, &ops_ms);
  const double step_ms = r.step_ms();
  const auto share = [&](double ms) { return step_ms > 0 ? ms / step_ms : 0.0; };
  const auto rate = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json ops = nlohmann::json::array();
  for (const OpRow& row : rows) {
    ops.push_back({{"category", name_of(row.op->tag.category)},
                   {"op", row.op->tag.op},
                   {"pass", name_of(row.op->tag.pass)},
                   {"calls_per_step", row.calls},
                   {"ms_per_step", row.ms},
                   {"share", share(row.ms)},
                   {"tflops", rate(row.tflops)},
                   {"gbps", rate(row.gbps)}});
  }
  nlohmann::json categories = nlohmann::json::object();
  for (int c = 0; c < kCategories; ++c) {
    if (by_category[std::size_t(c)] > 0) {
      categories[kCategoryNames[c]] = {{"ms_per_step", by_category[std::size_t(c)]},
                                       {"share", share(by_category[std::size_t(c)])}};
    }
  }
  const double idle = std::max(step_ms - ops_ms, 0.0);
  categories["idle"] = {{"ms_per_step", idle}, {"share", share(idle)}};
  return {{"schema", "gcompile-profile-1"},
          {"implementation", info.implementation},
          {"backend", info.backend},
          {"device", info.device},
          {"clock", r.clock_name()},
          {"spec", info.spec},
          {"warmup_steps", info.warmup_steps},
          {"profiled_steps", r.steps()},
          {"micro_batches_per_step", info.micro_batches_per_step},
          {"tokens_per_step", info.tokens_per_step},
          {"step_ms", step_ms},
          {"ops_ms", ops_ms},
          {"ops_per_step", ops_per_step(rows)},
          {"idle_ms", idle},
          {"tokens_per_s", step_ms > 0 ? info.tokens_per_step / (step_ms * 1e-3) : 0.0},
          {"ceiling_tflops", rate(info.ceiling_tflops)},
          {"ceiling_gbps", rate(info.ceiling_gbps)},
          {"overflowed", r.overflowed()},
          {"categories", categories},
          {"ops", ops}};
}

// "412.3 TFLOP/s (52%)" or "1830 GB/s" or "".
inline std::string rate_text(double tflops, double gbps, const ReportInfo& info) {
  char buf[64] = "";
  if (tflops > 0) {
    if (info.ceiling_tflops > 0) {
      std::snprintf(buf, sizeof buf, "%.1f TFLOP/s (%.0f%%)", tflops, 100.0 * tflops / info.ceiling_tflops);
    } else {
      std::snprintf(buf, sizeof buf, "%.1f TFLOP/s", tflops);
    }
  } else if (gbps > 0) {
    if (info.ceiling_gbps > 0) {
      std::snprintf(buf, sizeof buf, "%.0f GB/s (%.0f%%)", gbps, 100.0 * gbps / info.ceiling_gbps);
    } else {
      std::snprintf(buf, sizeof buf, "%.0f GB/s", gbps);
    }
  }
  return buf;
}

// The printed table: every op (largest first), then the categories with idle time.
inline std::string profile_table(const Recorder& r, const ReportInfo& info) {
  const std::vector<OpRow> rows = op_rows(r);
  double ops_ms = 0.0;
  const std::vector<double> by_category = category_ms(rows, &ops_ms);
  const double step_ms = r.step_ms();
  const auto pct = [&](double ms) { return step_ms > 0 ? 100.0 * ms / step_ms : 0.0; };
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "step profile: %s, %d steps after %d warm-up, %s; %.3f ms a step, %.0f timed ops a step, %.0f tokens/s\n",
                info.device.c_str(), r.steps(), info.warmup_steps, r.clock_name(), step_ms, ops_per_step(rows),
                step_ms > 0 ? info.tokens_per_step / (step_ms * 1e-3) : 0.0);
  out += line;
  std::snprintf(line, sizeof line, "%-15s %-34s %-8s %9s %10s %7s  %s\n", "category", "op", "pass", "calls", "ms/step",
                "share", "rate");
  out += line;
  for (const OpRow& row : rows) {
    std::snprintf(line, sizeof line, "%-15s %-34s %-8s %9.1f %10.3f %6.1f%%  %s\n", name_of(row.op->tag.category),
                  row.op->tag.op, name_of(row.op->tag.pass), row.calls, row.ms, pct(row.ms),
                  rate_text(row.tflops, row.gbps, info).c_str());
    out += line;
  }
  out += "\nby category (ms per step, share of the step)\n";
  std::vector<int> order;
  for (int c = 0; c < kCategories; ++c) {
    if (by_category[std::size_t(c)] > 0) order.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return by_category[std::size_t(a)] > by_category[std::size_t(b)]; });
  for (int c : order) {
    std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%\n", kCategoryNames[c], by_category[std::size_t(c)],
                  pct(by_category[std::size_t(c)]));
    out += line;
  }
  const double idle = std::max(step_ms - ops_ms, 0.0);
  std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%   (step time no op covers)\n", "idle", idle, pct(idle));
  out += line;
  std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%\n", "step", step_ms, step_ms > 0 ? 100.0 : 0.0);
  out += line;
  if (r.overflowed()) out += "note: a profiled step had more ops than the counting step; the excess was not timed\n";
  return out;
}

}  // namespace gcm::profile
