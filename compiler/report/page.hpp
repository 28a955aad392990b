// `gcompile report RUN_DIR... [-o FILE.html] [--compare FILE.json ...]`: one
// self-contained HTML page (inline CSS, inline SVG, images as data: URIs) that
// shows what a researcher studying initialization wants to see of the runs.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "report/compare.hpp"
#include "report/report.hpp"

namespace gc::report {

struct ReportOptions {
  std::vector<std::string> run_dirs;
  std::vector<std::string> compare_files;  // besides RUN/*.compare.json
  std::string output = "report.html";
};

// The whole page. Deterministic: the same data gives the same bytes.
std::string render_report(const std::vector<RunData>& runs, const std::vector<Comparison>& comparisons);

// Reads the runs and comparisons, writes the page atomically and prints a
// one-line summary to `out`. Returns 0, or 1 after printing
// "gcompile: error: ..." (naming the path at fault) to `err`.
int report_command(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace gc::report
