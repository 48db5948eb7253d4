// The deployment contract on the legged fixture (examples/policies.py:legged_policy built with
// legged_contract): observation [48] scaled and clipped to +-100, action [12] = clip(0.25 * raw +
// default pose, joint limits), max_delta 0.2, control_dt 0.02. Policy::contract and
// Contract::order, and the safety envelope of a Session (non-finite steps, rate limiting,
// reset), each step checked against Policy::run.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/errors.h"
#include "tdaot/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

constexpr double kMaxDelta = 0.2;

class ContractTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    legged_ = std::make_unique<Policy>(test::package_path("legged.pt2"));
  }
  static void TearDownTestSuite() { legged_.reset(); }
  static const Policy& policy() { return *legged_; }
  static const Contract& contract() { return *policy().contract(); }
  static const Signal& action() { return contract().outputs.at("action"); }

  // What Policy::run gives for `observation` (the compiled map and clip, no envelope).
  static at::Tensor run(const at::Tensor& observation) {
    return policy().run({{"observation", observation}}).at("action");
  }

  // The action before any step: the default pose, clipped to the limits, per row.
  static at::Tensor rest(int64_t batch) {
    std::vector<float> row;
    for (size_t i = 0; i < action().names.size(); ++i) row.push_back(static_cast<float>(action().rest(i)));
    return at::tensor(row).repeat({batch, 1});
  }

 private:
  static inline std::unique_ptr<Policy> legged_;
};

TEST_F(ContractTest, PolicyCarriesTheContractItWasBuiltWith) {
  ASSERT_TRUE(policy().contract().has_value());
  EXPECT_DOUBLE_EQ(contract().control_dt, 0.02);
  EXPECT_EQ(contract().metadata.at("robot"), "go2");
  ASSERT_EQ(action().names.size(), 12u);
  EXPECT_EQ(action().names.front(), "FL_hip_joint");
  EXPECT_DOUBLE_EQ(action().scale[3], 0.25);
  EXPECT_DOUBLE_EQ(action().offset[4], 0.8);
  EXPECT_DOUBLE_EQ(action().max_delta[0], kMaxDelta);
  EXPECT_EQ(contract().inputs.at("observation").names.size(), 48u);
  EXPECT_TRUE(Contains(contract().describe(), "control_dt 0.02 s (50 Hz)"));
}

TEST_F(ContractTest, AHandEditedContractIsRefusedAtLoad) {
  const test::TempDir dir;
  const std::string edited = dir.file("legged.pt2");
  test::rewrite_manifest(test::package_path("legged.pt2"), edited, [](nlohmann::json& manifest) {
    manifest["contract"]["outputs"]["action"]["low"] = 5.0;
  });
  const auto error = catch_error<ManifestError>([&] { Policy policy(edited); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "field 'contract.outputs.action.low': low 5.0 > high 1.05 "
                                      "for 'FL_hip_joint'"))
      << error->what();
}

TEST_F(ContractTest, TheCompiledMapKeepsActionsInsideTheJointLimits) {
  const at::Tensor out = run(at::randn({16, 48}) * 1000);  // raw actions far outside the limits
  for (size_t i = 0; i < action().names.size(); ++i) {
    const at::Tensor column = out.select(1, static_cast<int64_t>(i));
    EXPECT_GE(column.min().item<double>(), action().low[i] - 1e-6) << action().names[i];
    EXPECT_LE(column.max().item<double>(), action().high[i] + 1e-6) << action().names[i];
  }
}

TEST_F(ContractTest, OrderMapsTheServicesNamesToThePolicys) {
  std::vector<std::string> names = action().names;
  std::reverse(names.begin(), names.end());
  const std::vector<int64_t> order = contract().order("action", names);
  ASSERT_EQ(order.size(), 12u);
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], static_cast<int64_t>(11 - i));
}

TEST_F(ContractTest, OrderRefusesNamesThatAreNotThePolicys) {
  std::vector<std::string> names = action().names;
  names[2] = "FL_hip";  // RL_hip_joint missing, FL_hip extra
  auto error = catch_error<ContractError>([&] { contract().order("action", names); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->key(), "action");
  EXPECT_TRUE(Contains(error->what(), "the names given for 'action' (12) are not the policy's (12): "
                                      "missing 'RL_hip_joint', extra 'FL_hip' (the first of each)"));
  names.pop_back();
  names[2] = "RL_hip_joint";
  error = catch_error<ContractError>([&] { contract().order("action", names); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "(11) are not the policy's (12): missing 'RR_calf_joint'"));
  names.push_back("FL_hip_joint");
  error = catch_error<ContractError>([&] { contract().order("action", names); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "list 'FL_hip_joint' twice"));
  error = catch_error<ContractError>([&] { contract().order("joints", names); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "the contract has no signal 'joints' (it has: observation, action)"));
}

TEST_F(ContractTest, ANonFiniteStepReturnsThePreviousOutputs) {
  Session session(policy(), 2);
  at::Tensor nan_input = at::zeros({2, 48});
  nan_input[1][5] = std::numeric_limits<float>::quiet_NaN();
  // Before the first step: the rest pose.
  TensorMap out = session.step({{"observation", nan_input}});
  EXPECT_TRUE(at::equal(out.at("action"), rest(2)));
  EXPECT_EQ(session.interventions().nonfinite, 1);
  const at::Tensor observation = at::randn({2, 48}) * 0.01;
  const at::Tensor first = session.step({{"observation", observation}}).at("action");
  EXPECT_TRUE(at::allclose(first, run(observation)));  // the first step is not rate limited
  at::Tensor inf_input = observation.clone();
  inf_input[0][0] = std::numeric_limits<float>::infinity();
  out = session.step({{"observation", inf_input}});
  EXPECT_TRUE(at::equal(out.at("action"), first));
  EXPECT_EQ(session.interventions().nonfinite, 2);
  EXPECT_EQ(session.interventions().rate_limited, 0);
}

TEST_F(ContractTest, OutputsMoveAtMostMaxDeltaPerStep) {
  Session session(policy(), 1);
  const at::Tensor a = at::full({1, 48}, -3.0);
  const at::Tensor b = at::full({1, 48}, 3.0);
  const at::Tensor first = session.step({{"observation", a}}).at("action");
  ASSERT_GT((run(b) - first).abs().max().item<double>(), kMaxDelta) << "the test needs a big move";
  const at::Tensor second = session.step({{"observation", b}}).at("action");
  const at::Tensor expected = at::clamp(run(b), first - kMaxDelta, first + kMaxDelta);
  EXPECT_TRUE(at::allclose(second, expected, 0, 1e-6));
  EXPECT_EQ(session.interventions().rate_limited, 1);
  // reset() forgets the previous outputs: the next step is not rate limited.
  session.reset();
  EXPECT_TRUE(at::allclose(session.step({{"observation", a}}).at("action"), run(a)));
  EXPECT_EQ(session.interventions().rate_limited, 1);
}

TEST_F(ContractTest, AMaskedResetForgetsOnlyItsRows) {
  Session session(policy(), 2);
  const at::Tensor a = at::full({2, 48}, -3.0);
  const at::Tensor b = at::full({2, 48}, 3.0);
  const at::Tensor first = session.step({{"observation", a}}).at("action");
  session.reset(at::tensor({1, 0}).to(at::kBool));
  const at::Tensor second = session.step({{"observation", b}}).at("action");
  EXPECT_TRUE(at::allclose(second[0], run(b)[0]));  // reset: free to move
  EXPECT_TRUE(at::allclose(second[1], at::clamp(run(b)[1], first[1] - kMaxDelta,
                                                first[1] + kMaxDelta), 0, 1e-6));
}

TEST_F(ContractTest, ASessionStepsAPackageWithoutStateOrContract) {
  const Policy tutorial(test::package_path("tutorial.pt2"));
  Session session(tutorial, 1);
  const at::Tensor observation = at::randn({1, 3});
  const TensorMap out = session.step({{"observation", observation}});
  EXPECT_TRUE(at::allclose(out.at("sample"), tutorial.run({{"observation", observation}}).at("sample")));
  EXPECT_TRUE(session.state().empty());
  // Without a signal an output rests at 0 before the first step.
  const TensorMap held = Session(tutorial, 1).step(
      {{"observation", at::full({1, 3}, std::numeric_limits<float>::quiet_NaN())}});
  EXPECT_TRUE(at::equal(held.at("sample"), at::zeros({1, 2})));
}

}  // namespace
}  // namespace tdaot
