// The deployment contract on the legged fixture (examples/policies.py:legged_policy built with
// legged_contract): observation [48] scaled and clipped to +-100, action [12] = clip(0.25 * raw +
// default pose, joint limits), max_delta 0.2, control_dt 0.02. Policy::contract and
// Contract::order, and the safety envelope of a Session (non-finite steps, rate limiting,
// reset), each step checked against Policy::run.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/contract.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/torch/session.h"
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

// A Binding bound with the envelope holds and limits exactly as a Session steps: one envelope.
TEST_F(ContractTest, ABindingWithTheEnvelopeStepsLikeASession) {
  Session session(policy(), 2);
  BindOptions options;
  options.envelope = true;
  Binding binding = policy().bind(2, options);
  at::Tensor observation = binding.input("observation");
  const at::Tensor action = binding.output("action");
  at::Tensor nan_input = at::zeros({2, 48});
  nan_input[1][5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<at::Tensor> steps{nan_input, at::full({2, 48}, -3.0), at::full({2, 48}, 3.0),
                                      at::full({2, 48}, -3.0), at::full({2, 48}, 3.0)};
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i == 3) {  // row 0 starts afresh, in both
      session.reset(at::tensor({1, 0}).to(at::kBool));
      binding.reset(std::vector<bool>{true, false});
    }
    const at::Tensor expected = session.step({{"observation", steps[i]}}).at("action");
    observation.copy_(steps[i]);
    binding.run();
    EXPECT_TRUE(at::equal(action, expected)) << "step " << i;
  }
  EXPECT_EQ(binding.interventions().nonfinite, session.interventions().nonfinite);
  EXPECT_EQ(binding.interventions().rate_limited, session.interventions().rate_limited);
  EXPECT_EQ(binding.interventions().nonfinite, 1);
  EXPECT_GE(binding.interventions().rate_limited, 2);
}

TEST_F(ContractTest, ABindingWithoutTheEnvelopeNeitherHoldsNorResets) {
  Binding binding = policy().bind(1);
  binding.input("observation").fill_(std::numeric_limits<float>::quiet_NaN());
  binding.run();
  EXPECT_TRUE(at::isnan(binding.output("action")).any().item<bool>());
  EXPECT_EQ(binding.interventions().nonfinite, 0);
  // Not recurrent and no envelope: nothing to reset.
  EXPECT_TRUE(catch_error<InvalidArgumentError>([&] { binding.reset(); }));
  BindOptions options;
  options.envelope = true;
  Binding enveloped = policy().bind(1, options);
  enveloped.reset();  // the envelope's previous outputs are something to forget
  EXPECT_TRUE(catch_error<ShapeError>([&] { enveloped.reset(std::vector<bool>{true, false}); }));
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

// The legged fixture's observation, Isaac Lab's velocity-tracking layout, written as terms (what
// legged_contract gives as 48 names and scales): the same per-element map, names derived.
nlohmann::json legged_terms() {
  auto term = [](const char* name, double scale) {
    return nlohmann::json{{"name", name}, {"scale", scale}, {"low", -100.0}, {"high", 100.0}};
  };
  return nlohmann::json::array({term("base_lin_vel", 2.0), term("base_ang_vel", 0.25),
                                term("projected_gravity", 1.0), term("velocity_commands", 1.0),
                                term("joint_pos_rel", 1.0), term("joint_vel_rel", 0.05),
                                term("last_action", 1.0)});
}

// The legged package with its observation signal replaced by `terms` and `edit` applied to the
// manifest's contract; loaded, or the ManifestError it gives.
std::optional<ManifestError> load_with_terms(const Policy& original, const nlohmann::json& terms,
                                             const std::function<void(nlohmann::json&)>& edit,
                                             std::optional<Contract>* loaded = nullptr) {
  (void)original;
  const test::TempDir dir;
  const std::string edited = dir.file("legged.pt2");
  test::rewrite_manifest(test::package_path("legged.pt2"), edited, [&](nlohmann::json& manifest) {
    manifest["contract"]["inputs"]["observation"] = {{"terms", terms}};
    manifest["contract"]["outputs"]["action"]["stiffness"] = 20.0;
    manifest["contract"]["outputs"]["action"]["damping"] =
        nlohmann::json::array({0.5, 0.5, 0.5, 0.5, 0.6, 0.6, 0.6, 0.6, 0.7, 0.7, 0.7, 0.7});
    edit(manifest["contract"]);
  });
  try {
    const Policy policy(edited);
    if (loaded != nullptr) *loaded = policy.contract();
  } catch (const ManifestError& error) {
    return error;
  }
  return std::nullopt;
}

TEST_F(ContractTest, TermsDeriveTheNamesAndTheMapOfAnInput) {
  std::optional<Contract> loaded;
  const auto error = load_with_terms(policy(), legged_terms(), [](nlohmann::json&) {}, &loaded);
  ASSERT_FALSE(error) << error->what();
  ASSERT_TRUE(loaded);
  const Signal& observation = loaded->inputs.at("observation");
  const Signal& original = contract().inputs.at("observation");
  ASSERT_EQ(observation.terms.size(), 7u);
  ASSERT_EQ(observation.names.size(), 48u);
  EXPECT_EQ(observation.names[0], "base_lin_vel.x");
  EXPECT_EQ(observation.names[9], "velocity_commands.lin_vel_x");
  EXPECT_EQ(observation.names[11], "velocity_commands.ang_vel_z");
  EXPECT_EQ(observation.names[12], "joint_pos_rel.FL_hip_joint");
  EXPECT_EQ(observation.names[47], "last_action.RR_calf_joint");
  for (size_t i = 0; i < 48; ++i) {  // the same map as the 48 names and scales it replaces
    EXPECT_DOUBLE_EQ(observation.scale[i], original.scale[i]) << i;
    EXPECT_DOUBLE_EQ(observation.offset[i], 0.0) << i;
    EXPECT_DOUBLE_EQ(observation.low[i], -100.0) << i;
    EXPECT_DOUBLE_EQ(observation.high[i], 100.0) << i;
  }
  const Term& last_action = observation.terms.back();
  EXPECT_EQ(last_action.name, "last_action");
  EXPECT_EQ(last_action.size, 12);
  EXPECT_EQ(last_action.history, 1);
  EXPECT_EQ(*loaded->joint_output(last_action), "action");
  const Signal& action = loaded->outputs.at("action");
  EXPECT_DOUBLE_EQ(action.stiffness[11], 20.0);
  EXPECT_DOUBLE_EQ(action.damping[4], 0.6);
  const std::string text = loaded->describe();
  EXPECT_TRUE(Contains(text, "input observation [48]: 7 terms")) << text;
  EXPECT_TRUE(Contains(text, "term joint_vel_rel [12]: scale 0.05, offset 0, low -100, high 100"))
      << text;
  EXPECT_TRUE(Contains(text, "gains stiffness 20, damping [0.5, 0.5, 0.5, 0.5, ...]")) << text;
}

TEST_F(ContractTest, HistoryAndGaitPhaseDeriveOlderStepsFirst) {
  // The legged manifest with an observation of 50: 3 + 12 x 2 steps + 2 + 3 + 12 + 3 + 3.
  nlohmann::json terms = nlohmann::json::array(
      {{{"name", "projected_gravity"}},
       {{"name", "joint_pos_rel"}, {"history", 2}, {"scale", 0.5}},
       {{"name", "gait_phase"}, {"period", 0.8}},
       {{"name", "base_ang_vel"}, {"low", -1.0}},
       {{"name", "joint_vel_rel"}, {"output", "action"}},
       {{"name", "base_lin_vel"}},
       {{"name", "velocity_commands"}, {"high", 1.0}}});
  nlohmann::json manifest = nlohmann::json::parse(policy().manifest().to_json());
  for (auto& input : manifest["inputs"]) {
    if (input["key"] == "observation") input["shape"] = {50};
  }
  manifest["contract"]["inputs"]["observation"] = {{"terms", terms}};
  const Manifest parsed = Manifest::from_json(manifest.dump(), "edited");
  const std::optional<Contract>& loaded = parsed.contract;
  // Written back as terms, and read again the same.
  EXPECT_EQ(Manifest::from_json(parsed.to_json(), "again").to_json(), parsed.to_json());
  EXPECT_TRUE(Contains(parsed.to_json(), R"("terms":[{"name":"projected_gravity","scale":1.0)"))
      << parsed.to_json();
  const Signal& observation = loaded->inputs.at("observation");
  ASSERT_EQ(observation.names.size(), 50u);
  EXPECT_EQ(observation.names[3], "joint_pos_rel.FL_hip_joint@-1");
  EXPECT_EQ(observation.names[15], "joint_pos_rel.FL_hip_joint");
  EXPECT_EQ(observation.names[27], "gait_phase.sin");
  EXPECT_EQ(observation.names[28], "gait_phase.cos");
  EXPECT_DOUBLE_EQ(observation.scale[3], 0.5);
  EXPECT_DOUBLE_EQ(observation.scale[27], 1.0);
  EXPECT_TRUE(observation.scale.per_element);
  EXPECT_FALSE(observation.offset.per_element);  // every term's offset is 0: one number
  EXPECT_EQ(observation.low[29], -1.0);  // base_ang_vel
  EXPECT_EQ(observation.low[0], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(observation.high[49], 1.0);
  EXPECT_EQ(observation.high[47], 1.0);
  EXPECT_EQ(observation.high[46], std::numeric_limits<double>::infinity());  // base_lin_vel.z
  EXPECT_EQ(observation.high[0], std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(observation.terms[2].params.at("period"), 0.8);
  EXPECT_EQ(observation.terms[1].size, 12);
  EXPECT_EQ(observation.terms[1].history, 2);
  EXPECT_TRUE(Contains(loaded->describe(), "term joint_pos_rel [12 x 2 steps]: scale 0.5"));
  EXPECT_TRUE(Contains(loaded->describe(), "term gait_phase [2], period 0.8: scale 1"));
}

TEST_F(ContractTest, AHandEditedTermMistakeIsRefusedAtLoadNamingKeyTermAndField) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expected;
  };
  const std::string terms = "field 'contract.inputs.observation.terms";
  const std::vector<Case> cases{
      {[](nlohmann::json& c) { c["inputs"]["observation"]["terms"][2]["name"] = "gravity"; },
       terms + "[2].name': unknown term 'gravity' (known: base_lin_vel base_ang_vel"},
      {[](nlohmann::json& c) { c["inputs"]["observation"]["terms"][0]["name"] = "gait_phase";
                               c["inputs"]["observation"]["terms"][0]["period"] = 1.0; },
       terms + "': the terms have 47 elements (gait_phase 2 + base_ang_vel 3 + projected_gravity 3 "
               "+ velocity_commands 3 + joint_pos_rel 12 + joint_vel_rel 12 + last_action 12), but "
               "'observation' has 48"},
      {[](nlohmann::json& c) { c["inputs"]["observation"]["terms"][4]["history"] = 0; },
       terms + "[4].history': term 'joint_pos_rel': history 0 is not >= 1"},
      {[](nlohmann::json& c) { c["inputs"]["observation"]["terms"][6]["output"] = "observation"; },
       terms + "[6].output': term 'last_action': 'observation' is not one of the contract's "
               "output signals (it has: action)"},
      {[](nlohmann::json& c) { c["outputs"] = nlohmann::json::object(); },
       terms + "[4].name': term 'joint_pos_rel': has one element per joint of the contract's joint "
               "output signal, but the contract has no output signal"},
      {[](nlohmann::json& c) { c["outputs"]["action"]["stiffness"] = {1.0, 2.0}; },
       "field 'contract.outputs.action.stiffness': has 2 values, expected 12 (one per joint)"},
      {[](nlohmann::json& c) { c["inputs"]["observation"]["damping"] = 1.0; },
       "field 'contract.inputs.observation.damping': gains belong to an output signal of joint "
       "targets; 'observation' is an input"},
  };
  for (const Case& c : cases) {
    const auto error = load_with_terms(policy(), legged_terms(), c.edit);
    ASSERT_TRUE(error) << c.expected;
    EXPECT_TRUE(Contains(error->what(), c.expected)) << error->what();
  }
}

}  // namespace
}  // namespace tdaot
