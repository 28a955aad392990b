// The report in a real browser: headless Chromium loads the page without
// console errors, draws every plot (non-empty paths, bars or images), and no
// two labels of a plot overlap or leave the plot's canvas. Also takes a
// screenshot. Needs Debian's `chromium` (scripts/setup installs it): missing
// in CI (CI=true) is a failure, elsewhere the test is skipped.
//
// GCOMPILE_REPORT_KEEP=DIR keeps the sample report.html and screenshot.png in DIR.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "report/png.hpp"
#include "report_test_util.hpp"
#include "tree_test_util.hpp"

namespace gc::report {
namespace {

namespace fs = std::filesystem;
using gc::test::in_ci;
using gc::test::sh;

// Measures every plot after layout and writes the result as JSON into the DOM.
const char* const kProbeScript = R"js(
<script>
(function () {
  const result = {plots: []};
  const overlap = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const svg of document.querySelectorAll('svg.plot')) {
    const box = svg.getBoundingClientRect();
    const drawn = [...svg.querySelectorAll('g.data path, g.data rect, g.data image, g.data circle')].filter((e) => {
      const b = e.getBBox();
      return b.width > 0 || b.height > 0;
    }).length;
    const texts = [...svg.querySelectorAll('text')].filter((t) => t.textContent.length > 0)
        .map((t) => ({text: t.textContent, rect: t.getBoundingClientRect()}));
    const problems = [];
    for (let i = 0; i < texts.length; ++i) {
      const r = texts[i].rect;
      if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1) {
        problems.push('outside: ' + texts[i].text);
      }
      for (let j = i + 1; j < texts.length; ++j) {
        if (overlap(r, texts[j].rect)) problems.push('overlap: ' + texts[i].text + ' / ' + texts[j].text);
      }
    }
    result.plots.push({name: svg.getAttribute('data-plot'), width: box.width, height: box.height, drawn, problems});
  }
  const pre = document.createElement('pre');
  pre.id = 'probe-result';
  pre.textContent = btoa(unescape(encodeURIComponent(JSON.stringify(result))));
  document.body.appendChild(pre);
})();
</script>
)js";

std::string find_chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    const auto r = sh(std::string("command -v ") + name);
    if (r.status == 0 && !r.output.empty()) return r.output.substr(0, r.output.find('\n'));
  }
  return "";
}

std::string chromium_command(const std::string& chromium, const std::string& profile, const std::string& flags) {
  return "timeout 120 " + chromium + " --headless --disable-gpu --no-sandbox --disable-dev-shm-usage " +
         "--no-first-run --user-data-dir=" + profile + " --enable-logging=stderr --v=0 " + flags;
}

// Console messages Chromium logged (lines with ":CONSOLE").
std::vector<std::string> console_lines(const std::string& log) {
  std::vector<std::string> out;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);) {
    if (line.find(":CONSOLE") != std::string::npos) out.push_back(line);
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  std::string out;
  int bits = 0, value = 0;
  for (char c : text) {
    const auto pos = std::string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/").find(c);
    if (pos == std::string::npos) continue;
    value = (value << 6) | int(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((value >> bits) & 0xFF);
    }
  }
  return out;
}

nlohmann::json probe_result(const std::string& dom) {
  const std::string open = "<pre id=\"probe-result\">";
  const auto start = dom.find(open);
  if (start == std::string::npos) return nullptr;
  const auto end = dom.find("</pre>", start);
  return nlohmann::json::parse(base64_decode(dom.substr(start + open.size(), end - start - open.size())));
}

class ReportBrowser : public ::testing::Test {
 protected:
  void SetUp() override {
    chromium_ = find_chromium();
    if (chromium_.empty()) {
      if (in_ci()) FAIL() << "chromium is not installed (scripts/setup installs it); CI needs it";
      GTEST_SKIP() << "chromium is not installed; run scripts/setup (the test fails in CI)";
    }
    runs_ = test::write_sample_runs(tmp_.str());
    test::SampleRun deep;  // many layers: thinned legends, crowded bar labels and heatmap rows
    deep.name = "deep_24";
    deep.layers = 24;
    test::write_sample_run(tmp_ / "run_deep", deep);
    report_ = tmp_ / "report.html";
    single_ = tmp_ / "report_single.html";
    const auto r = sh("cd " + tmp_.str() + " && " GCOMPILE_BINARY " report run_g1 run_g05 -o report.html && " +
                      GCOMPILE_BINARY " report run_deep -o report_single.html");
    ASSERT_EQ(r.status, 0) << r.output;
  }

  // Loads `report` with the probe script; returns the probe's JSON.
  nlohmann::json probe(const std::string& report) {
    std::string html = rt::test::read_bytes(report);
    const auto body_end = html.rfind("</body>");
    if (body_end == std::string::npos) return nullptr;
    html.insert(body_end, kProbeScript);
    const std::string page = report + ".probe.html";
    test::write_text(page, html);
    const auto r =
        sh(chromium_command(chromium_, tmp_ / "profile", "--window-size=1400,1000 --dump-dom file://" + page) + " 2>" +
           tmp_ / "console.log");
    EXPECT_EQ(r.status, 0) << r.output;
    for (const auto& line : console_lines(rt::test::read_bytes(tmp_ / "console.log"))) {
      EXPECT_EQ(line.find("Uncaught"), std::string::npos) << line;
      EXPECT_EQ(line.find("rror"), std::string::npos) << line;
    }
    return probe_result(r.output);
  }

  void screenshot(const std::string& report, const std::string& shot) {
    const auto r =
        sh(chromium_command(chromium_, tmp_ / "profile",
                            "--hide-scrollbars --window-size=1400,9000 --screenshot=" + shot + " file://" + report));
    ASSERT_EQ(r.status, 0) << r.output;
    int width = 0, height = 0;
    ASSERT_TRUE(png_dimensions(rt::test::read_bytes(shot), width, height));
    EXPECT_EQ(width, 1400);
    EXPECT_EQ(height, 9000);
  }

  void keep(const std::string& file) const {
    const char* dir = std::getenv("GCOMPILE_REPORT_KEEP");
    if (dir && *dir)
      fs::copy_file(file, fs::path(dir) / fs::path(file).filename(), fs::copy_options::overwrite_existing);
  }

  std::string chromium_;
  rt::test::TempDir tmp_;
  std::vector<std::string> runs_;
  std::string report_, single_;
};

TEST_F(ReportBrowser, LoadsWithoutConsoleMessages) {
  const auto r =
      sh(chromium_command(chromium_, tmp_ / "profile", "--dump-dom file://" + report_) + " 2>" + tmp_ / "console.log");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("data-plot=\"loss\""), std::string::npos);
  EXPECT_EQ(console_lines(rt::test::read_bytes(tmp_ / "console.log")), std::vector<std::string>{});
}

TEST_F(ReportBrowser, DrawsEveryPlotWithReadableLabels) {
  for (const auto& [report, min_plots] : {std::pair{report_, 35u}, std::pair{single_, 30u}}) {
    const nlohmann::json result = probe(report);
    ASSERT_TRUE(result.is_object()) << "the probe script did not run on " << report;
    EXPECT_GE(result["plots"].size(), min_plots) << report;
    for (const auto& plot : result["plots"]) {
      const std::string name = plot["name"];
      EXPECT_GT(plot["width"].get<double>(), 150) << name;
      EXPECT_GT(plot["height"].get<double>(), 100) << name;
      EXPECT_GT(plot["drawn"].get<int>(), 0) << name << " draws nothing";
      EXPECT_EQ(plot["problems"], nlohmann::json::array()) << name << " in " << report;
    }
  }
}

TEST_F(ReportBrowser, TakesAScreenshot) {
  screenshot(report_, tmp_ / "screenshot.png");
  screenshot(single_, tmp_ / "screenshot_single.png");
  keep(report_);
  keep(single_);
  keep(tmp_ / "screenshot.png");
  keep(tmp_ / "screenshot_single.png");
}

}  // namespace
}  // namespace gc::report
