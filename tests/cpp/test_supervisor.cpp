// The supervisor of the joint targets (tdaot/contract.h Supervisor, core/run/supervisor.h), its
// one implementation over raw buffers as both runtimes run it, on a contract made in code (no
// package, no libtorch: linked to tdaot::core): the soft start from the measured pose with its
// velocity cap and gain ramp, the limits and margin, each out-of-domain check and both
// fallbacks until a reset, rows reset on their own, and every refusal by field.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/run/buffer_envelope.h"
#include "core/run/supervisor.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Term term(const std::string& name, int64_t size) {
  Term t;
  t.name = name;
  t.size = size;
  return t;
}

// observation = projected_gravity 3, joint_pos_rel 2, joint_vel_rel 2 (7); action = joints a,
// b: target = raw + (0.1, -0.1), kp 10, kd 1, max_delta 1; control_dt 0.1.
Manifest manifest() {
  Manifest m;
  m.inputs = {{"observation", DType::Float32, {7}}};
  m.outputs = {{"action", DType::Float32, {2}}};
  Contract c;
  c.control_dt = 0.1;
  Signal obs;
  obs.terms = {term("projected_gravity", 3), term("joint_pos_rel", 2), term("joint_vel_rel", 2)};
  obs.names = {"projected_gravity.x", "projected_gravity.y", "projected_gravity.z",
               "joint_pos_rel.a",     "joint_pos_rel.b",     "joint_vel_rel.a",
               "joint_vel_rel.b"};
  c.inputs["observation"] = obs;
  Signal action;
  action.names = {"a", "b"};
  action.offset = {{0.1, -0.1}, true};
  action.stiffness = {{10.0}, false};
  action.damping = {{1.0}, false};
  action.max_delta = {{1.0}, false};
  c.outputs["action"] = action;
  m.contract = c;
  return m;
}

// A batch of rows, each: upright, joints at q (relative to the default: q - offset), dq.
struct Step {
  explicit Step(int64_t batch) : obs(static_cast<size_t>(batch * 7), 0.0f), act(static_cast<size_t>(batch * 2), 0.0f) {
    for (int64_t r = 0; r < batch; ++r) obs[static_cast<size_t>(r * 7 + 2)] = -1.0f;
  }
  void measured(int64_t row, double qa, double qb, double dqa = 0, double dqb = 0) {
    float* o = &obs[static_cast<size_t>(row * 7)];
    o[3] = static_cast<float>(qa - 0.1);
    o[4] = static_cast<float>(qb + 0.1);
    o[5] = static_cast<float>(dqa);
    o[6] = static_cast<float>(dqb);
  }
  void policy(int64_t row, double a, double b) {
    act[static_cast<size_t>(row * 2)] = static_cast<float>(a);
    act[static_cast<size_t>(row * 2 + 1)] = static_cast<float>(b);
  }
  double target(int64_t row, int64_t j) const { return act[static_cast<size_t>(row * 2 + j)]; }
  // The supervisor around an optional envelope, as the bindings run them.
  void run(detail::TargetSupervisor& s, detail::BufferEnvelope* envelope = nullptr) {
    const std::vector<const void*> in{obs.data()};
    const std::vector<void*> out{act.data()};
    s.observe(in, out);
    if (envelope != nullptr) envelope->guard(in, out);
    s.apply(in, out, envelope != nullptr ? &envelope->limited_rows() : nullptr);
  }
  std::vector<float> obs;
  std::vector<float> act;
};

TEST(Supervisor, SoftStartBlendsFromTheMeasuredPoseAndRampsTheGains) {
  const Manifest m = manifest();
  Supervisor config;
  config.blend_seconds = 0.4;  // 4 steps
  config.start_gain_fraction = 0.2;
  detail::TargetSupervisor s(m, config, 1);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::blending);
  EXPECT_DOUBLE_EQ(s.state(0).gain_scale, 0.2);
  Step step(1);
  const double expected_gain[] = {0.4, 0.6, 0.8, 1.0};
  for (int k = 1; k <= 4; ++k) {
    step.measured(0, -0.3, 0.3);  // the robot stays crouched
    step.policy(0, 0.5, -0.5);
    step.run(s);
    const double alpha = k / 4.0;
    EXPECT_NEAR(step.target(0, 0), -0.3 + alpha * 0.8, 1e-6) << k;
    EXPECT_NEAR(step.target(0, 1), 0.3 - alpha * 0.8, 1e-6) << k;
    EXPECT_NEAR(s.state(0).gain_scale, expected_gain[k - 1], 1e-12) << k;
    EXPECT_EQ(s.state(0).steps, k);
  }
  EXPECT_EQ(s.state(0).mode, SupervisorMode::running);
  EXPECT_DOUBLE_EQ(s.state(0).blend, 1.0);
  Interventions counts;
  s.add_counts(counts);
  EXPECT_EQ(counts.blended, 4);
  // Running: the policy's targets as they are.
  step.policy(0, 0.7, -0.7);
  step.run(s);
  EXPECT_FLOAT_EQ(step.act[0], 0.7f);
  // A reset starts the soft start again, from wherever the robot is now.
  s.reset();
  step.measured(0, 0.0, 0.0);
  step.policy(0, 0.4, 0.4);
  step.run(s);
  EXPECT_NEAR(step.target(0, 0), 0.1, 1e-6);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::blending);
}

TEST(Supervisor, TheBlendVelocityCapHoldsTheSoftStartUntilTheTargetIsReached) {
  const Manifest m = manifest();
  Supervisor config;
  config.blend_seconds = 0.1;  // one step, but at most 1 rad/s: 0.1 rad per step
  config.blend_max_velocity = {{1.0}, false};
  detail::TargetSupervisor s(m, config, 1);
  Step step(1);
  step.measured(0, 0.0, 0.0);
  for (int k = 1; k <= 3; ++k) {
    step.policy(0, 0.25, 0.05);
    step.run(s);
    EXPECT_NEAR(step.target(0, 0), std::min(0.25, 0.1 * k), 1e-6) << k;
    EXPECT_NEAR(step.target(0, 1), 0.05, 1e-6) << k;
    EXPECT_EQ(s.state(0).mode, k < 3 ? SupervisorMode::blending : SupervisorMode::running) << k;
  }
}

TEST(Supervisor, TargetsAreClippedToTheLimitsWithTheMargin) {
  const Manifest m = manifest();
  Supervisor config;
  config.low = {{-1.0, -0.5}, true};
  config.high = {{1.0}, false};
  config.margin = 0.1;
  detail::TargetSupervisor s(m, config, 1);
  Step step(1);
  step.policy(0, 5.0, -5.0);
  step.run(s);
  EXPECT_NEAR(step.target(0, 0), 0.9, 1e-6);
  EXPECT_NEAR(step.target(0, 1), -0.4, 1e-6);
  Interventions counts;
  s.add_counts(counts);
  EXPECT_EQ(counts.clipped, 1);
}

TEST(Supervisor, TheTorqueCapKeepsEachTargetNearTheMeasuredPosition) {
  const Manifest m = manifest();
  Supervisor config;
  config.max_torque = {{2.0, 0.5}, true};  // kp 10: 0.2 and 0.05 rad from the measured position
  config.low = {{-1.0}, false};
  detail::TargetSupervisor s(m, config, 1);
  Step step(1);
  step.measured(0, 0.3, -0.3);
  step.policy(0, 0.9, -0.32);  // a: 0.6 rad away, held to 0.5; b: within its 0.05
  step.run(s);
  EXPECT_NEAR(step.target(0, 0), 0.5, 1e-6);
  EXPECT_NEAR(step.target(0, 1), -0.32, 1e-6);
  step.measured(0, -0.95, 0.0);  // the joint limit still wins over the cap
  step.policy(0, -2.0, 0.0);
  step.run(s);
  EXPECT_NEAR(step.target(0, 0), -1.0, 1e-6);
  Interventions counts;
  s.add_counts(counts);
  EXPECT_EQ(counts.clipped, 2);
}

TEST(Supervisor, AJointVelocityOverItsCapDampsUntilReset) {
  const Manifest m = manifest();
  Supervisor config;
  config.max_velocity = {{5.0, 8.0}, true};
  config.fallback = "damp";
  detail::TargetSupervisor s(m, config, 1);
  Step step(1);
  step.measured(0, 0.2, 0.1, 4.9, -7.9);
  step.policy(0, 0.3, 0.3);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::running);
  step.measured(0, 0.25, 0.05, 1.0, -8.5);  // b over its cap
  step.policy(0, 0.9, 0.9);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::damped);
  EXPECT_DOUBLE_EQ(s.state(0).gain_scale, 0.0);
  EXPECT_DOUBLE_EQ(s.state(0).damping_scale, 1.0);
  EXPECT_NEAR(step.target(0, 0), 0.25, 1e-6);  // the measured positions
  EXPECT_NEAR(step.target(0, 1), 0.05, 1e-6);
  // Back in domain, still damped: only a reset leaves the fallback.
  step.measured(0, 0.3, 0.0, 0.0, 0.0);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::damped);
  EXPECT_NEAR(step.target(0, 0), 0.3, 1e-6);
  s.reset();
  step.policy(0, 0.9, 0.9);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::running);
  EXPECT_NEAR(step.target(0, 0), 0.9, 1e-6);
  Interventions counts;
  s.add_counts(counts);
  EXPECT_EQ(counts.fallback, 2);
}

TEST(Supervisor, ATiltOverTheCapHoldsTheLastSafeTargets) {
  const Manifest m = manifest();
  Supervisor config;
  config.max_tilt = 0.5;
  detail::TargetSupervisor s(m, config, 1);
  Step step(1);
  step.policy(0, 0.3, -0.3);
  step.run(s);
  // Tilted 0.6 rad about x: gravity in the base frame (0, -sin, -cos).
  step.obs[1] = static_cast<float>(-std::sin(0.6));
  step.obs[2] = static_cast<float>(-std::cos(0.6));
  step.policy(0, 2.0, 2.0);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::held);
  EXPECT_DOUBLE_EQ(s.state(0).gain_scale, 1.0);
  EXPECT_NEAR(step.target(0, 0), 0.3, 1e-6);
  EXPECT_NEAR(step.target(0, 1), -0.3, 1e-6);
}

TEST(Supervisor, ANonFiniteInputOrTargetNeverReachesTheMotors) {
  const Manifest m = manifest();
  Supervisor config;
  config.fallback = "damp";
  for (const bool in_output : {false, true}) {
    detail::TargetSupervisor s(m, config, 1);
    Step step(1);
    step.measured(0, 0.2, 0.1);
    step.policy(0, 0.3, 0.3);
    step.run(s);
    if (in_output) {
      step.policy(0, kNaN, 0.3);
    } else {
      step.measured(0, kNaN, 0.15);  // the position sensor of a fails
      step.policy(0, 0.3, 0.3);
    }
    step.run(s);
    EXPECT_EQ(s.state(0).mode, SupervisorMode::damped) << in_output;
    EXPECT_TRUE(std::isfinite(step.target(0, 0))) << in_output;
    // a: its measured position when finite, else the last safe target.
    EXPECT_NEAR(step.target(0, 0), in_output ? 0.2 : 0.3, 1e-6) << in_output;
    EXPECT_NEAR(step.target(0, 1), in_output ? 0.1 : 0.15, 1e-6) << in_output;
  }
}

TEST(Supervisor, ConsecutiveRateLimitedStepsHold) {
  const Manifest m = manifest();
  Supervisor config;
  config.max_rate_limited_steps = 3;
  detail::TargetSupervisor s(m, config, 1);
  detail::BufferEnvelope envelope(m, 1);
  Step step(1);
  step.policy(0, 0.0, 0.0);
  step.run(s, &envelope);
  for (int k = 1; k <= 3; ++k) {
    step.policy(0, 10.0 * k, 0.0);  // each step asks for far more than max_delta 1
    step.run(s, &envelope);
    EXPECT_EQ(s.state(0).mode, k < 3 ? SupervisorMode::running : SupervisorMode::held) << k;
  }
  EXPECT_NEAR(step.target(0, 0), 2.0, 1e-6);  // the last safe target: two limited steps of 1
  EXPECT_EQ(envelope.interventions().rate_limited, 3);
}

TEST(Supervisor, RowsAreSupervisedAndResetOnTheirOwn) {
  const Manifest m = manifest();
  Supervisor config;
  config.max_velocity = {{1.0}, false};
  detail::TargetSupervisor s(m, config, 2);
  Step step(2);
  step.measured(1, 0.0, 0.0, 3.0, 0.0);
  step.policy(0, 0.5, 0.5);
  step.policy(1, 0.5, 0.5);
  step.run(s);
  EXPECT_EQ(s.state(0).mode, SupervisorMode::running);
  EXPECT_EQ(s.state(1).mode, SupervisorMode::held);
  EXPECT_NEAR(step.target(0, 0), 0.5, 1e-6);
  EXPECT_NEAR(step.target(1, 0), 0.1, 1e-6);  // before any safe target: the rest value
  s.reset(std::vector<bool>{false, true});
  step.measured(1, 0.0, 0.0);
  step.run(s);
  EXPECT_EQ(s.state(1).mode, SupervisorMode::running);
  EXPECT_EQ(s.state(1).steps, 1);
  EXPECT_EQ(s.state(0).steps, 2);
}

TEST(Supervisor, TheContractDescribesIt) {
  Contract contract = *manifest().contract;
  Supervisor s;
  s.blend_seconds = 1.0;
  s.start_gain_fraction = 0.5;
  s.low = {{-1.0, -0.5}, true};
  s.high = {{1.0}, false};
  s.max_velocity = {{20.0}, false};
  s.max_torque = {{100.0}, false};
  s.fallback = "damp";
  contract.supervisor = s;
  EXPECT_NE(contract.describe().find("  supervisor soft start 1 s from gain 0.5, low [-1, -0.5], high 1, "
                                     "max_velocity 20 rad/s, max_torque 100 N m, fallback damp\n"),
            std::string::npos)
      << contract.describe();
}

TEST(Supervisor, ModesHaveTheirNames) {
  EXPECT_STREQ(supervisor_mode_name(SupervisorMode::running), "running");
  EXPECT_STREQ(supervisor_mode_name(SupervisorMode::blending), "blending");
  EXPECT_STREQ(supervisor_mode_name(SupervisorMode::held), "held");
  EXPECT_STREQ(supervisor_mode_name(SupervisorMode::damped), "damped");
}

// Contract::check_supervisor (a bind-time override; the parser runs the same rules, tested by
// the manifest corpus): each refusal names the field and what is wrong.
void expect_refused(const Contract& contract, const Supervisor& config, const std::string& message) {
  try {
    contract.check_supervisor(config);
    ADD_FAILURE() << "accepted; expected: " << message;
  } catch (const ContractError& e) {
    EXPECT_EQ(std::string(e.what()), message);
    EXPECT_EQ(e.key(), "supervisor");
  }
}

TEST(Supervisor, RefusalsNameTheField) {
  const Contract contract = *manifest().contract;
  Supervisor s;
  s.fallback = "freeze";
  expect_refused(contract, s,
                 "contract supervisor: field 'fallback': unknown fallback 'freeze' (known: hold damp)");
  s = {};
  s.low = {{-1.0, -1.0, -1.0}, true};
  expect_refused(contract, s,
                 "contract supervisor: field 'low': has 3 values, expected 2 (one per joint of "
                 "'action') or one number");
  s = {};
  s.output = "torque";
  expect_refused(contract, s,
                 "contract supervisor: field 'output': 'torque' is not one of the contract's "
                 "output signals (it has: action)");
  s = {};
  s.max_velocity = {{kNaN}, false};
  expect_refused(contract, s, "contract supervisor: field 'max_velocity': expected finite numbers, got nan");
  Contract without = contract;
  without.inputs["observation"].terms.erase(without.inputs["observation"].terms.begin() + 1);
  s = {};
  s.blend_seconds = 1.0;
  expect_refused(without, s,
                 "contract supervisor: field 'blend_seconds': a soft start (blend_seconds 1) starts "
                 "from the measured joint positions, but no input signal has a joint_pos_rel term "
                 "of 'action'");
  s = {};
  s.max_torque = {{0.0}, false};
  expect_refused(contract, s, "contract supervisor: field 'max_torque': max_torque 0 for 'a' is not > 0");
  s = {};
  s.max_torque = {{100.0}, false};
  expect_refused(without, s,
                 "contract supervisor: field 'max_torque': bounds each target's distance from the "
                 "measured joint position, but no input signal has a joint_pos_rel term of 'action'");
  Contract stiffless = contract;
  stiffless.outputs["action"].stiffness = {};
  expect_refused(stiffless, s,
                 "contract supervisor: field 'max_torque': bounds the torque of the stiffness of "
                 "'action', but the signal has no stiffness gains");
  Contract undamped = contract;
  undamped.outputs["action"].damping = {};
  s = {};
  s.fallback = "damp";
  expect_refused(undamped, s,
                 "contract supervisor: field 'fallback': fallback 'damp' applies the damping of "
                 "'action', but the signal has no damping gains");
  s = {};
  s.max_rate_limited_steps = -1;
  expect_refused(contract, s,
                 "contract supervisor: field 'max_rate_limited_steps': expected steps >= 1 (0: "
                 "unchecked), got -1");
}

}  // namespace
}  // namespace tdaot
