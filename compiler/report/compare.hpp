// The token-level comparison of two checkpoints written by `analyze compare`
// (seed 000 §2.5), read for the report. Δsym p = 2(p_a − p_b)/(p_a + p_b);
// model a is the "small init" one, so Δsym p > 0 means a predicts the token better.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gc::report {

struct CompareSide {
  std::string label;
  std::string checkpoint;
  std::int64_t step = -1;  // -1: not given
  double mean_loss = 0;    // NaN: not given
};

struct DifficultyDecile {
  int decile = 0;  // 1 = easiest
  double difficulty_min = 0, difficulty_max = 0;
  std::int64_t count = 0;
  double mean = 0, median = 0;
};

struct TokenGain {
  std::int64_t position = 0;
  std::string context;  // text before the token
  std::string token;
  double delta_sym_p = 0, p_a = 0, p_b = 0;
};

struct Comparison {
  std::string path;
  CompareSide a, b;
  std::int64_t tokens = 0;
  double mean_delta_p = 0, mean_delta_sym_p = 0, median_delta_sym_p = 0;  // NaN: not given
  std::vector<double> histogram_edges;                                    // counts.size() + 1, or empty
  std::vector<double> histogram_counts;
  std::vector<DifficultyDecile> deciles;
  std::vector<TokenGain> top_gains;
};

// Reads and checks a comparison file. "a" and "b" (objects with a "label")
// are required; every other field is optional but must have the right type.
// Throws ReportError naming the file and the JSON pointer of a bad field.
Comparison load_comparison(const std::string& path);
Comparison parse_comparison(const std::string& text, const std::string& path);

}  // namespace gc::report
