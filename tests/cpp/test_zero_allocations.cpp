// The allocation-free bound run: every malloc-family call in the process is counted
// (malloc_counter.h) over N and 2N calls of Binding::run after warm-up, and the two counts must
// be equal: nothing is allocated per call in steady state, for every test package at batch 1
// (the recurrent one as a bound session step) and at a second specialised size. (custom_op.pt2
// is left out: a model calling a custom operator runs through AOTInductor's runner.) Policy's
// run_positional is counted beside it, and both are timed, for the README (printed, not asserted).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/run/supervisor.h"
#include "runtime/envelope.h"
#include "malloc_counter.h"
#include "tdaot/torch/binding.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

constexpr int kCalls = 2000;

struct Count {
  uint64_t allocations = 0;
  uint64_t frees = 0;
};

Count count_over(int calls, const std::function<void()>& call) {
  const uint64_t allocations = test::malloc_calls();
  const uint64_t frees = test::free_calls();
  for (int i = 0; i < calls; ++i) call();
  return {test::malloc_calls() - allocations, test::free_calls() - frees};
}

double p50_us(const std::function<void()>& call) {
  std::vector<double> us(kCalls);
  for (double& sample : us) {
    const auto start = std::chrono::steady_clock::now();
    call();
    sample = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                 .count();
  }
  std::nth_element(us.begin(), us.begin() + kCalls / 2, us.end());
  return us[kCalls / 2];
}

// Allocations of N and 2N calls after warm-up, printed with the p50.
std::pair<Count, Count> measure(const std::string& what, const std::function<void()>& call) {
  for (int i = 0; i < 200; ++i) call();  // thread_local arrays, lazy caches, first touch
  const Count once = count_over(kCalls, call);
  const Count twice = count_over(2 * kCalls, call);
  const double p50 = p50_us(call);
  std::printf("[allocations] %-40s N=%d: %llu mallocs %llu frees; 2N: %llu mallocs %llu frees; "
              "%.2f allocations per call; p50 %.2f us\n",
              what.c_str(), kCalls, static_cast<unsigned long long>(once.allocations),
              static_cast<unsigned long long>(once.frees),
              static_cast<unsigned long long>(twice.allocations),
              static_cast<unsigned long long>(twice.frees),
              static_cast<double>(twice.allocations - once.allocations) / kCalls, p50);
  return {once, twice};
}

struct Case {
  std::string package;
  int64_t batch;
};

class ZeroAllocations : public ::testing::TestWithParam<Case> {};

TEST_P(ZeroAllocations, BoundRunAllocatesNothingPerCall) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const Case& c = GetParam();
  const Policy policy(test::package_path(c.package));
  Binding b = policy.bind(c.batch);
  ASSERT_TRUE(b.allocation_free()) << c.package << " has no allocation-free model for batch "
                                   << c.batch << " (runs on '" << b.model() << "')";
  for (const at::Tensor& input : b.inputs()) {
    if (input.is_floating_point()) input.normal_();
  }
  const std::string name = c.package + " batch " + std::to_string(c.batch);
  const auto [once, twice] = measure(name + " Binding::run", [&] { b.run(); });
  EXPECT_EQ(twice.allocations, once.allocations);
  EXPECT_EQ(twice.frees, once.frees);

  const std::vector<at::Tensor> inputs(b.inputs().begin(), b.inputs().end());
  measure(name + " Policy::run_positional", [&] { policy.run_positional(inputs); });
}

INSTANTIATE_TEST_SUITE_P(Packages, ZeroAllocations,
                         ::testing::Values(Case{"tutorial.pt2", 1}, Case{"nested.pt2", 1},
                                           Case{"recurrent.pt2", 1},
                                           Case{"tutorial_b14.pt2", 1},
                                           Case{"tutorial_b14.pt2", 4},
                                           Case{"legged.pt2", 1}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string name = info.param.package.substr(
                               0, info.param.package.find('.'));
                           return name + "_batch" + std::to_string(info.param.batch);
                         });

// A Session's safety envelope (envelope.h) on the legged package's outputs allocates nothing per
// step: finite steps that move every action by more than max_delta (rate limited) alternate with
// steps holding a NaN input (the previous outputs copied back). A whole Session step is printed
// beside Policy::run_positional: the difference is the session's own cost.
TEST(ZeroAllocationsEnvelope, TheGuardAllocatesNothingPerStep) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const Policy policy(test::package_path("legged.pt2"));
  detail::Envelope envelope(policy.manifest(), 1);
  std::vector<at::Tensor> inputs{at::zeros({1, 48})};
  std::vector<at::Tensor> outputs{at::zeros({1, 12})};
  float* observation = inputs[0].mutable_data_ptr<float>();
  float* action = outputs[0].mutable_data_ptr<float>();
  int64_t step = 0;
  const auto guard = [&] {
    ++step;
    observation[0] = step % 3 == 0 ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    std::fill(action, action + 12, step % 2 == 0 ? 1.0f : -1.0f);
    envelope.guard(inputs, outputs);
  };
  const auto [once, twice] = measure("Envelope::guard legged batch 1", guard);
  EXPECT_EQ(twice.allocations, once.allocations);
  EXPECT_EQ(twice.frees, once.frees);
  EXPECT_GT(envelope.interventions().nonfinite, 0);
  EXPECT_GT(envelope.interventions().rate_limited, 0);

  Session session(policy, 1);
  const std::vector<at::Tensor> given{at::randn({1, 48})};
  measure("legged batch 1 Session::step_positional", [&] { session.step_positional(given); });
  measure("legged batch 1 Policy::run_positional", [&] { policy.run_positional(given); });
}

// The supervisor of the joint targets (core/run/supervisor.h) allocates nothing per step on
// every path it takes: the legged package bound with the envelope and a supervisor given at bind
// (limits that clip, a hold after 3 rate-limited steps or on a NaN), and the core itself through
// a soft start on a contract of observation terms made in code (legged.pt2 has none), each
// cycled through blending, running, held and damped by resets.
Manifest terms_manifest() {
  Manifest m;
  m.inputs = {{"observation", DType::Float32, {5}}};
  m.outputs = {{"action", DType::Float32, {2}}};
  Contract c;
  c.control_dt = 0.02;
  Signal obs;
  Term pos, vel;
  pos.name = "joint_pos_rel";
  vel.name = "joint_vel_rel";
  pos.size = vel.size = 2;
  obs.terms = {pos, vel};
  obs.names = {"joint_pos_rel.a", "joint_pos_rel.b", "joint_vel_rel.a", "joint_vel_rel.b", "x"};
  c.inputs["observation"] = obs;
  Signal action;
  action.names = {"a", "b"};
  action.stiffness = {{10.0}, false};
  action.damping = {{1.0}, false};
  c.outputs["action"] = action;
  m.contract = c;
  return m;
}

TEST(ZeroAllocationsSupervisor, TheSupervisedStepAllocatesNothing) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const Policy policy(test::package_path("legged.pt2"));
  BindOptions options;
  options.envelope = true;
  Supervisor config;
  config.low = {{-0.5}, false};
  config.high = {{0.5}, false};
  config.margin = 0.05;
  config.max_rate_limited_steps = 3;
  options.supervisor.config = config;
  for (int64_t record : {0, 64}) {  // and the flight recorder (BindOptions::record) recording it
    options.record = record;
    Binding b = policy.bind(1, options);
    ASSERT_TRUE(b.supervised());
    float* observation = b.input("observation").mutable_data_ptr<float>();
    int64_t step = 0;
    const auto run = [&] {
      ++step;
      const float value = step % 7 == 0 ? std::numeric_limits<float>::quiet_NaN()
                                        : (step % 2 == 0 ? 30.0f : -30.0f);
      std::fill(observation, observation + 48, value);
      b.run();
      (void)b.supervisor().gain_scale;
    };
    const auto [once, twice] = measure(std::string("legged batch 1 supervised") + (record ? " recorded" : "") +
                                           " Binding::run",
                                       run);
    EXPECT_EQ(twice.allocations, once.allocations);
    EXPECT_EQ(twice.frees, once.frees);
    EXPECT_GT(b.interventions().clipped, 0);
    EXPECT_GT(b.interventions().fallback, 0);
  }

  const Manifest m = terms_manifest();
  Supervisor soft;
  soft.blend_seconds = 0.1;
  soft.blend_max_velocity = {{2.0}, false};
  soft.start_gain_fraction = 0.2;
  soft.max_velocity = {{5.0}, false};
  soft.max_torque = {{5.0}, false};  // 0.5 rad from the measured position: the 0.8 targets capped
  soft.fallback = "damp";
  soft.low = {{-1.0}, false};
  soft.high = {{1.0}, false};
  detail::TargetSupervisor core(m, soft, 2);
  std::vector<float> obs(10, 0.0f), act(4, 0.0f);
  const std::vector<const void*> in{obs.data()};
  const std::vector<void*> out{act.data()};
  const std::vector<bool> second{false, true};
  int64_t k = 0;
  const auto supervise = [&] {
    ++k;
    obs[2] = k % 9 == 0 ? 6.0f : 0.0f;  // row 0 over its velocity cap now and then: damped
    std::fill(act.begin(), act.end(), k % 2 == 0 ? 0.8f : -0.8f);
    core.observe(in, out);
    core.apply(in, out, nullptr);
    if (k % 12 == 0) core.reset();
    if (k % 5 == 0) core.reset(second);
  };
  const auto [core_once, core_twice] = measure("TargetSupervisor observe + apply + reset", supervise);
  EXPECT_EQ(core_twice.allocations, core_once.allocations);
  EXPECT_EQ(core_twice.frees, core_once.frees);
  Interventions counts;
  core.add_counts(counts);
  EXPECT_GT(counts.blended, 0);
  EXPECT_GT(counts.fallback, 0);
}

// The counter itself sees what it should: a tensor allocation and its free.
TEST(MallocCounter, CountsAllocationsFromEveryLibrary) {
  if (!test::malloc_counting()) GTEST_SKIP() << "malloc is not counted under a sanitizer";
  const Count count = count_over(10, [] { at::empty({1024}); });
  EXPECT_GE(count.allocations, 10u);
  EXPECT_GE(count.frees, 10u);
}

}  // namespace
}  // namespace tdaot
