// Golden tests of the LibTooling specializer: knob folding (typed), pruning of
// `if constexpr` (else-if chains, nested, conditions through other constexpr
// values, dependent conditions left alone), and error reports.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

#include "specialize/edits.hpp"
#include "specialize/specialize.hpp"
#include "test_util.hpp"

namespace gc {
namespace {

const char* const kRoot = "/gcompile-test/templates";

std::string knob_header() {
  std::ifstream in(std::string(GCOMPILE_SOURCE_DIR) + "/templates/gc/knob.hpp");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

KnobTable knobs() {
  KnobTable k;
  k["model.d_model"] = Value::integer(768);
  k["model.norm_eps"] = Value::number(1e-12);
  k["model.qk_norm"] = Value::boolean(true);
  k["model.gated_attention"] = Value::string("elementwise");
  // "?\?=" is the three bytes ??=, escaped so that GCC sees no trigraph to warn about.
  k["experiment.description"] = Value::string("say \"hi\" */ ?\?=");
  k["train.tokens"] = Value::integer(36000000000);
  k["optim.lr"] = Value::number(6e-4);
  return k;
}

struct Outcome {
  std::optional<SpecializeResult> result;
  std::vector<std::string> messages;
};

Outcome run(const std::vector<TemplateFile>& extra, const KnobTable& table = knobs()) {
  std::vector<TemplateFile> files = {{"gc/knob.hpp", knob_header()}};
  files.insert(files.end(), extra.begin(), extra.end());
  Diagnostics diags;
  Outcome o;
  o.result = specialize(files, kRoot, "templates", table, default_toolchain(), diags);
  o.messages = test::messages(diags);
  return o;
}

std::string output_of(const Outcome& o, const std::string& path) {
  if (!o.result) return "<failed: " + ::testing::PrintToString(o.messages) + ">";
  for (const auto& f : o.result->files) {
    if (f.path == path) return f.text;
  }
  return "<missing>";
}

const char* const kConfig = R"cpp(#pragma once
#include "gc/knob.hpp"

namespace gc::fixture {
enum class GateMode { none, headwise, elementwise };
inline constexpr int kDModel = gc::knob<int>("model.d_model", 64);
inline constexpr float kNormEps = gc::knob<float>("model.norm_eps", 1e-5f);
inline constexpr bool kQkNorm = gc::knob<bool>("model.qk_norm", false);
inline constexpr GateMode kGate = gc::knob<GateMode>("model.gated_attention", GateMode::none);
inline constexpr const char* kDescription = gc::knob<const char*>("experiment.description", "");
inline constexpr long long kTokens = gc::knob<long long>("train.tokens", 1);
inline constexpr double kLr = gc::knob<double>("optim.lr", 1e-3);
inline constexpr bool kGated = kGate != GateMode::none;
}  // namespace gc::fixture
)cpp";

TEST(Specialize, FoldsKnobsWithTypedLiteralsAndDropsTheKnobInclude) {
  const Outcome o = run({{"config.hpp", kConfig}});
  EXPECT_EQ(output_of(o, "config.hpp"), R"cpp(#pragma once

namespace gc::fixture {
enum class GateMode { none, headwise, elementwise };
inline constexpr int kDModel = 768;
inline constexpr float kNormEps = 1e-12f;
inline constexpr bool kQkNorm = true;
inline constexpr GateMode kGate = gc::fixture::GateMode::elementwise;
inline constexpr const char* kDescription =
    "say \"hi\" *"
    "/ ?\?=";
inline constexpr long long kTokens = 36000000000;
inline constexpr double kLr = 0.0006;
inline constexpr bool kGated = kGate != GateMode::none;
}  // namespace gc::fixture
)cpp");
  ASSERT_TRUE(o.result);
  EXPECT_EQ(o.result->used_knobs.size(), 7u);
}

TEST(Specialize, PrunesConstantBranchesElseIfChainsAndNestedConditions) {
  const char* const kernel = R"cpp(#include "config.hpp"

namespace gc::fixture {
float apply(float x, float g) {
  float y = x * kNormEps;
  if constexpr (kGate == GateMode::none) {
    y += 1.0f;
  } else if constexpr (kGate == GateMode::headwise) {
    y += 2.0f;
  } else {
    y *= g;
    if constexpr (kQkNorm) {
      y -= 3.0f;
    } else {
      y -= 4.0f;
    }
  }
  if constexpr (!kGated) {
    y = 0.0f;
  }
  if constexpr (kDModel > 100) {
    int scoped = kDModel;
    y += scoped;
  }
  return y;
}

template <typename T>
T generic(T x) {
  if constexpr (sizeof(T) == 4) {
    return x;
  } else {
    return x + 1;
  }
}
}  // namespace gc::fixture
)cpp";
  const Outcome o = run({{"config.hpp", kConfig}, {"kernel.cpp", kernel}});
  EXPECT_EQ(output_of(o, "kernel.cpp"), R"cpp(#include "config.hpp"

namespace gc::fixture {
float apply(float x, float g) {
  float y = x * kNormEps;

  y *= g;

  y -= 3.0f;

  {
    int scoped = kDModel;
    y += scoped;
  }
  return y;
}

template <typename T>
T generic(T x) {
  if constexpr (sizeof(T) == 4) {
    return x;
  } else {
    return x + 1;
  }
}
}  // namespace gc::fixture
)cpp");
}

TEST(Specialize, UnboundKnobKeyIsAnErrorWithTemplateLocation) {
  const Outcome o = run({{"bad.hpp", "#include \"gc/knob.hpp\"\nconstexpr float kEps = gc::knob<float>(\"model.norm_epz\", 1.0f);\n"}});
  EXPECT_FALSE(o.result);
  EXPECT_EQ(o.messages, (std::vector<std::string>{
                            "templates/bad.hpp:2:40: error: knob key 'model.norm_epz' is not bound by the plan; did you "
                            "mean 'model.norm_eps'?"}));
}

TEST(Specialize, KnobTypeMustHoldTheSpecValue) {
  const Outcome o = run({{"bad.hpp", R"cpp(#include "gc/knob.hpp"
enum class GateMode { none, headwise };
constexpr int kEps = gc::knob<int>("model.norm_eps", 1);
constexpr bool kD = gc::knob<bool>("model.d_model", false);
constexpr short kTokens = gc::knob<short>("train.tokens", 1);
constexpr GateMode kGate = gc::knob<GateMode>("model.gated_attention", GateMode::none);
)cpp"}});
  EXPECT_EQ(o.messages,
            (std::vector<std::string>{
                "templates/bad.hpp:3:22: error: knob 'model.norm_eps' has C++ type int, which cannot hold the float 1e-12",
                "templates/bad.hpp:4:21: error: knob 'model.d_model' has C++ type bool, which cannot hold the integer 768",
                "templates/bad.hpp:5:27: error: knob 'train.tokens' has C++ type short, too narrow for 36000000000",
                "templates/bad.hpp:6:28: error: knob 'model.gated_attention': enum GateMode has no enumerator 'elementwise'"}));
}

TEST(Specialize, TemplatesThatDoNotCompileAreReportedWithTheirLocation) {
  const Outcome o = run({{"broken.cpp", "int f() { if constexpr (true) { return undefined_name; } }\n"}});
  EXPECT_FALSE(o.result);
  EXPECT_EQ(o.messages, (std::vector<std::string>{"templates/broken.cpp:1:40: error: template does not compile: use of "
                                                  "undeclared identifier 'undefined_name'"}));
}

// A file with no knob and no `if constexpr` has nothing to specialize: it is
// copied as it is, without a parse (the tree's build compiles it).
TEST(Specialize, FilesWithNothingToSpecializeAreCopiedUnparsed) {
  const std::string text = "int f() { return not_parsed_here; }\n";
  const Outcome o = run({{"plain.cpp", text}});
  ASSERT_TRUE(o.result) << ::testing::PrintToString(o.messages);
  EXPECT_EQ(output_of(o, "plain.cpp"), text);
}

// The specialized config.hpp as a separate process computes it (its own heap and address layout,
// so an order that followed pointers would differ between two of them).
std::string config_from_a_child_process() {
  int fds[2];
  if (pipe(fds) != 0) return "<pipe failed>";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const std::string text = output_of(run({{"config.hpp", kConfig}}), "config.hpp");
    std::size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = write(fds[1], text.data() + written, text.size() - written);
      if (n <= 0) _exit(1);
      written += std::size_t(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, std::size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? text : "<child failed>";
}

TEST(Specialize, OutputIsDeterministic) {
  const std::string a = config_from_a_child_process();
  const std::string b = config_from_a_child_process();
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, output_of(run({{"config.hpp", kConfig}}), "config.hpp"));  // and this process's
  EXPECT_NE(a.find("kNormEps = 1e-12f"), std::string::npos) << a;
}

TEST(Edits, NestedKeepRangesApplyInnerEdits) {
  const std::string src = "A[B(C)D]E";
  std::vector<Edit> edits(2);
  edits[0].begin = 1;  // "[B(C)D]" -> keep "B(C)D"
  edits[0].end = 8;
  edits[0].keep_range = true;
  edits[0].keep_begin = 2;
  edits[0].keep_end = 7;
  edits[1].begin = 3;  // "(C)" -> "x"
  edits[1].end = 6;
  edits[1].text = "x";
  EXPECT_EQ(apply_edits(src, edits), "ABxDE");
}

}  // namespace
}  // namespace gc

namespace gc {
namespace {

TEST(Specialize, CudaTemplatesParseInCudaModeWithTheHeaderShim) {
  if (default_toolchain().cuda_path.empty()) GTEST_SKIP() << "no CUDA toolkit configured";
  const char* const kernel = R"cpp(#include <cuda_runtime.h>
#include "config.hpp"

namespace gc::fixture {
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  if constexpr (kQkNorm) {
    x[i] *= kNormEps;
  } else {
    x[i] = 0.0f;
  }
}
}  // namespace gc::fixture
)cpp";
  const Outcome o = run({{"config.hpp", kConfig}, {"scale.cu", kernel}});
  EXPECT_EQ(output_of(o, "scale.cu"), R"cpp(#include <cuda_runtime.h>
#include "config.hpp"

namespace gc::fixture {
__global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;

  x[i] *= kNormEps;
}
}  // namespace gc::fixture
)cpp");
}

}  // namespace
}  // namespace gc

namespace gc {
namespace {

TEST(Specialize, UnbracedIfConstexprBranchIsAnError) {
  const Outcome o = run({{"config.hpp", kConfig},
                         {"k.cpp",
                          "#include \"config.hpp\"\nint f(int x) {\n  if constexpr (gc::fixture::kQkNorm) x += 1;\n"
                          "  return x;\n}\n"}});
  EXPECT_FALSE(o.result);
  EXPECT_EQ(o.messages, (std::vector<std::string>{"templates/k.cpp:3:39: error: brace this branch of `if constexpr`: "
                                                  "templates brace every branch so the specializer can remove it "
                                                  "cleanly"}));
}

}  // namespace
}  // namespace gc
