// tdaot::Policy on the fixture packages: loading, running, input validation, threads.
// Only the manifests and behaviour of the fixtures are assumed, never their weights.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"
#include "runtime/validation.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

using test::keyed;
using test::random_inputs;

// Runs the keyed path and returns the outputs in manifest order.
std::vector<at::Tensor> run_keyed_in_order(const Policy& policy,
                                           const std::vector<at::Tensor>& inputs) {
  const TensorMap out = policy.run(keyed(policy.manifest().inputs, inputs));
  std::vector<at::Tensor> ordered;
  for (const auto& spec : policy.manifest().outputs) ordered.push_back(out.at(spec.key));
  return ordered;
}

class PolicyTest : public ::testing::Test {
 protected:
  // One load per process: ctest runs every test in its own process anyway.
  static void SetUpTestSuite() {
    tutorial_ = std::make_unique<Policy>(test::package_path("tutorial.pt2"));
    nested_ = std::make_unique<Policy>(test::package_path("nested.pt2"));
  }
  static void TearDownTestSuite() {
    tutorial_.reset();
    nested_.reset();
  }

  static const Policy& tutorial() { return *tutorial_; }
  static const Policy& nested() { return *nested_; }

  // Runs `inputs` through one path, expects E for `key` with every part in its message, then
  // checks that a valid call still works.
  template <typename E>
  static void expect_rejected(const Policy& policy, const std::function<void()>& call,
                              const std::string& key, const std::vector<std::string>& parts) {
    const auto error = catch_error<E>(call);
    ASSERT_TRUE(error);
    EXPECT_EQ(error->key(), key);
    if (!key.empty()) {
      EXPECT_TRUE(Contains(error->what(), "'" + key + "'"));
    }
    for (const auto& part : parts) EXPECT_TRUE(Contains(error->what(), part));
    EXPECT_NO_THROW(policy.run_positional(random_inputs(policy.manifest(), 2)));
  }

  // The same, through both run_positional and run (keyed by manifest order).
  template <typename E>
  static void expect_rejected_both(const Policy& policy, const std::vector<at::Tensor>& inputs,
                                   const std::string& key, const std::vector<std::string>& parts) {
    {
      SCOPED_TRACE("run_positional");
      expect_rejected<E>(
          policy, [&] { policy.run_positional(inputs); }, key, parts);
    }
    {
      SCOPED_TRACE("run (keyed)");
      const TensorMap map = keyed(policy.manifest().inputs, inputs);
      expect_rejected<E>(
          policy, [&] { policy.run(map); }, key, parts);
    }
  }

  // Valid nested inputs at batch 4 with input `index` replaced.
  static std::vector<at::Tensor> nested_with(size_t index, at::Tensor replacement) {
    auto inputs = random_inputs(nested().manifest(), 4);
    inputs[index] = std::move(replacement);
    return inputs;
  }

 private:
  static inline std::unique_ptr<Policy> tutorial_;
  static inline std::unique_ptr<Policy> nested_;
};

TEST_F(PolicyTest, LoadsManifestAndMetadata) {
  const Manifest& m = tutorial().manifest();
  EXPECT_EQ(tutorial().path(), test::package_path("tutorial.pt2"));
  ASSERT_EQ(m.inputs.size(), 1u);
  EXPECT_EQ(m.inputs[0].key, "observation");
  EXPECT_EQ(m.inputs[0].dtype, at::kFloat);
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{3}));
  ASSERT_EQ(m.outputs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m.outputs[i].key, (std::vector<std::string>{"loc", "scale", "sample"}[i]));
    EXPECT_EQ(m.outputs[i].dtype, at::kFloat);
    EXPECT_EQ(m.outputs[i].shape, (std::vector<int64_t>{2}));
  }
  EXPECT_EQ(m.batch.min, 1);
  EXPECT_EQ(m.batch.max, 64);
  EXPECT_EQ(m.device, "cpu");
  EXPECT_EQ(m.interaction_type, "deterministic");
  // The manifest the policy holds is the one the package stores (the bytes signatures sign).
  EXPECT_EQ(Manifest::from_json(read_manifest_bytes(tutorial().path()), "test").to_json(),
            m.to_json());
}

TEST_F(PolicyTest, TutorialSampleIsLocAndScaleIsPositive) {
  const at::Tensor observation = at::randn({5, 3});
  const TensorMap out = tutorial().run({{"observation", observation}});  // braced form compiles
  ASSERT_EQ(out.size(), 3u);
  for (const char* key : {"loc", "scale", "sample"}) {
    ASSERT_EQ(out.count(key), 1u) << key;
    EXPECT_EQ(out.at(key).sizes(), at::IntArrayRef({5, 2})) << key;
    EXPECT_EQ(out.at(key).scalar_type(), at::kFloat) << key;
  }
  EXPECT_TRUE(at::equal(out.at("sample"), out.at("loc")));  // deterministic interaction
  EXPECT_TRUE(out.at("scale").gt(0).all().item<bool>());
}

TEST_F(PolicyTest, KeyedAndPositionalAgree) {
  for (const Policy* policy : {&tutorial(), &nested()}) {
    const auto inputs = random_inputs(policy->manifest(), 3);
    const auto positional = policy->run_positional(inputs);
    const auto by_key = run_keyed_in_order(*policy, inputs);
    ASSERT_EQ(by_key.size(), positional.size());
    for (size_t i = 0; i < positional.size(); ++i) EXPECT_TRUE(at::equal(by_key[i], positional[i]));
  }
}

TEST_F(PolicyTest, NestedKeys) {
  const TensorMap out = nested().run(
      {{"agents.observation", at::randn({4, 2, 5})}, {"robot.joints", at::randn({4, 7})}});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out.at("agents.action").sizes(), at::IntArrayRef({4, 2, 2}));
  EXPECT_EQ(out.at("robot.command").sizes(), at::IntArrayRef({4, 7}));
}

TEST_F(PolicyTest, BatchRangeEndsAreAccepted) {
  for (int64_t batch : {int64_t{1}, int64_t{64}}) {
    const auto out = nested().run_positional(random_inputs(nested().manifest(), batch));
    EXPECT_EQ(out[0].size(0), batch);
  }
}

TEST_F(PolicyTest, PolicyIsMovable) {
  Policy moved(test::package_path("tutorial.pt2"));
  Policy target = std::move(moved);
  EXPECT_EQ(target.manifest().inputs[0].key, "observation");
  EXPECT_NO_THROW(target.run_positional({at::randn({2, 3})}));
  // Using the moved-from object is the point: it must throw, not crash.
  const auto error = test::catch_error<Error>([&] { moved.run_positional({at::randn({2, 3})}); });
  ASSERT_TRUE(error);
  EXPECT_NE(std::string(error->what()).find("moved from"), std::string::npos) << error->what();
}

// ---- load options ----

TEST(PolicyOptionsTest, IntraOpThreadsDefaultToOne) {
  at::set_num_threads(2);
  const Policy policy(test::package_path("tutorial.pt2"));
  EXPECT_EQ(at::get_num_threads(), 1);
}

TEST(PolicyOptionsTest, IntraOpThreadsAreSetOrLeftAlone) {
  PolicyOptions options;
  options.intra_op_threads = 2;
  const Policy two(test::package_path("tutorial.pt2"), options);
  EXPECT_EQ(at::get_num_threads(), 2);
  at::set_num_threads(3);
  options.intra_op_threads = 0;
  const Policy untouched(test::package_path("tutorial.pt2"), options);
  EXPECT_EQ(at::get_num_threads(), 3);
}

TEST(PolicyOptionsTest, IntraOpThreadsReachCallingThreadsStartedLater) {
  // OpenMP's thread count is per thread: a control-loop thread started after load (and after
  // something else changed torch's default) must still run with the policy's count.
  const Policy policy(test::package_path("tutorial.pt2"));  // intra_op_threads = 1
  at::set_num_threads(2);
  int in_thread = 0;
  std::thread loop([&] {
    policy.run_positional({at::randn({64, 3})});
    in_thread = at::get_num_threads();
  });
  loop.join();
  EXPECT_EQ(in_thread, 1);
}

TEST(PolicyOptionsTest, WarmupRunsAtLoad) {
  // Warm-up goes through the same execute path as run(), so a model that fails on the
  // manifest's own inputs fails at load, not in the control loop. (See PolicyExecution.)
  PolicyOptions options;
  options.warmup_runs = 3;
  options.num_runners = 2;
  const Policy policy(test::package_path("nested.pt2"), options);
  EXPECT_NO_THROW(policy.run_positional(random_inputs(policy.manifest(), 1)));
}

struct BadOption {
  std::function<void(PolicyOptions&)> edit;
  std::string message;
};

TEST(PolicyOptionsTest, InvalidOptionsAreRefused) {
  const std::vector<BadOption> cases = {
      {[](PolicyOptions& o) { o.num_runners = 0; },
       "PolicyOptions.num_runners must be >= 1, got 0"},
      {[](PolicyOptions& o) { o.intra_op_threads = -1; },
       "PolicyOptions.intra_op_threads must be >= 0 (0 leaves torch's setting alone), got -1"},
      {[](PolicyOptions& o) { o.warmup_runs = -2; },
       "PolicyOptions.warmup_runs must be >= 0, got -2"},
      {[](PolicyOptions& o) { o.device_index = -3; },
       "PolicyOptions.device_index must be >= -1 (-1 is the current device), got -3"},
  };
  for (const auto& bad : cases) {
    PolicyOptions options;
    bad.edit(options);
    const auto error =
        catch_error<Error>([&] { Policy policy(test::package_path("tutorial.pt2"), options); });
    ASSERT_TRUE(error);
    EXPECT_STREQ(error->what(), bad.message.c_str());
  }
}

// ---- validation, both paths ----

TEST_F(PolicyTest, RejectsWrongDtype) {
  expect_rejected_both<DtypeError>(nested(), nested_with(0, at::randn({4, 2, 5}, at::kDouble)),
                                   "agents.observation", {"has dtype float64, expected float32"});
}

TEST_F(PolicyTest, RejectsWrongPerSampleShape) {
  expect_rejected_both<ShapeError>(nested(), nested_with(0, at::randn({4, 3, 5})),
                                   "agents.observation",
                                   {"has shape [4, 3, 5], expected [B, 2, 5]"});
}

TEST_F(PolicyTest, RejectsWrongRank) {
  expect_rejected_both<ShapeError>(nested(), nested_with(1, at::randn({4})), "robot.joints",
                                   {"has shape [4], expected [B, 7]"});
  expect_rejected_both<ShapeError>(nested(), nested_with(1, at::randn({4, 1, 7})), "robot.joints",
                                   {"has shape [4, 1, 7], expected [B, 7]"});
}

TEST_F(PolicyTest, RejectsScalar) {
  expect_rejected_both<ShapeError>(tutorial(), {at::scalar_tensor(1.0, at::kFloat)}, "observation",
                                   {"has shape [], expected [B, 3]"});
}

TEST_F(PolicyTest, RejectsBatchAboveRange) {
  expect_rejected_both<BatchSizeError>(tutorial(), {at::randn({65, 3})}, "observation",
                                       {"has batch size 65, but the package accepts batch sizes "
                                        "1..64"});
}

TEST_F(PolicyTest, RejectsEmptyBatch) {
  expect_rejected_both<BatchSizeError>(tutorial(), {at::randn({0, 3})}, "observation",
                                       {"has batch size 0", "1..64"});
}

TEST_F(PolicyTest, RejectsBatchMismatchBetweenInputs) {
  expect_rejected_both<BatchSizeError>(
      nested(), nested_with(1, at::randn({3, 7})), "robot.joints",
      {"input 'robot.joints' has batch size 3, but input 'agents.observation' has batch size 4"});
}

TEST_F(PolicyTest, RejectsNonContiguous) {
  const at::Tensor transposed = at::randn({4, 5, 2}).transpose(1, 2);  // shape [4, 2, 5]
  expect_rejected_both<LayoutError>(
      nested(), nested_with(0, transposed), "agents.observation",
      {"is not contiguous (shape [4, 2, 5], strides [10, 1, 2])", "contiguous()"});
}

TEST_F(PolicyTest, RejectsOtherDevice) {
  const at::Tensor meta = at::empty({4, 7}, at::TensorOptions().device(at::kMeta));
  expect_rejected_both<DeviceError>(
      nested(), nested_with(1, meta), "robot.joints",
      {"is on device meta, but the package was built for device cpu"});
}

TEST_F(PolicyTest, RejectsUndefinedTensor) {
  expect_rejected_both<InputError>(nested(), nested_with(1, at::Tensor()), "robot.joints",
                                   {"is an undefined tensor"});
}

TEST_F(PolicyTest, PositionalRejectsWrongInputCount) {
  const auto inputs = random_inputs(nested().manifest(), 2);
  expect_rejected<ShapeError>(nested(), [&] { nested().run_positional({inputs[0]}); }, "",
                              {"expected 2 inputs (agents.observation, robot.joints), got 1"});
  expect_rejected<ShapeError>(nested(),
                              [&] {
                                nested().run_positional({inputs[0], inputs[1], inputs[1]});
                              },
                              "", {"expected 2 inputs", "got 3"});
}

TEST_F(PolicyTest, KeyedRejectsMissingKey) {
  expect_rejected<MissingKeyError>(
      nested(),
      [&] {
        nested().run({{"agents.observation", at::randn({2, 2, 5})}});
      },
      "robot.joints",
      {"missing input key(s) 'robot.joints'; expected keys: agents.observation, robot.joints"});
  expect_rejected<MissingKeyError>(nested(), [&] { nested().run({}); }, "agents.observation",
                                   {"missing input key(s) 'agents.observation', 'robot.joints'"});
}

TEST_F(PolicyTest, KeyedRejectsUnknownKey) {
  TensorMap inputs = keyed(nested().manifest().inputs, random_inputs(nested().manifest(), 2));
  inputs.emplace("robot.velocity", at::randn({2, 7}));
  expect_rejected<UnknownKeyError>(
      nested(), [&] { nested().run(inputs); }, "robot.velocity",
      {"unknown input key 'robot.velocity'; expected keys: agents.observation, robot.joints"});
}

TEST_F(PolicyTest, KeyedTypoIsReportedAsMissing) {
  expect_rejected<MissingKeyError>(
      tutorial(),
      [&] {
        tutorial().run({{"obs", at::randn({2, 3})}});
      },
      "observation",
      {"missing input key(s) 'observation' (given: 'obs'; did you mean 'observation' for 'obs'?); "
       "expected keys: observation"});
}

// A static package is not among the fixtures, so its message is checked on the validator.
TEST(InputValidator, StaticBatchMessage) {
  Manifest m;
  m.device = "cpu";
  m.inputs = {TensorSpec{"obs", DType::Float32, {3}}};
  m.batch = BatchRange{4, 4};
  const detail::InputValidator validator(m, c10::Device(c10::DeviceType::CPU));
  EXPECT_NO_THROW(validator.check_positional({at::randn({4, 3})}));
  const auto error = catch_error<BatchSizeError>([&] {
    validator.check_positional({at::randn({2, 3})});
  });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(),
                       "input 'obs' has batch size 2, but the package was built "
                       "for a static batch size of 4"));
}

// The control-loop path: validating good inputs must not touch the heap.
TEST_F(PolicyTest, ValidationOfGoodInputsDoesNotAllocate) {
  const detail::InputValidator validator(nested().manifest(), c10::Device(c10::DeviceType::CPU));
  const auto inputs = random_inputs(nested().manifest(), 4);
  const TensorMap map = keyed(nested().manifest().inputs, inputs);
  {
    test::AllocationCounter counter;  // sanity: the counter does see allocations
    EXPECT_EQ(format_shape({1000000, 2000000, 3000000}), "[1000000, 2000000, 3000000]");
    EXPECT_GT(counter.count(), 0u);
  }
  {
    test::AllocationCounter counter;
    validator.check_positional(inputs);
    EXPECT_EQ(counter.count(), 0u);
  }
  {
    test::AllocationCounter counter;
    validator.order_keyed(map);
    EXPECT_EQ(counter.count(), 1u);  // the ordered vector handed to AOTInductor, nothing else
  }
}

// ---- failures inside or after the model ----

PolicyOptions without_warmup() {
  PolicyOptions options;
  options.warmup_runs = 0;
  return options;
}

TEST(PolicyExecution, OutputCountDifferentFromManifest) {
  test::TempDir dir;
  const std::string path = dir.file("two_outputs.pt2");
  test::rewrite_manifest(test::package_path("tutorial.pt2"), path,
                         [](nlohmann::json& m) { m["outputs"].erase(m["outputs"].size() - 1); });
  const std::string message =
      "package '" + path + "': the compiled model returned 3 outputs, but the manifest lists 2";
  // By default the warm-up run finds it at load...
  const auto at_load = catch_error<ExecutionError>([&] { Policy policy(path); });
  ASSERT_TRUE(at_load);
  EXPECT_TRUE(Contains(at_load->what(), message + " (in a warm-up run at load)"));
  // ...and without warm-up, the first run does.
  const Policy policy(path, without_warmup());
  const auto error = catch_error<ExecutionError>([&] {
    policy.run_positional({at::randn({2, 3})});
  });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), message));
}

TEST(PolicyExecution, ModelFailureBecomesExecutionError) {
  // A manifest that lies about the input shape gets past validation; AOTInductor's own input
  // checks (AOTI_RUNTIME_CHECK_INPUTS) then make the compiled model fail.
  test::TempDir dir;
  const std::string path = dir.file("lying.pt2");
  test::rewrite_manifest(test::package_path("tutorial.pt2"), path,
                         [](nlohmann::json& m) { m["inputs"][0]["shape"] = {4}; });
  ASSERT_EQ(setenv("AOTI_RUNTIME_CHECK_INPUTS", "1", 1), 0);
  const Policy policy(path, without_warmup());
  const auto error = catch_error<ExecutionError>([&] {
    policy.run({{"observation", at::randn({2, 4})}});
  });
  unsetenv("AOTI_RUNTIME_CHECK_INPUTS");
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + path + "': the compiled model failed: "));
}

TEST(PolicyLoad, AotiRefusalBecomesPackageError) {
  // The manifest is intact and lists the digests of the files as they now are (resealed), but
  // the compiled library is truncated.
  test::TempDir dir;
  const std::string path = dir.file("broken_so.pt2");
  test::rewrite_resealed(test::package_path("tutorial.pt2"), path,
                        [](const std::string& name, std::string& bytes) {
                          if (name.size() > 3 && name.substr(name.size() - 3) == ".so") {
                            bytes.resize(64);
                          }
                          return true;
                        });
  ASSERT_NO_THROW(verify_package(path));
  const auto error = catch_error<PackageError>([&] { Policy policy(path); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(
      Contains(error->what(), "package '" + path + "' could not be loaded by AOTInductor: "));
  EXPECT_EQ(error->path(), path);
}

}  // namespace
}  // namespace tdaot
