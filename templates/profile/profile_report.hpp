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

namespace gc::tree::profile {

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

// What both outputs show, computed once: the op rows, each category's and the ops' milliseconds
// per step, the step and its idle time.
struct Summary {
  std::vector<OpRow> rows;
  std::vector<double> category_ms;  // kCategories entries
  double ops_ms = 0.0, step_ms = 0.0, idle_ms = 0.0;
  double share(double ms) const { return step_ms > 0 ? ms / step_ms : 0.0; }
  double tokens_per_s(double tokens_per_step) const { return step_ms > 0 ? tokens_per_step / (step_ms * 1e-3) : 0.0; }
};

inline Summary summarize(const Recorder& r) {
  Summary s;
  s.rows = op_rows(r);
  s.category_ms.assign(kCategories, 0.0);
  for (const OpRow& row : s.rows) {
    s.category_ms[std::size_t(row.op->tag.category)] += row.ms;
    s.ops_ms += row.ms;
  }
  s.step_ms = r.step_ms();
  s.idle_ms = std::max(s.step_ms - s.ops_ms, 0.0);
  return s;
}

inline nlohmann::json profile_json(const Recorder& r, const ReportInfo& info) {
  const Summary s = summarize(r);
  const auto rate = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json ops = nlohmann::json::array();
  for (const OpRow& row : s.rows) {
    ops.push_back({{"category", name_of(row.op->tag.category)},
                   {"op", row.op->tag.op},
                   {"pass", name_of(row.op->tag.pass)},
                   {"calls_per_step", row.calls},
                   {"ms_per_step", row.ms},
                   {"share", s.share(row.ms)},
                   {"tflops", rate(row.tflops)},
                   {"gbps", rate(row.gbps)}});
  }
  nlohmann::json categories = nlohmann::json::object();
  for (int c = 0; c < kCategories; ++c) {
    const double ms = s.category_ms[std::size_t(c)];
    if (ms > 0) categories[kCategoryNames[c]] = {{"ms_per_step", ms}, {"share", s.share(ms)}};
  }
  categories["idle"] = {{"ms_per_step", s.idle_ms}, {"share", s.share(s.idle_ms)}};
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
          {"step_ms", s.step_ms},
          {"ops_ms", s.ops_ms},
          {"ops_per_step", ops_per_step(s.rows)},
          {"idle_ms", s.idle_ms},
          {"tokens_per_s", s.tokens_per_s(info.tokens_per_step)},
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
  const Summary s = summarize(r);
  const auto pct = [&](double ms) { return 100.0 * s.share(ms); };
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "step profile: %s, %d steps after %d warm-up, %s; %.3f ms a step, %.0f timed ops a step, %.0f tokens/s\n",
                info.device.c_str(), r.steps(), info.warmup_steps, r.clock_name(), s.step_ms, ops_per_step(s.rows),
                s.tokens_per_s(info.tokens_per_step));
  out += line;
  std::snprintf(line, sizeof line, "%-15s %-34s %-8s %9s %10s %7s  %s\n", "category", "op", "pass", "calls", "ms/step",
                "share", "rate");
  out += line;
  for (const OpRow& row : s.rows) {
    std::snprintf(line, sizeof line, "%-15s %-34s %-8s %9.1f %10.3f %6.1f%%  %s\n", name_of(row.op->tag.category),
                  row.op->tag.op, name_of(row.op->tag.pass), row.calls, row.ms, pct(row.ms),
                  rate_text(row.tflops, row.gbps, info).c_str());
    out += line;
  }
  out += "\nby category (ms per step, share of the step)\n";
  std::vector<int> order;
  for (int c = 0; c < kCategories; ++c) {
    if (s.category_ms[std::size_t(c)] > 0) order.push_back(c);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return s.category_ms[std::size_t(a)] > s.category_ms[std::size_t(b)]; });
  for (int c : order) {
    std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%\n", kCategoryNames[c], s.category_ms[std::size_t(c)],
                  pct(s.category_ms[std::size_t(c)]));
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%   (step time no op covers)\n", "idle", s.idle_ms,
                pct(s.idle_ms));
  out += line;
  std::snprintf(line, sizeof line, "  %-15s %10.3f %6.1f%%\n", "step", s.step_ms, s.step_ms > 0 ? 100.0 : 0.0);
  out += line;
  if (r.overflowed()) out += "note: a profiled step had more ops than the counting step; the excess was not timed\n";
  return out;
}

}  // namespace gc::tree::profile
