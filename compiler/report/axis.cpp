#include "report/axis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gc::report {

namespace {

constexpr double kTolerance = 1e-9;

// Decimal places needed to print multiples of `step` exactly (0.25 -> 2, 5 -> 0).
int decimals_for(double step) {
  for (int d = 0; d < 9; ++d) {
    const double scaled = step * std::pow(10.0, d);
    if (std::fabs(scaled - std::round(scaled)) <= 1e-6 * std::max(1.0, scaled)) return d;
  }
  return 9;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  std::string out = buf;
  if (out.find_first_not_of("-0.") == std::string::npos) return decimals ? "0." + std::string(decimals, '0') : "0";
  return out;
}

// "1.2e-05" -> "1.2e-5", "1.23e+04" -> "1.23e4".
std::string compact_exponent(std::string text) {
  const auto e = text.find('e');
  if (e == std::string::npos) return text;
  std::string mantissa = text.substr(0, e), exponent = text.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
  while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

// "1e-4", "2.5e12": scientific notation with trailing mantissa zeros dropped.
std::string scientific(double v, int significant) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", std::max(0, significant - 1), v);
  std::string text = buf;
  const auto e = text.find('e');
  std::string mantissa = text.substr(0, e);
  if (mantissa.find('.') != std::string::npos) {
    while (mantissa.back() == '0') mantissa.pop_back();
    if (mantissa.back() == '.') mantissa.pop_back();
  }
  return compact_exponent(mantissa + text.substr(e));
}

std::string general(double v, int significant) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g", significant, v);
  return compact_exponent(buf);
}

// Significant digits that tell ticks `step` apart at magnitude |v|.
int significant_for(double v, double step) {
  const int digits = int(std::floor(std::log10(std::fabs(v)))) - int(std::floor(std::log10(step))) + 1;
  return std::clamp(digits, 1, 6);
}

// Ticks at mantissas `mults` × 10^k inside [lo, hi].
std::vector<double> log_candidates(double lo, double hi, const std::vector<int>& mults) {
  std::vector<double> out;
  const int k0 = int(std::floor(std::log10(lo))), k1 = int(std::ceil(std::log10(hi)));
  for (int k = k0; k <= k1; ++k) {
    for (int m : mults) {
      const double v = m * std::pow(10.0, k);
      if (v >= lo * (1 - kTolerance) && v <= hi * (1 + kTolerance)) out.push_back(v);
    }
  }
  return out;
}

// Keeps every k-th tick so at most `max_ticks` remain.
std::vector<double> thin(const std::vector<double>& ticks, int max_ticks) {
  if (int(ticks.size()) <= max_ticks) return ticks;
  const std::size_t every = (ticks.size() + std::size_t(max_ticks) - 1) / std::size_t(max_ticks);
  std::vector<double> out;
  for (std::size_t i = 0; i < ticks.size(); i += every) out.push_back(ticks[i]);
  return out;
}

}  // namespace

Scale::Scale(const Axis& axis, double p0, double p1)
    : scale_(axis.scale), d0_(axis.lo), d1_(axis.hi), p0_(p0), p1_(p1) {
  if (scale_ == AxisScale::Log) {
    d0_ = std::log10(d0_);
    d1_ = std::log10(d1_);
  }
  if (!(d1_ > d0_)) d1_ = d0_ + 1;
}

bool Scale::accepts(double v) const { return std::isfinite(v) && (scale_ == AxisScale::Linear || v > 0); }

double Scale::map(double v) const {
  const double d = scale_ == AxisScale::Log ? std::log10(v) : v;
  return p0_ + (d - d0_) / (d1_ - d0_) * (p1_ - p0_);
}

double nice_step(double range, int target) {
  const double raw = range / std::max(1, target);
  if (!(raw > 0) || !std::isfinite(raw)) return 1;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double mult = norm < 1.5 ? 1 : norm < 3.5 ? 2 : norm < 7.5 ? 5 : 10;
  return mult * magnitude;
}

std::vector<double> ticks_in(double lo, double hi, double step) {
  std::vector<double> out;
  if (!(step > 0) || !std::isfinite(lo) || !std::isfinite(hi)) return out;
  const double k0 = std::ceil(lo / step - kTolerance), k1 = std::floor(hi / step + kTolerance);
  if (k1 - k0 > 1000) return out;
  for (double k = k0; k <= k1; ++k) {
    const double v = k * step;
    out.push_back(std::fabs(v) < step * kTolerance ? 0.0 : v);
  }
  return out;
}

std::vector<double> integer_ticks(double lo, double hi, int max_ticks) {
  double step = 1;
  const double steps[] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
  for (double s : steps) {
    step = s;
    if (std::floor((hi - lo) / s) + 1 <= max_ticks) break;
  }
  return ticks_in(lo, hi, step);
}

Axis linear_axis(double data_min, double data_max, bool snap, int target_ticks) {
  if (!std::isfinite(data_min) || !std::isfinite(data_max) || data_min > data_max) {
    data_min = 0;
    data_max = 1;
  }
  if (data_max - data_min <= 1e-12 * std::max(1.0, std::fabs(data_max))) {
    const double pad = data_min == 0 ? 1 : std::fabs(data_min) * 0.1;
    data_min -= pad;
    data_max += pad;
  }
  Axis axis;
  const double step = nice_step(data_max - data_min, target_ticks);
  axis.lo = snap ? std::floor(data_min / step + kTolerance) * step : data_min;
  axis.hi = snap ? std::ceil(data_max / step - kTolerance) * step : data_max;
  axis.ticks = ticks_in(axis.lo, axis.hi, step);
  axis.labels = linear_tick_labels(axis.ticks, step);
  return axis;
}

Axis log_axis(double data_min, double data_max, int max_ticks) {
  if (!(data_min > 0) || !std::isfinite(data_min) || !std::isfinite(data_max) || data_max < data_min) {
    data_min = 1;
    data_max = 10;
  }
  if (data_max / data_min < 1.0001) {
    data_min /= 2;
    data_max *= 2;
  }
  const double l0 = std::log10(data_min), l1 = std::log10(data_max), pad = (l1 - l0) * 0.04;
  Axis axis;
  axis.scale = AxisScale::Log;
  axis.lo = std::pow(10.0, l0 - pad);
  axis.hi = std::pow(10.0, l1 + pad);
  for (const auto& mults : {std::vector<int>{1}, std::vector<int>{1, 2, 5}, std::vector<int>{1, 2, 3, 5, 7}}) {
    axis.ticks = log_candidates(axis.lo, axis.hi, mults);
    if (axis.ticks.size() >= 3) break;
  }
  if (axis.ticks.size() < 2) {
    // Less than a factor of ~1.4: plain linear ticks, placed on the log scale.
    const double step = nice_step(axis.hi - axis.lo, 4);
    axis.ticks.clear();
    for (double v : ticks_in(axis.lo, axis.hi, step)) {
      if (v > 0) axis.ticks.push_back(v);
    }
  }
  axis.ticks = thin(axis.ticks, max_ticks);
  for (double v : axis.ticks) axis.labels.push_back(format_log_tick(v));
  return axis;
}

AxisScale choose_scale(double data_min, double data_max, double ratio) {
  return data_min > 0 && std::isfinite(data_max) && data_max / data_min > ratio ? AxisScale::Log : AxisScale::Linear;
}

std::vector<std::string> linear_tick_labels(const std::vector<double>& ticks, double step) {
  double largest = 0;
  for (double v : ticks) largest = std::max(largest, std::fabs(v));
  std::vector<std::string> out;
  for (double v : ticks) {
    if (std::fabs(v) < step * 1e-6) {
      out.push_back("0");
    } else if (largest >= 1e12 || largest < 1e-3) {
      out.push_back(scientific(v, significant_for(v, step)));
    } else if (largest >= 1e4) {
      const double unit = largest >= 1e6 ? 1e6 : 1e3;
      out.push_back(fixed(v / unit, decimals_for(step / unit)) + (unit == 1e6 ? "M" : "k"));
    } else {
      out.push_back(fixed(v, decimals_for(step)));
    }
  }
  return out;
}

std::string format_log_tick(double v) {
  if (v >= 1e6 && v < 1e12) return general(v / 1e6, 3) + "M";
  if (v >= 1e3 && v < 1e6) return general(v / 1e3, 3) + "k";
  if (v < 1e-3 || v >= 1e12) return scientific(v, 3);
  return general(v, 3);
}

std::string format_value(double v, int significant) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return "0";
  return general(v, significant);
}

std::string format_coord(double v) {
  if (!std::isfinite(v)) return "0";
  return fixed(v, 1);
}

}  // namespace gc::report
