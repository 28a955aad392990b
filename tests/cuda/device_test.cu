// Which GPUs the CUDA backend accepts: compute capability 8.0 or newer, with
// kernels built for it; a clear reason otherwise. Under the CUDA emulator the
// device's compute capability and the kernel images are set through the
// environment (GC_CUDA_EMULATOR_CC, GC_CUDA_EMULATOR_NO_KERNEL_IMAGE); on a
// real GPU the device in the machine must be accepted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/backend.cuh"
#include "cuda_test_util.hpp"

namespace ct = gc::test::gpu;

namespace {

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

std::string reason_for(const char* cc, bool kernel_image) {
  ScopedEnv capability("GC_CUDA_EMULATOR_CC", cc);
  ScopedEnv image("GC_CUDA_EMULATOR_NO_KERNEL_IMAGE", kernel_image ? "0" : "1");
  return gc::tree::cuda::unusable_device_reason();
}

TEST(CudaDevice, AcceptsComputeCapability80AndNewerWithTheirKernels) {
  if constexpr (ct::kEmulated) {
    for (const char* cc : {"8.0", "8.6", "8.9", "9.0", "10.0", "12.0"}) {
      EXPECT_EQ(reason_for(cc, true), "") << cc;
    }
  } else {
    GC_REQUIRE_GPU();
    EXPECT_EQ(gc::tree::cuda::unusable_device_reason(), "") << "the GPU kit runs on sm_80 or newer";
  }
}

// The refusal's words, from the device's name, compute capability and the kernel-image probe's
// error: the same function on a GPU, under the emulator and on a machine without either.
TEST(CudaDevice, RefusesOlderGpusAndMissingKernelsNamingTheFix) {
  const std::string turing = gc::tree::cuda::device_refusal("Tesla T4", 7, 5, nullptr);
  EXPECT_NE(turing.find("Tesla T4 (compute capability 7.5): the CUDA backend needs compute capability 8.0 or newer"),
            std::string::npos) << turing;
  const std::string ada = gc::tree::cuda::device_refusal("L4", 8, 9, "no kernel image is available");
  EXPECT_NE(ada.find("this build has no kernels for it (no kernel image is available)"), std::string::npos) << ada;
  EXPECT_NE(ada.find("-DGC_CUDA_ARCHITECTURES=89 "), std::string::npos) << ada;
  const std::string hopper = gc::tree::cuda::device_refusal("H100", 9, 0, "no kernel image is available");
  EXPECT_NE(hopper.find("-DGC_CUDA_ARCHITECTURES=90a "), std::string::npos) << hopper;
  EXPECT_EQ(gc::tree::cuda::device_refusal("H100", 9, 0, nullptr), "");
  EXPECT_EQ(gc::tree::cuda::device_refusal("A100", 8, 0, nullptr), "");
}

// The probe itself: under the emulator the environment sets the device's compute capability and
// whether this build has kernels for it; on a GPU the device in the machine is accepted, twice
// (the probe leaves no sticky error behind).
TEST(CudaDevice, TheProbeNamesTheDeviceAndLeavesNoErrorBehind) {
  if constexpr (ct::kEmulated) {
    EXPECT_NE(reason_for("7.5", true).find("compute capability 7.5): the CUDA backend needs"), std::string::npos);
    EXPECT_NE(reason_for("9.0", false).find("-DGC_CUDA_ARCHITECTURES=90a "), std::string::npos);
    EXPECT_EQ(reason_for("9.0", true), "");  // the failed probe before does not stick
  } else {
    GC_REQUIRE_GPU();
    EXPECT_EQ(gc::tree::cuda::unusable_device_reason(), "");
    EXPECT_EQ(gc::tree::cuda::unusable_device_reason(), "");
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
}

}  // namespace
