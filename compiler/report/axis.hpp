// Axis arithmetic for the report's plots: data points, linear and log scales
// that map data to pixels, "nice" tick positions and readable tick labels.
// Everything here is pure and deterministic (no locale, no clock).
#pragma once

#include <string>
#include <vector>

namespace gc::report {

// One data point; a non-finite coordinate is a gap in a line.
struct Point {
  double x = 0;
  double y = 0;
};
inline bool operator==(const Point& a, const Point& b) { return a.x == b.x && a.y == b.y; }

enum class AxisScale { Linear, Log };

// An axis: its data domain [lo, hi], the tick positions inside it and their labels.
struct Axis {
  AxisScale scale = AxisScale::Linear;
  double lo = 0;
  double hi = 1;
  std::vector<double> ticks;
  std::vector<std::string> labels;  // one per tick
};

// Maps data values on an axis to pixel positions (p0 at lo, p1 at hi).
class Scale {
 public:
  Scale(const Axis& axis, double p0, double p1);
  // False for NaN/Inf, and for values <= 0 on a log axis: such points are not drawn.
  bool accepts(double v) const;
  double map(double v) const;

 private:
  AxisScale scale_;
  double d0_, d1_, p0_, p1_;
};

// Tick spacing of 1, 2 or 5 × 10^k giving about `target` intervals over `range`.
double nice_step(double range, int target);
// Multiples of `step` inside [lo, hi] (with a little tolerance at the ends).
std::vector<double> ticks_in(double lo, double hi, double step);

// A linear axis covering [data_min, data_max]. With `snap`, the domain is
// widened outward to whole ticks (for y axes); otherwise it is the data range
// (for step axes). A degenerate or empty range is widened so it can be drawn.
Axis linear_axis(double data_min, double data_max, bool snap, int target_ticks = 5);
// A log10 axis over positive [data_min, data_max]: decades, or 1-2-5 steps, or
// 1..9 multiples when the range is narrow, and linear ticks as a last resort.
Axis log_axis(double data_min, double data_max, int max_ticks = 8);
// Log when the positive values span more than `ratio` (max/min) and none is <= 0.
AxisScale choose_scale(double data_min, double data_max, double ratio = 50);

// Integer ticks (step 1, 2, 5, 10, ...) for a layer-index axis over [lo, hi].
std::vector<double> integer_ticks(double lo, double hi, int max_ticks = 12);

// Labels for linear-axis ticks spaced `step` apart, in one style for the whole
// axis: as many decimals as the step needs ("0.25", "3"), "k"/"M" suffixes
// when the largest tick is >= 10^4 ("20k", "1.5M"), and compact scientific
// notation ("2e-5") when every tick is tiny.
std::vector<std::string> linear_tick_labels(const std::vector<double>& ticks, double step);
// A label for a log-axis tick: "0.01", "500", "1e-6".
std::string format_log_tick(double v);
// A value for tables, legends and captions: about `significant` digits ("3.142", "1.2e-5").
std::string format_value(double v, int significant = 4);
// A pixel coordinate with one decimal ("12.5"); never "nan" (non-finite gives "0").
std::string format_coord(double v);

}  // namespace gc::report
