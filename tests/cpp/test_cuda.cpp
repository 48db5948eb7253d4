// The CUDA path: packages built for device "cuda" load on PolicyOptions::device_index, run on the
// caller's current stream, refuse inputs on the other device, serve several threads, step a
// Session and run bound, with and without a CUDA graph. They need a GPU, a runtime compiled
// against a torch with CUDA and the packages of $TDAOT_TEST_CUDA_PACKAGES (tutorial.pt2 and
// recurrent.pt2 built with --device cuda --batch 1:64; tests/cuda/run.sh builds them for
// `make test-cuda`); without them those tests skip. The CPU host guards for cuda packages are
// tested in test_host.cpp.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

#ifdef TDAOT_WITH_CUDA
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace tdaot {
namespace {

// The CUDA test package `name`, or "" when this host or build cannot run it.
std::string cuda_package(const std::string& name) {
  const char* dir = std::getenv("TDAOT_TEST_CUDA_PACKAGES");
#ifdef TDAOT_WITH_CUDA
  if (at::hasCUDA() && dir != nullptr && *dir != '\0') return std::string(dir) + "/" + name + ".pt2";
#else
  (void)dir;
  (void)name;
#endif
  return "";
}

#define TDAOT_REQUIRE_CUDA_PACKAGE(path, name)                                                  \
  const std::string path = cuda_package(name);                                                  \
  if (path.empty()) {                                                                            \
    GTEST_SKIP() << "needs a GPU, a CUDA build and $TDAOT_TEST_CUDA_PACKAGES (make test-cuda)"; \
  }

const at::Device kCuda0(at::kCUDA, 0);

// Random inputs of every manifest input at `batch` (bools false), on `device`.
std::vector<at::Tensor> random_inputs(const Manifest& manifest, int64_t batch, at::Device device) {
  std::vector<at::Tensor> inputs;
  for (const TensorSpec& spec : manifest.inputs) {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    const auto options = at::TensorOptions().dtype(tdaot::to_scalar_type(spec.dtype)).device(device);
    inputs.push_back(spec.dtype == at::kBool ? at::zeros(shape, options) : at::randn(shape, options));
  }
  return inputs;
}

void expect_close(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].device(), expected[i].device()) << "output " << i;
    EXPECT_TRUE(at::allclose(actual[i].cpu(), expected[i].cpu(), 1e-5, 1e-6)) << "output " << i;
  }
}

TEST(Cuda, RunsOnTheRequestedDevice) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "tutorial");
  PolicyOptions options;
  options.device_index = 0;
  const Policy policy(path, options);
  for (const at::Tensor& output : policy.run_positional(random_inputs(policy.manifest(), 3, kCuda0))) {
    EXPECT_EQ(output.device(), kCuda0);
  }
}

TEST(Cuda, CpuInputToCudaPackageIsRefused) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "tutorial");
  const Policy policy(path);
  std::vector<at::Tensor> inputs = random_inputs(policy.manifest(), 2, kCuda0);
  inputs[0] = inputs[0].cpu();
  const std::string key = policy.manifest().inputs[0].key;
  const auto error = test::catch_error<DeviceError>([&] { policy.run_positional(inputs); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "input '" + key +
                                                "' is on device cpu, but the package was built "
                                                "for device cuda"));
}

TEST(Cuda, CudaInputToCpuPackageIsRefused) {
  TDAOT_REQUIRE_CUDA_PACKAGE(cuda_path, "tutorial");
  const Policy policy(test::package_path("tutorial.pt2"));  // the CPU build of the same policy
  std::vector<at::Tensor> inputs = random_inputs(policy.manifest(), 2, at::kCPU);
  inputs[0] = inputs[0].to(kCuda0);
  const std::string key = policy.manifest().inputs[0].key;
  const auto error = test::catch_error<DeviceError>([&] { policy.run_positional(inputs); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "input '" + key +
                                                "' is on device cuda:0, but the package was "
                                                "built for device cpu"));
}

#ifdef TDAOT_WITH_CUDA
// The inputs are written on a side stream after a long spin kernel: a run that did not take
// the caller's current stream would read them before they are written (zeros).
TEST(Cuda, RunsOnTheCallersCurrentStream) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "tutorial");
  const Policy policy(path);
  const std::vector<at::Tensor> values = random_inputs(policy.manifest(), 8, kCuda0);
  const std::vector<at::Tensor> expected = policy.run_positional(values);
  std::vector<at::Tensor> inputs;
  for (const at::Tensor& value : values) inputs.push_back(at::zeros_like(value));
  at::cuda::getCurrentCUDAStream().synchronize();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, 0);
  std::vector<at::Tensor> outputs;
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    at::cuda::sleep(200'000'000);  // ~0.1 s of spinning on the side stream
    for (size_t i = 0; i < inputs.size(); ++i) inputs[i].copy_(values[i], /*non_blocking=*/true);
    outputs = policy.run_positional(inputs);
    EXPECT_FALSE(side.query()) << "the side stream finished before the spin kernel could";
  }
  side.synchronize();
  expect_close(outputs, expected);
}

TEST(Cuda, SeveralRunnersServeSeveralThreads) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "tutorial");
  PolicyOptions options;
  options.num_runners = 3;
  const Policy policy(path, options);
  constexpr int kThreads = 6;
  std::vector<std::vector<at::Tensor>> inputs, expected;
  for (int t = 0; t < kThreads; ++t) {
    inputs.push_back(random_inputs(policy.manifest(), 1 + t, kCuda0));
    expected.push_back(policy.run_positional(inputs.back()));
  }
  std::vector<std::vector<at::Tensor>> last(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) last[t] = policy.run_positional(inputs[t]);
      at::cuda::getCurrentCUDAStream().synchronize();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) expect_close(last[t], expected[t]);
}
#endif

// A Session carries the state on the GPU exactly as Policy calls carrying it by hand do.
TEST(Cuda, SessionCarriesStateOnTheGpu) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "recurrent");
  const Policy policy(path);
  const Manifest& manifest = policy.manifest();
  constexpr int64_t kBatch = 4;
  Session session(policy, kBatch);
  at::Tensor hidden = at::zeros({kBatch, 8}, at::TensorOptions().device(kCuda0));
  at::Tensor is_init = at::ones({kBatch, 1}, at::TensorOptions().dtype(at::kBool).device(kCuda0));
  for (int step = 0; step < 3; ++step) {
    const at::Tensor observation = at::randn({kBatch, 3}, at::TensorOptions().device(kCuda0));
    const TensorMap stepped = session.step({{"observation", observation}});
    std::vector<at::Tensor> positional(manifest.inputs.size());
    positional[*manifest.input_index("observation")] = observation;
    positional[*manifest.input_index("hidden")] = hidden;
    positional[*manifest.input_index("is_init")] = is_init;
    const std::vector<at::Tensor> expected = policy.run_positional(positional);
    for (size_t i = 0; i < manifest.outputs.size(); ++i) {
      const at::Tensor& actual = stepped.at(manifest.outputs[i].key);
      EXPECT_EQ(actual.device(), kCuda0);
      EXPECT_TRUE(at::allclose(actual.cpu(), expected[i].cpu(), 1e-5, 1e-6))
          << manifest.outputs[i].key << " at step " << step;
    }
    hidden = expected[*manifest.output_index("next.hidden")];
    is_init = at::zeros_like(is_init);
  }
}

// The bound run, with and without a CUDA graph, at both ends of the batch range: the outputs
// match run_positional on the same inputs, also after the inputs change in place.
class CudaBinding : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(CudaBinding, MatchesRunAndFollowsTheInputs) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "tutorial");
  const auto [graph, batch] = GetParam();
  const Policy policy(path);
  BindOptions options;
  options.cuda_graph = graph;
  Binding binding = policy.bind(batch, options);
  EXPECT_EQ(binding.cuda_graph(), graph);
  EXPECT_FALSE(binding.allocation_free());
  for (int round = 0; round < 3; ++round) {
    const std::vector<at::Tensor> values = random_inputs(policy.manifest(), batch, kCuda0);
    for (size_t i = 0; i < values.size(); ++i) binding.inputs()[i].copy_(values[i]);
    binding.run();
    for (const at::Tensor& output : binding.outputs()) EXPECT_EQ(output.device(), kCuda0);
    expect_close(binding.outputs(), policy.run_positional(values));
  }
}

INSTANTIATE_TEST_SUITE_P(GraphAndBatch, CudaBinding,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(1, 64)));

// A bound recurrent session replaying its graph carries the state like a Session.
TEST(Cuda, GraphBindingCarriesRecurrentState) {
  TDAOT_REQUIRE_CUDA_PACKAGE(path, "recurrent");
  const Policy policy(path);
  BindOptions options;
  options.cuda_graph = true;
  Binding binding = policy.bind(2, options);
  Session session(policy, 2);
  for (int step = 0; step < 4; ++step) {
    const at::Tensor observation = at::randn({2, 3}, at::TensorOptions().device(kCuda0));
    binding.input("observation").copy_(observation);
    binding.run();
    const TensorMap expected = session.step({{"observation", observation}});
    EXPECT_TRUE(at::allclose(binding.output("action").cpu(), expected.at("action").cpu(), 1e-5, 1e-6))
        << "step " << step;
  }
}

// Needs no GPU: a CPU package refuses the option, naming the package and its device.
TEST(CudaGraphBinding, RefusedForACpuPackage) {
  const std::string path = test::package_path("tutorial.pt2");
  const Policy policy(path);
  BindOptions options;
  options.cuda_graph = true;
  const auto error = test::catch_error<Error>([&] { policy.bind(1, options); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(test::Contains(error->what(), "BindOptions::cuda_graph is for CUDA packages, but "
                                            "package '" +
                                                path + "' was built for device 'cpu'"));
}

}  // namespace
}  // namespace tdaot
