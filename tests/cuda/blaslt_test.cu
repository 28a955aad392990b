// The cuBLASLt algorithm choice of runtime/cuda/blaslt.hpp: timed once per shape on the first
// call, remembered in the choices file (GC_BLASLT_CACHE), reused by a later BlasLt (a later run)
// without timing again, and a kept algorithm the library does not offer is ignored. Results are
// checked against a double-precision product every time.
#include "runtime/cuda/blaslt.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

// Sets an environment variable for the test's lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

struct Problem {
  int M = 33, N = 40, K = 24;
  std::vector<float> a = ct::convert<float>(kt::random_normal(std::size_t(33) * 24, 1));
  std::vector<float> b = ct::convert<float>(kt::random_normal(std::size_t(24) * 40, 2));
  // C = A·B (row-major), in double.
  std::vector<double> expected() const {
    std::vector<double> c(std::size_t(M) * N, 0.0);
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < N; ++j) {
        for (int k = 0; k < K; ++k) c[std::size_t(i) * N + j] += double(a[std::size_t(i) * K + k]) * b[std::size_t(k) * N + j];
      }
    }
    return c;
  }
  std::vector<float> run(gc::rt::cuda::BlasLt& blas,
                         gc::rt::cuda::BlasLt::Shape shape = gc::rt::cuda::BlasLt::Shape::fixed) const {
    auto a_d = ct::upload(a), b_d = ct::upload(b);
    ct::DeviceBuffer<float> c_d(std::size_t(M) * N);
    blas.gemm(false, false, M, N, K, 1.0f, a_d.data(), K, b_d.data(), N, 0.0f, c_d.data(), N, shape);
    return ct::download(c_d);
  }
};

std::string temp_file(const char* name) {
  const std::string path = testing::TempDir() + "gcompile_" + name + "_" + std::to_string(::getpid()) + ".tsv";
  std::remove(path.c_str());
  return path;
}

TEST(CudaBlasLt, TheTimedChoiceIsRememberedAndReusedByALaterRun) {
  GC_REQUIRE_GPU();
  const std::string path = temp_file("blaslt_choices");
  ScopedEnv cache("GC_BLASLT_CACHE", path.c_str()), tune("GC_BLASLT_TUNE", nullptr);
  const Problem p;
  std::vector<float> first;
  {
    gc::rt::cuda::BlasLt blas;
    EXPECT_EQ(blas.choices_path(), path);
    first = p.run(blas);
  }
  EXPECT_LT(kt::rel_error(first, p.expected()), 1e-6);
  ASSERT_EQ(lines_of(path).size(), 1u) << "one shape, one remembered choice";
  gc::rt::cuda::BlasLt later;
  const std::vector<float> again = p.run(later);
  EXPECT_TRUE(ct::bitwise_equal(first, again));
  EXPECT_EQ(lines_of(path).size(), 1u) << "the later run reuses the choice instead of timing again";
  std::remove(path.c_str());
}

TEST(CudaBlasLt, AKeptAlgorithmTheLibraryDoesNotOfferIsIgnored) {
  GC_REQUIRE_GPU();
  const std::string path = temp_file("blaslt_foreign");
  ScopedEnv cache("GC_BLASLT_CACHE", path.c_str()), tune("GC_BLASLT_TUNE", nullptr);
  const Problem p;
  {
    gc::rt::cuda::BlasLt blas;
    p.run(blas);
  }
  std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 1u);
  const std::size_t tab = lines[0].find('\t');
  ASSERT_NE(tab, std::string::npos);
  {
    std::ofstream out(path, std::ios::trunc);
    out << lines[0].substr(0, tab) << '\t' << std::string(128, 'e') << '\n';  // a foreign algorithm
  }
  gc::rt::cuda::BlasLt blas;
  EXPECT_LT(kt::rel_error(p.run(blas), p.expected()), 1e-6);
  EXPECT_EQ(lines_of(path).size(), 2u) << "timed again and appended";
  std::remove(path.c_str());
}

TEST(CudaBlasLt, WithoutTuningNothingIsKept) {
  GC_REQUIRE_GPU();
  const std::string path = temp_file("blaslt_untuned");
  ScopedEnv cache("GC_BLASLT_CACHE", path.c_str()), tune("GC_BLASLT_TUNE", "0");
  const Problem p;
  gc::rt::cuda::BlasLt blas;
  EXPECT_LT(kt::rel_error(p.run(blas), p.expected()), 1e-6);
  EXPECT_TRUE(lines_of(path).empty());
}

// A GEMM whose rows vary from call to call (the MoE experts') is not timed inside the loop: it
// takes the heuristic's first algorithm, and nothing is remembered for it.
TEST(CudaBlasLt, VaryingRowShapesAreNotTimed) {
  GC_REQUIRE_GPU();
  const std::string path = temp_file("blaslt_varying");
  ScopedEnv cache("GC_BLASLT_CACHE", path.c_str()), tune("GC_BLASLT_TUNE", nullptr);
  const Problem p;
  gc::rt::cuda::BlasLt blas;
  EXPECT_LT(kt::rel_error(p.run(blas, gc::rt::cuda::BlasLt::Shape::varying_rows), p.expected()), 1e-6);
  EXPECT_TRUE(lines_of(path).empty());
  p.run(blas);  // the same shape as a fixed one later: the plan was made; it stays the heuristic's
  EXPECT_TRUE(lines_of(path).empty());
  std::remove(path.c_str());
}

}  // namespace
