// tdaot::Binding: owned inputs and outputs for one batch size, run in place; the same results as
// Policy::run_positional (and, recurrent, as a Session), on the allocation-free path where the
// batch has a specialised model and on the runner's path elsewhere; every refusal names the key
// or batch at fault. (Allocation counts: test_zero_allocations.cpp.)
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

std::string tutorial() { return test::package_path("tutorial.pt2"); }

void expect_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(at::equal(got[i], want[i])) << "output " << i << ": " << got[i] << " vs "
                                            << want[i];
  }
}

// Writes `inputs` into the binding's inputs, runs it, returns copies of its outputs.
std::vector<at::Tensor> run_bound(Binding& b, const std::vector<at::Tensor>& inputs) {
  for (size_t i = 0; i < inputs.size(); ++i) b.inputs()[i].copy_(inputs[i]);
  b.run();
  std::vector<at::Tensor> outputs;
  for (const at::Tensor& output : b.outputs()) outputs.push_back(output.clone());
  return outputs;
}

TEST(Binding, MatchesRunPositionalOnEveryPath) {
  struct Case {
    std::string package;
    int64_t batch;
    std::string model;
    bool allocation_free;
  };
  for (const Case& c : std::vector<Case>{{"tutorial.pt2", 1, "b1", true},
                                         {"tutorial.pt2", 2, "model", false},
                                         {"tutorial.pt2", 64, "model", false},
                                         {"tutorial_b14.pt2", 4, "b4", true},
                                         {"nested.pt2", 1, "b1", true},
                                         {"custom_op.pt2", 1, "b1", false}}) {
    SCOPED_TRACE(c.package + " at batch " + std::to_string(c.batch));
    if (c.package == "custom_op.pt2") {
      // A model calling a custom operator needs AOTInductor's proxy executor: runner's path.
      PolicyOptions options;
      options.op_libraries = {TDAOT_TEST_OPS_LIB};
      Policy(test::package_path(c.package), options);  // loads the library once, for good
    }
    const Policy policy(test::package_path(c.package));
    Binding b = policy.bind(c.batch);
    EXPECT_EQ(b.batch(), c.batch);
    EXPECT_EQ(b.model(), c.model);
    EXPECT_EQ(b.allocation_free(), c.allocation_free);
    ASSERT_EQ(b.inputs().size(), policy.manifest().inputs.size());
    ASSERT_EQ(b.outputs().size(), policy.manifest().outputs.size());
    for (size_t i = 0; i < b.inputs().size(); ++i) {
      EXPECT_EQ(b.inputs()[i].size(0), c.batch);
      EXPECT_EQ(b.inputs()[i].scalar_type(), policy.manifest().inputs[i].dtype);
    }
    for (int call = 0; call < 3; ++call) {
      const auto inputs = test::random_inputs(policy.manifest(), c.batch);
      expect_equal(run_bound(b, inputs), policy.run_positional(inputs));
    }
  }
}

TEST(Binding, InputsAndOutputsAreTheBindingsOwnMemory) {
  const Policy policy(tutorial());
  Binding b = policy.bind(1);
  at::Tensor observation = b.input("observation");
  const at::Tensor loc = b.output("loc");
  EXPECT_EQ(observation.data_ptr(), b.inputs()[0].data_ptr());
  EXPECT_EQ(loc.data_ptr(), b.outputs()[0].data_ptr());
  const void* where = loc.data_ptr();
  const at::Tensor x = at::randn({1, 3});
  observation.copy_(x);
  b.run();
  EXPECT_EQ(loc.data_ptr(), where);
  EXPECT_TRUE(at::equal(loc, policy.run_positional({x})[0]));
  observation.copy_(x * 2);  // a new observation, written in place
  b.run();
  EXPECT_TRUE(at::equal(loc, policy.run_positional({x * 2})[0]));
  EXPECT_FALSE(at::equal(loc, policy.run_positional({x})[0]));
}

TEST(Binding, OutlivesItsPolicy) {
  const at::Tensor x = at::randn({1, 3});
  std::optional<Policy> policy(std::in_place, tutorial());
  const at::Tensor want = policy->run_positional({x})[0];
  Binding b = policy->bind(1);
  Binding moved = std::move(b);
  policy.reset();
  moved.input("observation").copy_(x);
  moved.run();
  EXPECT_TRUE(at::equal(moved.output("loc"), want));
  const auto error = catch_error<Error>([&] { b.run(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "this tdaot::Binding was moved from"));
}

TEST(Binding, OneModelLoadedAloneTakesTheRunnersPath) {
  PolicyOptions options;
  options.model_name = "model";
  const Policy policy(tutorial(), options);
  Binding b = policy.bind(1);
  EXPECT_EQ(b.model(), "model");
  EXPECT_FALSE(b.allocation_free());
  const auto inputs = test::random_inputs(policy.manifest(), 1);
  expect_equal(run_bound(b, inputs), policy.run_positional(inputs));
}

// A bound session steps exactly as a Session: same state, is_init, reset and reset(mask).
TEST(Binding, ARecurrentBindingIsABoundSession) {
  const Policy policy(test::package_path("recurrent.pt2"));
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Binding b = policy.bind(batch);
    EXPECT_EQ(b.allocation_free(), batch == 1);
    Session session(policy, batch);
    const auto check_step = [&] {
      const at::Tensor observation = at::randn({batch, 3});
      b.input("observation").copy_(observation);
      b.run();
      const TensorMap want = session.step({{"observation", observation}});
      for (const auto& [key, tensor] : want) EXPECT_TRUE(at::equal(b.output(key), tensor)) << key;
      EXPECT_TRUE(at::equal(b.input("hidden"), session.state().at("hidden")));
    };
    for (int step = 0; step < 3; ++step) check_step();
    EXPECT_FALSE(b.input("is_init").any().item<bool>());
    at::Tensor mask = at::zeros({batch}, at::kBool);
    mask[0] = true;
    b.reset(mask);
    session.reset(mask);
    EXPECT_TRUE(b.input("is_init")[0].all().item<bool>());
    EXPECT_TRUE(b.input("hidden")[0].eq(0).all().item<bool>());
    for (int step = 0; step < 2; ++step) check_step();
    b.reset();
    session.reset();
    EXPECT_TRUE(b.input("is_init").all().item<bool>());
    EXPECT_TRUE(b.input("hidden").eq(0).all().item<bool>());
    check_step();
  }
}

// is_init written by the caller (as a torchrl rollout carries it) reaches the model for that
// run only, exactly as a Session step given the same is_init.
TEST(Binding, IsInitWrittenByTheCallerMarksRowsForOneRun) {
  const Policy policy(test::package_path("recurrent.pt2"));
  Binding b = policy.bind(2);
  Session session(policy, 2);
  const at::Tensor flags = at::tensor({0, 1}).to(at::kBool).view({2, 1});
  for (int step = 0; step < 4; ++step) {
    const at::Tensor observation = at::randn({2, 3});
    b.input("observation").copy_(observation);
    TensorMap given{{"observation", observation}};
    if (step == 2) {
      b.input("is_init").copy_(flags);
      given.emplace("is_init", flags);
    }
    b.run();
    const TensorMap want = session.step(given);
    for (const auto& [key, tensor] : want) {
      EXPECT_TRUE(at::equal(b.output(key), tensor)) << key << " at step " << step;
    }
    EXPECT_FALSE(b.input("is_init").any().item<bool>()) << "cleared after step " << step;
  }
}

TEST(BindingErrors, ABatchThePackageDoesNotAcceptNamesTheRange) {
  const Policy policy(tutorial());
  for (int64_t batch : {0, 65}) {
    const auto error = catch_error<BatchSizeError>([&] { policy.bind(batch); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "a binding of batch size " + std::to_string(batch) +
                                            " for package '" + tutorial() +
                                            "', which accepts batch sizes 1..64 (models 'model' "
                                            "1..64, 'b1' 1)"));
  }
  PolicyOptions options;
  options.model_name = "b1";
  const Policy b1(tutorial(), options);
  const auto error = catch_error<BatchSizeError>([&] { b1.bind(2); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "batch size 2, which package '" + tutorial() +
                                          "' serves with a model that is not loaded (loaded: "
                                          "'b1', by PolicyOptions::model_name)"));
}

TEST(BindingErrors, AnUnknownKeyIsNamedWithTheKeysThereAre) {
  const Policy policy(test::package_path("nested.pt2"));
  Binding b = policy.bind(1);
  const auto input = catch_error<UnknownKeyError>([&] { b.input("robot.camera"); });
  ASSERT_TRUE(input);
  EXPECT_EQ(input->key(), "robot.camera");
  EXPECT_TRUE(Contains(input->what(), "unknown input key 'robot.camera'; the binding's inputs: "));
  EXPECT_TRUE(Contains(input->what(), "robot.joints"));
  const auto output = catch_error<UnknownKeyError>([&] { b.output("robot.joints"); });
  ASSERT_TRUE(output);
  EXPECT_TRUE(Contains(output->what(), "unknown output key 'robot.joints'; the binding's outputs: "));
  const auto misspelt = catch_error<UnknownKeyError>([&] { b.output("agents.actoin"); });
  ASSERT_TRUE(misspelt);
  EXPECT_TRUE(Contains(misspelt->what(), "unknown output key 'agents.actoin' (did you mean 'agents.action'?)"));
}

TEST(BindingErrors, AReallocatedTensorIsRefused) {
  const Policy policy(tutorial());
  for (int64_t batch : {1, 2}) {  // the allocation-free path, then the runner's
    SCOPED_TRACE("batch " + std::to_string(batch));
    Binding b = policy.bind(batch);
    b.input("observation").resize_({batch, 300});  // new memory
    const auto error = catch_error<Error>([&] { b.run(); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "observation"));
  }
  Binding b = policy.bind(1);
  b.output("scale").set_(at::zeros({1, 2}));
  const auto error = catch_error<Error>([&] { b.run(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(),
                       "output 'scale' of the binding no longer has the memory it was bound with"));
}

TEST(BindingErrors, ResetNeedsARecurrentPackageAndAValidMask) {
  const Policy policy(tutorial());
  Binding b = policy.bind(1);
  const auto error = catch_error<Error>([&] { b.reset(); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "is not recurrent"));
  EXPECT_TRUE(catch_error<Error>([&] { b.reset(at::ones({1}, at::kBool)); }));

  const Policy recurrent(test::package_path("recurrent.pt2"));
  Binding r = recurrent.bind(2);
  const auto dtype = catch_error<DtypeError>([&] { r.reset(at::ones({2})); });
  ASSERT_TRUE(dtype);
  EXPECT_TRUE(Contains(dtype->what(), "the reset mask has dtype float32, expected bool"));
  const auto shape = catch_error<ShapeError>([&] { r.reset(at::ones({3}, at::kBool)); });
  ASSERT_TRUE(shape);
  EXPECT_TRUE(Contains(shape->what(), "the reset mask has shape [3], expected [2] (the binding's "
                                      "batch)"));
}

// The model instance a binding creates for the allocation-free path is deleted when its set-up
// fails after creating it (here the manifest lists one output fewer than the model returns).
// Under ASan (make test-asan) LeakSanitizer fails this test if an instance, with its own copy of
// the weights, is lost.
TEST(BindingErrors, ASetUpFailingAfterTheInstanceIsCreatedLeavesNothing) {
  test::TempDir dir;
  const std::string path = dir.file("two_outputs.pt2");
  test::rewrite_manifest(tutorial(), path,
                         [](nlohmann::json& m) { m["outputs"].erase(m["outputs"].size() - 1); });
  PolicyOptions options;
  options.warmup_runs = 0;  // the warm-up run would find the mismatch at load
  const Policy policy(path, options);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const auto error = catch_error<ExecutionError>([&] { policy.bind(1); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "model 'b1' of package '" + path +
                                            "': the compiled model has 3 outputs, but the "
                                            "manifest lists 2 (binding of batch size 1)"));
  }
}

}  // namespace
}  // namespace tdaot

namespace tdaot {
namespace {

// The supervisor of the joint targets on the full runtime, given at bind (legged.pt2's contract
// has none): limits that clip every target, a hold after 2 rate-limited runs; the Session runs
// the same. Its rules are tested on their own in test_supervisor.cpp.
Supervisor tight_limits() {
  Supervisor s;
  s.low = {{-0.1}, false};
  s.high = {{0.1}, false};
  s.max_rate_limited_steps = 2;
  return s;
}

TEST(BindingSupervisor, TheBoundRunAndTheSessionClipAndHold) {
  const Policy policy(test::package_path("legged.pt2"));
  BindOptions options;
  options.supervisor.config = tight_limits();
  Binding b = policy.bind(1, options);  // without the envelope: nothing is rate limited
  ASSERT_TRUE(b.supervised());
  b.input("observation").normal_();
  b.run();
  EXPECT_LE(b.output("action").abs().max().item<float>(), 0.1f + 1e-6f);
  EXPECT_EQ(b.supervisor().mode, SupervisorMode::running);
  EXPECT_EQ(b.interventions().clipped, 1);
  EXPECT_EQ(b.interventions().nonfinite, 0);

  options.envelope = true;
  Binding guarded = policy.bind(1, options);
  Session session(policy, 1, options.supervisor);
  ASSERT_TRUE(session.supervised());
  for (int k = 0; k < 3; ++k) {  // the observation swings: the action moves more than max_delta
    guarded.input("observation").fill_(k % 2 == 0 ? 50.0 : -50.0);
    guarded.run();
    session.step_positional({guarded.input("observation").clone()});
  }
  EXPECT_EQ(guarded.supervisor().mode, SupervisorMode::held);
  EXPECT_EQ(session.supervisor().mode, SupervisorMode::held);
  EXPECT_GT(guarded.interventions().rate_limited, 1);
  EXPECT_EQ(guarded.interventions().fallback, session.interventions().fallback);
  guarded.reset();
  EXPECT_EQ(guarded.supervisor().mode, SupervisorMode::running);
  EXPECT_EQ(guarded.supervisor().steps, 0);
}

TEST(BindingSupervisor, RefusalsNameWhatIsWrong) {
  const Policy legged(test::package_path("legged.pt2"));
  Binding plain = legged.bind(1);
  EXPECT_FALSE(plain.supervised());
  const auto none = catch_error<InvalidArgumentError>([&] { plain.supervisor(); });
  ASSERT_TRUE(none);
  EXPECT_TRUE(Contains(none->what(), "this binding of package '" + test::package_path("legged.pt2") +
                                         "' has no supervisor: its contract has none"));
  BindOptions options;
  options.supervisor.config = tight_limits();
  Binding b = legged.bind(1, options);
  const auto row = catch_error<InvalidArgumentError>([&] { b.supervisor(1); });
  ASSERT_TRUE(row);
  EXPECT_TRUE(Contains(row->what(), "supervisor row 1 is outside the binding's batch of 1 rows"));
  options.supervisor.config->fallback = "freeze";
  const auto fallback = catch_error<ContractError>([&] { legged.bind(1, options); });
  ASSERT_TRUE(fallback);
  EXPECT_EQ(std::string(fallback->what()),
            "contract supervisor: field 'fallback': unknown fallback 'freeze' (known: hold damp)");
  options.supervisor.config = tight_limits();
  options.supervisor.config->low = {{-0.1, 0.1}, true};
  const auto length = catch_error<ContractError>([&] { Session(legged, 1, options.supervisor); });
  ASSERT_TRUE(length);
  EXPECT_TRUE(Contains(length->what(), "field 'low': has 2 values, expected 12 (one per joint of 'action')"));
  options.supervisor.config = tight_limits();
  options.supervisor.config->blend_seconds = 1.0;
  const auto soft = catch_error<ContractError>([&] { legged.bind(1, options); });
  ASSERT_TRUE(soft);
  EXPECT_TRUE(Contains(soft->what(), "field 'blend_seconds': a soft start (blend_seconds 1) starts from the "
                                     "measured joint positions, but no input signal has a joint_pos_rel term"));
  const Policy tutorial_policy(tutorial());
  options.supervisor.config = Supervisor{};
  const auto no_contract = catch_error<ContractError>([&] { tutorial_policy.bind(1, options); });
  ASSERT_TRUE(no_contract);
  EXPECT_TRUE(Contains(no_contract->what(), "which has no contract"));
  // A binding with neither envelope nor supervisor has nothing to reset; with a supervisor it has.
  EXPECT_TRUE(catch_error<InvalidArgumentError>([&] { plain.reset(); }));
  b.reset();
}

}  // namespace
}  // namespace tdaot
