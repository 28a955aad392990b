// runtime/cuda/pinned_upload.hpp: uploads through the rotating page-locked slots arrive intact
// even when the host reuses its own buffer at once and more uploads are queued than there are
// slots, and an upload larger than a slot is refused with the sizes.
#include "runtime/cuda/pinned_upload.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "runtime/error.hpp"

namespace ct = gc::test::gpu;

namespace {

TEST(CudaPinnedUpload, QueuedUploadsArriveIntactThroughRotatingSlots) {
  GC_REQUIRE_GPU();
  constexpr int kUploads = 25;  // more than the 10 slots: each slot is reused
  constexpr std::size_t kN = 37;
  gc::rt::cuda::PinnedUploader<std::int32_t> uploader;
  uploader.reserve(kN);
  std::vector<ct::DeviceBuffer<std::int32_t>> device(kUploads);
  std::vector<std::int32_t> host(kN);  // one host buffer, overwritten after every upload
  for (int u = 0; u < kUploads; ++u) {
    device[std::size_t(u)].resize(kN);
    for (std::size_t i = 0; i < kN; ++i) host[i] = std::int32_t(1000 * u + int(i));
    uploader.upload(device[std::size_t(u)].data(), host.data(), kN - std::size_t(u % 3));  // sizes vary
  }
  for (int u = 0; u < kUploads; ++u) {
    const std::vector<std::int32_t> got = ct::download(device[std::size_t(u)]);
    for (std::size_t i = 0; i < kN - std::size_t(u % 3); ++i) {
      ASSERT_EQ(got[i], std::int32_t(1000 * u + int(i))) << "upload " << u << ", element " << i;
    }
  }
}

TEST(CudaPinnedUpload, AnUploadLargerThanASlotIsRefusedWithTheSizes) {
  GC_REQUIRE_GPU();
  gc::rt::cuda::PinnedUploader<std::int32_t> uploader;
  uploader.reserve(8);
  ct::DeviceBuffer<std::int32_t> device(16);
  const std::vector<std::int32_t> host(16, 7);
  try {
    uploader.upload(device.data(), host.data(), 16);
    FAIL() << "an oversized upload was accepted";
  } catch (const gc::rt::RuntimeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("16 elements"), std::string::npos) << what;
    EXPECT_NE(what.find("8-element"), std::string::npos) << what;
  }
}

}  // namespace
