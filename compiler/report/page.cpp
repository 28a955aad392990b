// Page assembly: head and stylesheet, the runs table, the spec table, the
// table of contents, the data sections; and the `gcompile report` command.
#include "report/page.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>

#include "common/text.hpp"
#include "common/version.hpp"
#include "report/sections.hpp"
#include "runtime/atomic_file.hpp"
#include "runtime/error.hpp"

namespace gc::report {

namespace fs = std::filesystem;

namespace {

const char* const kStyle = R"(
body { font-family: "DejaVu Sans", Verdana, sans-serif; font-size: 14px; line-height: 1.45; color: #222;
       background: #fff; max-width: 1500px; margin: 0 auto; padding: 12px 24px 48px; }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 18px; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin: 34px 0 10px; }
h3 { font-size: 15px; margin: 22px 0 8px; }
h4 { font-size: 14px; margin: 16px 0 6px; }
.subtitle { color: #666; margin: 0 0 8px; }
nav ul { list-style: none; padding: 0; margin: 8px 0; display: flex; flex-wrap: wrap; gap: 4px 18px; }
nav a { color: #1f5fa8; text-decoration: none; }
table.data { border-collapse: collapse; margin: 8px 0 14px; }
table.data th, table.data td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
table.data th { background: #f5f5f5; font-weight: 600; }
table.data.compact { font-size: 12px; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.differs { background: #fff6dc; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 6px; vertical-align: -1px; }
.figures { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }
.figures.thumbs { grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 10px; }
figure { margin: 0; border: 1px solid #e4e4e4; border-radius: 4px; padding: 6px; background: #fff; }
figure svg { display: block; width: 100%; height: auto; }
figcaption { font-size: 12px; color: #555; margin: 4px 2px 0; }
.note { color: #555; font-size: 13px; margin: 6px 0 10px; }
.source { color: #666; font-size: 12px; font-family: "DejaVu Sans Mono", monospace; word-break: break-all; }
.bad { color: #b00020; font-weight: 600; }
code { font-family: "DejaVu Sans Mono", monospace; font-size: 12px; overflow-wrap: anywhere; }
ol.tokens { font-size: 13px; padding-left: 30px; }
ol.tokens li { margin: 4px 0; }
ol.tokens .delta { display: inline-block; min-width: 48px; font-weight: 600; font-variant-numeric: tabular-nums; }
ol.tokens .probs { display: inline-block; min-width: 150px; color: #666; font-size: 12px; }
ol.tokens .context { font-family: "DejaVu Sans Mono", monospace; font-size: 12px; white-space: pre-wrap; }
mark { padding: 0 2px; border-radius: 2px; }
footer { margin-top: 40px; color: #888; font-size: 12px; }
)";

std::string swatch(std::size_t run_index) {
  return "<span class=\"swatch\" style=\"background:" + run_color(run_index) + "\"></span>";
}

std::string value_cell(const std::optional<double>& v) {
  return "<td class=\"num\">" + (v ? format_value(*v) : std::string("—")) + "</td>";
}

std::optional<double> best(const Series& s) {
  std::optional<double> out;
  for (const Point& p : s) {
    if (std::isfinite(p.y) && (!out || p.y < *out)) out = p.y;
  }
  return out;
}

std::string runs_table(const std::vector<RunData>& runs) {
  std::string out =
      "<table class=\"data\"><tr><th>run</th><th>directory</th><th>last step</th><th>final loss</th>"
      "<th>final val loss</th><th>best val loss</th><th>status</th></tr>\n";
  for (std::size_t r = 0; r < runs.size(); ++r) {
    const RunData& run = runs[r];
    const std::string status = run.nonfinite_step ? "<span class=\"bad\">non-finite loss at step " +
                                                        std::to_string(*run.nonfinite_step) + "</span>"
                                                  : std::string(run.records ? "ok" : "empty log");
    out += "<tr><td>" + swatch(r) + html_escape(run.label) + "</td><td><code>" + html_escape(run.dir) +
           "</code></td><td class=\"num\">" + std::to_string(run.last_step) + "</td>" +
           value_cell(last_finite(run.loss)) + value_cell(last_finite(run.val_loss)) + value_cell(best(run.val_loss)) +
           "<td>" + status + "</td></tr>\n";
  }
  return out + "</table>\n";
}

std::string spec_section_html(const std::vector<RunData>& runs, const SpecTable& table) {
  std::string out = table.differences
                        ? "<p class=\"note\">Only the keys of <code>spec.resolved.toml</code> whose values differ "
                          "between runs (" +
                              std::to_string(table.keys.size()) + " keys; — = absent).</p>\n"
                        : "<p class=\"note\">Headline settings from <code>spec.resolved.toml</code>.</p>\n";
  out += "<table class=\"data spec\"><tr><th>key</th>";
  for (std::size_t r = 0; r < runs.size(); ++r) out += "<th>" + swatch(r) + html_escape(runs[r].label) + "</th>";
  out += "</tr>\n";
  for (std::size_t k = 0; k < table.keys.size(); ++k) {
    out += "<tr><td><code>" + html_escape(table.keys[k]) + "</code></td>";
    for (const auto& v : table.values[k]) {
      out += std::string(table.differences ? "<td class=\"differs\">" : "<td>") + "<code>" + html_escape(v) +
             "</code></td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

std::string page_title(const std::vector<RunData>& runs) {
  std::vector<std::string> labels;
  for (const auto& run : runs) labels.push_back(run.label);
  return "gcompile report: " + shorten(join(labels, ", "), 120);
}

std::string table_of_contents(const std::vector<Section>& sections) {
  std::string out = "<nav><ul>\n";
  for (const auto& s : sections) {
    out += "<li><a href=\"#" + html_escape(s.id) + "\">" + html_escape(s.title) + "</a></li>\n";
  }
  return out + "</ul></nav>\n";
}

std::vector<Section> all_sections(const std::vector<RunData>& runs, const std::vector<Comparison>& comparisons) {
  std::vector<Section> sections = {{"runs", "Runs", runs_table(runs)}};
  const SpecTable spec = spec_table(runs);
  if (!spec.keys.empty()) {
    sections.push_back({"spec", spec.differences ? "Spec differences" : "Spec", spec_section_html(runs, spec)});
  }
  for (auto part : {training_sections(runs), matrix_sections(runs), diagnostic_sections(runs),
                    other_metric_sections(runs), comparison_sections(comparisons)}) {
    for (auto& s : part) sections.push_back(std::move(s));
  }
  return sections;
}

// Comparison files named on the command line, then those found in run
// directories, each once.
std::vector<Comparison> load_comparisons(const ReportOptions& options, const std::vector<RunData>& runs) {
  std::vector<std::string> paths = options.compare_files;
  for (const auto& run : runs) paths.insert(paths.end(), run.compare_files.begin(), run.compare_files.end());
  std::set<std::string> seen;
  std::vector<Comparison> out;
  for (const auto& path : paths) {
    std::error_code ec;
    const fs::path canonical = fs::weakly_canonical(path, ec);
    if (!seen.insert(ec ? path : canonical.string()).second) continue;
    out.push_back(load_comparison(path));
  }
  return out;
}

std::size_t count_plots(const std::string& html) {
  std::size_t n = 0;
  for (std::size_t at = html.find("<svg class=\"plot\""); at != std::string::npos;
       at = html.find("<svg class=\"plot\"", at + 1)) {
    ++n;
  }
  return n;
}

void check_output_directory(const std::string& output) {
  const fs::path parent = fs::path(output).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec)) {
    throw ReportError(output + ": cannot write the report: directory " + parent.string() + " does not exist");
  }
}

}  // namespace

std::string render_report(const std::vector<RunData>& runs, const std::vector<Comparison>& comparisons) {
  const std::vector<Section> sections = all_sections(runs, comparisons);
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
      html_escape(page_title(runs)) + "</title>\n<style>" + kStyle + "</style>\n</head>\n<body>\n";
  html += "<header><h1>Training report</h1>\n<p class=\"subtitle\">" + std::to_string(runs.size()) +
          (runs.size() == 1 ? " run" : " runs") +
          (comparisons.empty() ? ""
                               : ", " + std::to_string(comparisons.size()) + " token-level comparison" +
                                     (comparisons.size() == 1 ? "" : "s")) +
          "</p>\n" + table_of_contents(sections) + "</header>\n";
  for (const auto& s : sections) {
    html +=
        "<section id=\"" + html_escape(s.id) + "\">\n<h2>" + html_escape(s.title) + "</h2>\n" + s.html + "</section>\n";
  }
  html += std::string("<footer>Written by gcompile ") + kVersion + " (gcompile report).</footer>\n</body>\n</html>\n";
  return html;
}

int report_command(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  try {
    check_output_directory(options.output);
    const std::vector<RunData> runs = load_runs(options.run_dirs);
    const std::vector<Comparison> comparisons = load_comparisons(options, runs);
    const std::string html = render_report(runs, comparisons);
    try {
      rt::write_file_atomic(options.output, html);
    } catch (const rt::RuntimeError& e) {
      throw ReportError(e.what());
    }
    out << options.output << ": " << runs.size() << (runs.size() == 1 ? " run, " : " runs, ") << count_plots(html)
        << " plots\n";
    return 0;
  } catch (const ReportError& e) {
    err << "gcompile: error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace gc::report
