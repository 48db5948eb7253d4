// Hot weight swap on the lite runtime (lite::Policy::swap_weights, rollback_weights,
// weights_sha256), mirroring the full runtime's tests (test_weights.cpp,
// test_weights_signature.cpp) with the same fixture files and the same refusals
// (../weight_refusals.h): bindings made before and after a swap run on the new weights, equal to
// the full runtime's bound run after the same swap and to the eager policy given the file's
// weights (lite_swap_expected.json, lite/write_swap_fixtures.py); rollback restores the built
// weights exactly; every refused file is named with the tensor at fault, and the old weights keep
// running; threads running their own bindings see the old or the new weights only; and the
// shared check itself against tables made to differ.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../weight_refusals.h"
#include "core/weights/weights_check.h"
#include "lite_support.h"
#include "tdaot/errors.h"
#include "tdaot/lite.h"

namespace tdaot {
namespace {

using lite_test::catch_error;
using lite_test::Contains;
using nlohmann::json;
using Outputs = std::map<std::string, std::vector<float>>;

std::string pkg(const std::string& name) { return lite_test::package_path(name); }
const json& expected() { return fixtures::json_file("lite_swap_expected.json"); }
std::string tutorial() { return pkg(expected().at("package")); }
std::string weights() { return pkg(expected().at("weights")); }

// Writes a step's observation into `b`, runs it and returns its float outputs by key.
Outputs run_step(lite::Binding& b, const json& step) {
  const auto observation = step.at("inputs").at("observation").get<std::vector<float>>();
  std::copy(observation.begin(), observation.end(), b.input<float>("observation"));
  b.run();
  Outputs outputs;
  for (const auto& [key, values] : step.at("full").items()) {
    const float* data = b.output<float>(key);
    outputs[key].assign(data, data + values.size());
  }
  return outputs;
}

// The outputs `b` gives for every step equal each step's `which` ("built", "full") exactly,
// and with "full" the eager policy's within 1e-5.
void expect_steps(lite::Binding& b, const std::string& which, const std::string& what) {
  for (const json& step : expected().at("steps")) {
    const Outputs got = run_step(b, step);
    for (const auto& [key, values] : step.at(which).items()) {
      EXPECT_EQ(got.at(key), values.get<std::vector<float>>()) << what << " " << which << " " << key;
      if (which != "full") continue;
      const auto eager = step.at("eager").at(key).get<std::vector<float>>();
      for (size_t i = 0; i < eager.size(); ++i) {
        EXPECT_NEAR(got.at(key)[i], eager[i], 1e-5 * (1 + std::abs(eager[i]))) << what << " " << key;
      }
    }
  }
}

TEST(LiteWeightSwap, BindingsFollowASwapAndRollbackRestoresTheBuiltWeights) {
  const lite::Policy policy(tutorial());
  lite::Binding before = policy.bind(1);  // bound before the swap
  const std::string built_with = policy.weights_sha256();
  EXPECT_EQ(built_with.size(), 64u);
  expect_steps(before, "built", "before the swap");

  policy.swap_weights(weights());
  EXPECT_EQ(policy.weights_sha256(), expected().at("weights_sha256").get<std::string>());
  expect_steps(before, "full", "bound before the swap");
  lite::Binding after = policy.bind(1);
  expect_steps(after, "full", "bound after the swap");

  policy.rollback_weights();
  EXPECT_EQ(policy.weights_sha256(), built_with);
  expect_steps(before, "built", "after rollback");
  expect_steps(after, "built", "bound after the swap, after rollback");
  policy.rollback_weights();  // the weights live before the rollback: the swapped ones
  expect_steps(after, "full", "after a second rollback");
}

TEST(LiteWeightSwap, ARefusedFileNamesItselfAndTheTensorAndTheOldWeightsKeepRunning) {
  const lite::Policy policy(tutorial());
  lite::Binding b = policy.bind(1);
  policy.swap_weights(weights());  // the weights that must keep running
  const std::string live = policy.weights_sha256();
  lite_test::TempDir dir;
  for (const test_weights::Refusal& refusal :
       test_weights::damaged_files(dir, weights(), pkg("tutorial_v2_transposed.tdw"))) {
    const auto error = catch_error<WeightsError>([&] { policy.swap_weights(refusal.path); });
    ASSERT_TRUE(error) << refusal.path;
    EXPECT_EQ(error->path(), refusal.path);
    if (refusal.tensor) {
      EXPECT_EQ(error->tensor(), *refusal.tensor);
    }
    EXPECT_TRUE(Contains(error->what(), "weight file '" + refusal.path + "'"));
    EXPECT_TRUE(Contains(error->what(), refusal.message));
    EXPECT_EQ(policy.weights_sha256(), live);
    expect_steps(b, "full", "after refusing " + refusal.path);
  }
  const lite::Policy other(pkg("tutorial_b14.pt2"));
  const auto error = catch_error<WeightsError>([&] { other.swap_weights(weights()); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "was made for the package of sha256 " + policy.sha256()));
}

// Issue 56, as test_weights.cpp: one derived constant of the batch-1 model changed by +100
// under tutorial_v2.tdw's weights/ entries swaps in and reports another digest than that file.
TEST(LiteWeightSwap, AChangedDerivedConstantChangesTheReportedDigest) {
  const lite::Policy policy(tutorial());
  EXPECT_EQ(policy.weights_sha256(), policy.manifest().weights_sha256);
  const std::string pinned = expected().at("weights_sha256").get<std::string>();
  policy.swap_weights(weights());
  EXPECT_EQ(policy.weights_sha256(), pinned);
  policy.swap_weights(pkg("tutorial_v2_derived.tdw"));
  EXPECT_NE(policy.weights_sha256(), pinned);
  EXPECT_EQ(policy.weights_sha256().size(), 64u);
}

TEST(LiteWeightSwap, RollbackWithoutASwapIsRefused) {
  const lite::Policy policy(tutorial());
  const auto error = catch_error<WeightsError>([&] { policy.rollback_weights(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package '" + tutorial() + "' has no previous weights"));
}

TEST(LiteWeightSignature, SignedWeightsSwapInAndEveryUnvouchedFileIsRefusedNamingIt) {
  lite::PolicyOptions options;
  options.trusted_keys = {pkg("keys/public.pem")};
  const lite::Policy policy(pkg("tutorial_signed.pt2"), options);
  lite::Binding b = policy.bind(1);
  const std::string built_with = policy.weights_sha256();
  for (const test_weights::Refusal& refusal : test_weights::unvouched_files()) {
    const auto error = catch_error<SignatureError>([&] { policy.swap_weights(refusal.path); });
    ASSERT_TRUE(error) << refusal.path;
    EXPECT_EQ(error->path(), refusal.path);
    EXPECT_TRUE(Contains(error->what(), "weight file '" + refusal.path + "' " + refusal.message));
    EXPECT_EQ(policy.weights_sha256(), built_with);
    expect_steps(b, "built", "after refusing " + refusal.path);
  }
  // A tensor byte changed after signing: its digest refuses it before the signature is read.
  lite_test::TempDir dir;
  const std::string tampered = test_weights::flip_last_byte(dir, test_weights::signed_weights());
  const auto error = catch_error<WeightsError>([&] { policy.swap_weights(tampered); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "weight file '" + tampered + "' does not match its digest"));
  expect_steps(b, "built", "after refusing the tampered file");
  // The same tensors as tutorial_v2.tdw, signed: the outputs of that swap.
  policy.swap_weights(test_weights::signed_weights());
  expect_steps(b, "full", "after the signed swap");
}

TEST(LiteWeightSignature, WithoutTrustedKeysSignaturesAreNotLookedAt) {
  const lite::Policy policy(pkg("tutorial_signed.pt2"));
  policy.swap_weights(pkg("tutorial_signed_v2_unsigned.tdw"));
  policy.swap_weights(pkg("tutorial_signed_v2_other.tdw"));
  lite::Binding b = policy.bind(1);
  expect_steps(b, "full", "unsigned weights without trusted keys");
}

TEST(LiteWeightSwap, ThreadsWithTheirOwnBindingsSeeTheOldOrTheNewWeightsOnly) {
  const lite::Policy policy(tutorial());
  const json& step = expected().at("steps").at(0);
  const std::vector<float> built = step.at("built").at("loc").get<std::vector<float>>();
  const std::vector<float> swapped = step.at("full").at("loc").get<std::vector<float>>();
  std::atomic<bool> done{false};
  std::atomic<int> mixed{0};
  std::atomic<int> saw_new{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      lite::Binding b = policy.bind(1);
      while (!done.load()) {
        const std::vector<float> loc = run_step(b, step).at("loc");
        if (loc == swapped) {
          ++saw_new;
        } else if (loc != built) {
          ++mixed;
        }
      }
    });
  }
  for (int i = 0; i < 20; ++i) {
    policy.swap_weights(weights());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    policy.rollback_weights();
  }
  policy.swap_weights(weights());
  const int seen = saw_new.load();
  for (int waited = 0; saw_new.load() == seen && waited < 5000; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  done = true;
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(saw_new.load(), 0);
}

// The shared check both runtimes swap through (core/weights/weights_check.h), against tables
// made to differ from the file: every mismatch is named with the tensor, and a model that cannot
// swap (its library lacks an entry point the swap needs) is named with why.
TEST(WeightSwapCheck, EveryMismatchWithAModelsConstantsIsNamed) {
  const detail::WeightFile file = detail::read_weight_file(weights());
  detail::ConstantTable table;
  for (const auto& [key, tensor] : file.tensors) {
    if (key.rfind("model/b1/", 0) == 0) table[key.substr(9)] = {tensor.dtype, tensor.shape, {}, {}};
  }
  ASSERT_FALSE(table.empty());
  const std::string first = table.begin()->first;
  const std::vector<std::string> models{"model", "b1"};
  const auto check = [&](const detail::ConstantTable& t, const std::string& unswappable,
                         const std::vector<std::string>& held) {
    detail::check_swap(file, file.base_manifest_sha256, held, {{"b1", &t, unswappable}});
  };
  EXPECT_NO_THROW(check(table, "", models));
  detail::ConstantTable needs_more = table;
  needs_more["constant99"] = {DType::Float32, {2}, {}, {}};
  detail::ConstantTable other_dtype = table;
  other_dtype[first].dtype = DType::Float64;
  detail::ConstantTable fewer = table;
  fewer.erase(first);
  const auto prefix = std::string("weight file '") + weights() + "'";
  for (const auto& [name, call, tensor, message] :
       std::vector<std::tuple<std::string, std::function<void()>, std::string, std::string>>{
           {"unswappable", [&] { check(table, "its library lacks X", models); }, "",
            prefix + " cannot be swapped into model 'b1': its library lacks X"},
           {"missing", [&] { check(needs_more, "", models); }, "model/b1/constant99",
            prefix + ": tensor 'model/b1/constant99' is missing: model 'b1' needs it"},
           {"dtype", [&] { check(other_dtype, "", models); }, "model/b1/" + first,
            "has dtype float32, but model 'b1' takes float64"},
           {"extra", [&] { check(fewer, "", models); }, "model/b1/" + first,
            "is not a constant of model 'b1'"},
           {"another package's models", [&] { check(table, "", {"b1"}); }, "",
            "is for model 'model', which the package does not hold"}}) {
    const auto error = catch_error<WeightsError>(call);
    ASSERT_TRUE(error) << name;
    EXPECT_EQ(error->path(), weights()) << name;
    if (!tensor.empty()) {
      EXPECT_EQ(error->tensor(), tensor) << name;
    }
    EXPECT_TRUE(Contains(error->what(), message)) << name;
  }
}

}  // namespace
}  // namespace tdaot
