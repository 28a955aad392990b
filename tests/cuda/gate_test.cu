// CUDA attention gate (cuda/gate.cuh, headwise and elementwise) against the CPU kernels of
// templates/cpu/gate.hpp run in double on the same inputs rounded to T, including the in-place
// call the model makes (gate backward with dattn = dout).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cpu/gate.hpp"
#include "cuda/cuda_test_util.hpp"
#include "cuda/gate.cuh"

namespace ct = gc::test::gpu;
namespace kt = gc::test::kernels;

namespace {

using ct::bf16;
using ct::DeviceBuffer;

using ct::download_double;
using ct::expect_close;
using ct::rounded;
using ct::type_name;
using ct::upload_as;

template <gc::tree::GatedAttention kMode>
std::string mode_name() {
  return kMode == gc::tree::GatedAttention::headwise ? "headwise" : "elementwise";
}

// Gate shapes as a spec fixes them. head_dim = 72: lanes 0..7 of the headwise warp take three
// elements, the others two; head_dim = 16: half the lanes idle.
template <int H, int HD>
struct GateDims {
  static constexpr int kHeads = H, kHeadDim = HD;
};

// in_place: out is the buffer of attn (forward), dattn the buffer of dout (backward).
template <gc::tree::GatedAttention kMode, typename T, class S>
void check_gate(bool in_place) {
  const int N = 37, heads = S::kHeads, head_dim = S::kHeadDim;
  const std::size_t n = std::size_t(N) * heads * head_dim;
  const std::size_t nz = kMode == gc::tree::GatedAttention::headwise ? std::size_t(N) * heads : n;
  const auto attn = rounded<T>(kt::random_vector(n, 31));
  const auto z = rounded<T>(kt::random_vector(nz, 32, 0.1, 4.0));
  const auto dout = rounded<T>(kt::random_vector(n, 33));
  std::vector<double> out_ref(n), dattn_ref(n), dz_ref(nz);
  gc::tree::cpu::gate_forward<kMode, double>(out_ref.data(), attn.data(), z.data(), N, heads, head_dim);
  gc::tree::cpu::gate_backward<kMode, double>(dattn_ref.data(), dz_ref.data(), dout.data(), attn.data(), z.data(), N,
                                              heads, head_dim);

  auto z_d = upload_as<T>(z);
  auto dout_d = upload_as<T>(dout);
  const std::string what = "gate " + mode_name<kMode>() + " " + type_name<T>() + " heads " + std::to_string(heads) +
                           " head_dim " + std::to_string(head_dim) + (in_place ? " in place" : "");

  // Backward first: the in-place forward overwrites attn.
  {
    auto attn_d = upload_as<T>(attn);
    DeviceBuffer<T> dattn_own(n), dz(nz);
    DeviceBuffer<T>& dattn = in_place ? dout_d : dattn_own;
    gc::tree::cuda::gate_backward<kMode, S>(dattn.data(), dz.data(), dout_d.data(), attn_d.data(), z_d.data(), N);
    expect_close(download_double(dattn), dattn_ref, ct::tolerance<T>(), what + " backward dattn");
    expect_close(download_double(dz), dz_ref, ct::tolerance<T>(), what + " backward dz");
  }
  {
    auto attn_d = upload_as<T>(attn);
    DeviceBuffer<T> out_own(n);
    DeviceBuffer<T>& out = in_place ? attn_d : out_own;
    gc::tree::cuda::gate_forward<kMode, S>(out.data(), attn_d.data(), z_d.data(), N);
    expect_close(download_double(out), out_ref, ct::tolerance<T>(), what + " forward");
  }
}

TEST(CudaGateCe, GateHeadwiseMatchesCpu) {
  GC_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    check_gate<gc::tree::GatedAttention::headwise, float, GateDims<3, 72>>(in_place);
    check_gate<gc::tree::GatedAttention::headwise, bf16, GateDims<3, 72>>(in_place);
    check_gate<gc::tree::GatedAttention::headwise, float, GateDims<5, 16>>(in_place);
    check_gate<gc::tree::GatedAttention::headwise, bf16, GateDims<5, 16>>(in_place);
    check_gate<gc::tree::GatedAttention::headwise, bf16, GateDims<2, 10>>(in_place);  // packs of 2
  }
}

TEST(CudaGateCe, GateElementwiseMatchesCpu) {
  GC_REQUIRE_GPU();
  for (bool in_place : {false, true}) {
    check_gate<gc::tree::GatedAttention::elementwise, float, GateDims<3, 72>>(in_place);
    check_gate<gc::tree::GatedAttention::elementwise, bf16, GateDims<3, 72>>(in_place);
    check_gate<gc::tree::GatedAttention::elementwise, float, GateDims<5, 16>>(in_place);
    check_gate<gc::tree::GatedAttention::elementwise, bf16, GateDims<5, 16>>(in_place);
    check_gate<gc::tree::GatedAttention::elementwise, bf16, GateDims<2, 10>>(in_place);  // packs of 2
  }
}

}  // namespace
