// The whole model (model/model_impl.hpp) on the CUDA backend against the CPU backend, with the
// default templates/config.hpp and plan.hpp: logits, loss and every parameter gradient after one
// forward and backward (engine/parity.cuh, the comparison ./parity makes).
//
// fp32 is held to 1e-5 (measured: about 1e-6), on the logits' norm and on their worst row. bf16 stores every activation and activation gradient in
// bf16 (~2e-3 relative rounding each), and over the default model's two layers these roundings
// add up to ~1e-2 relative against the fp32 CPU model: logits ~9e-3, gradients up to ~1.7e-2
// (the attention backward's dP − D cancellation amplifies them). That is the arithmetic, not a
// kernel error (a CPU model that rounds to bf16 where the CUDA backend stores bf16 agrees with
// the CUDA one to rounding flips, and bitwise at B=2, T=32, in emulation), so
// the whole-model bf16 comparison allows 3e-2; the kernels meet 1e-2 one at a time.
#include "engine/parity.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "config.hpp"
#include "cuda_test_util.hpp"
#include "plan.hpp"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

template <typename T>
void check_model_parity(int batch, int seq_len, double tol) {
  const gc::tree::cuda::ParityReport r = gc::tree::cuda::model_parity<T>(batch, seq_len);
  const std::string tag = std::string(r.precision) + " B=" + std::to_string(batch) + " T=" + std::to_string(seq_len);
  kt::report("cuda model " + tag + " logits", r.rel_logits);
  kt::report("cuda model " + tag + " worst logits row", r.worst_row_logits);
  kt::report("cuda model " + tag + " loss", r.rel_loss());
  kt::report("cuda model " + tag + " worst grad", r.max_rel_grad());
  kt::report("cuda model " + tag + " worst metric (" + r.metrics.where + ")", r.metrics.worst);
  kt::report("cuda model " + tag + " worst heatmap level", r.metrics.worst_level);
  EXPECT_GT(r.metrics.numbers, 30) << tag << ": every metric compared";
  EXPECT_LE(r.metrics.worst, tol) << tag << ": metric " << r.metrics.where;
  EXPECT_LE(r.metrics.worst_level, 1.0) << tag << ": heatmap palette levels";
  EXPECT_LT(r.rel_logits, tol) << tag << ": logits";
  EXPECT_LT(r.worst_row_logits, tol) << tag << ": the worst row of logits";
  EXPECT_LT(r.rel_loss(), tol) << tag << ": loss " << r.loss_cuda << " vs " << r.loss_cpu;
  ASSERT_EQ(int(r.rel_grads.size()), gc::tree::kNumParams);
  for (int i = 0; i < gc::tree::kNumParams; ++i) {
    EXPECT_LT(r.rel_grads[std::size_t(i)], tol) << tag << ": gradient of " << gc::tree::kParams[i].name;
  }
}

// The batch ./parity uses, and one whose length is no multiple of the attention tiles.
const int kParitySeqLen = gc::tree::kSeqLen < 96 ? gc::tree::kSeqLen : 96;
const int kOddSeqLen = gc::tree::kMaxSeqLen < 37 ? gc::tree::kMaxSeqLen : 37;

// bf16 whole model against the fp32 CPU (see the top comment).
constexpr double kBf16ModelTolerance = gc::tree::cuda::parity_tolerance<gc::tree::cuda::bf16>();

TEST(CudaModel, Fp32MatchesCpu) {
  GC_REQUIRE_GPU();
  check_model_parity<float>(2, kParitySeqLen, gc::tree::cuda::parity_tolerance<float>());
  check_model_parity<float>(3, kOddSeqLen, gc::tree::cuda::parity_tolerance<float>());
}

TEST(CudaModel, Bf16MatchesCpuWithinBf16Rounding) {
  GC_REQUIRE_GPU();
  check_model_parity<ct::bf16>(2, kParitySeqLen, kBf16ModelTolerance);
  check_model_parity<ct::bf16>(3, kOddSeqLen, kBf16ModelTolerance);
}

}  // namespace
