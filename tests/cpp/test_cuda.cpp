// The CUDA path: a package built for device "cuda" loads on PolicyOptions::device_index and runs
// on the caller's current stream. It needs a GPU and such a package (TDAOT_TEST_CUDA_PACKAGE,
// built with tdaot.build(..., device="cuda")); without them every test here skips. The CPU
// host guards for cuda packages are tested in test_host.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tdaot/errors.h"
#include "tdaot/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

// The CUDA test package, or nullptr after GTEST_SKIP (the caller must return).
const char* cuda_package() {
  const char* path = std::getenv("TDAOT_TEST_CUDA_PACKAGE");
  return at::hasCUDA() && path != nullptr && *path != '\0' ? path : nullptr;
}

#define TDAOT_REQUIRE_CUDA_PACKAGE(path)                                                  \
  const char* path = cuda_package();                                                      \
  if (path == nullptr) {                                                                  \
    GTEST_SKIP() << "needs a GPU and TDAOT_TEST_CUDA_PACKAGE (a package built for cuda)"; \
  }

TEST(Cuda, RunsOnTheRequestedDevice) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path);
  PolicyOptions options;
  options.device_index = 0;
  const Policy policy(path, options);
  std::vector<at::Tensor> inputs;
  for (const auto& spec : policy.manifest().inputs) {
    std::vector<int64_t> shape{1};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    inputs.push_back(at::zeros(shape, at::TensorOptions().dtype(spec.dtype).device(at::kCUDA, 0)));
  }
  for (const at::Tensor& output : policy.run_positional(inputs)) {
    EXPECT_EQ(output.device(), at::Device(at::kCUDA, 0));
  }
  inputs[0] = inputs[0].cpu();
  const auto error = test::catch_error<DeviceError>([&] { policy.run_positional(inputs); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(),
                             "is on device cpu, but the package was built for "
                             "device cuda"));
}

}  // namespace
}  // namespace tdaot
