// tdaot/terms.h (tdaot::core, so tdaot::lite with no libtorch): the observation terms computed
// from a RobotState (frames, units, element order, history, last_action), the slots a package
// with carried terms keeps itself, the joint output and its PD torques, and the refusals. The
// manifest and contract are made in code: no package is loaded.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/service/terms.h"

namespace {

using tdaot::Contract;
using tdaot::DType;
using tdaot::Manifest;
using tdaot::Signal;
using tdaot::Term;
namespace terms = tdaot::terms;

Term term(const std::string& name, int64_t size, int64_t history = 1) {
  Term t;
  t.name = name;
  t.size = size;
  t.history = history;
  if (name == "gait_phase") t.params["period"] = 0.8;
  return t;
}

// observation = base_lin_vel 3, projected_gravity 3, joint_pos_rel 2 x 2 steps, last_action 2,
// gait_phase 2 (14); action = joints a, b: target = 0.5 * raw + (0.1, -0.2), kp (10, 20), kd 1.
Contract contract() {
  Contract c;
  c.control_dt = 0.02;
  Signal obs;
  obs.terms = {term("base_lin_vel", 3), term("projected_gravity", 3), term("joint_pos_rel", 2, 2),
               term("last_action", 2), term("gait_phase", 2)};
  for (const char* n : {"base_lin_vel.x", "base_lin_vel.y", "base_lin_vel.z", "projected_gravity.x",
                        "projected_gravity.y", "projected_gravity.z", "joint_pos_rel.a@-1", "joint_pos_rel.b@-1",
                        "joint_pos_rel.a", "joint_pos_rel.b", "last_action.a", "last_action.b", "gait_phase.sin",
                        "gait_phase.cos"}) {
    obs.names.push_back(n);
  }
  c.inputs["observation"] = obs;
  Signal action;
  action.names = {"a", "b"};
  action.scale = {{0.5}, false};
  action.offset = {{0.1, -0.2}, true};
  action.stiffness = {{10.0, 20.0}, true};
  action.damping = {{1.0}, false};
  c.outputs["action"] = action;
  return c;
}

Manifest manifest(bool carried) {
  Manifest m;
  m.inputs = {{"observation", DType::Float32, {14}}};
  m.outputs = {{"action", DType::Float32, {2}}};
  if (carried) {
    tdaot::Recurrent recurrent;
    for (const std::string state : {"tdaot.last_action.observation.last_action", "tdaot.history.observation.joint_pos_rel"}) {
      recurrent.state.push_back({state, "next." + state});
      m.inputs.push_back({state, DType::Float32, {2}});
      m.outputs.push_back({"next." + state, DType::Float32, {2}});
    }
    m.recurrent = recurrent;
  }
  return m;
}

terms::RobotState state(double yaw, double qa, double qb, double t) {
  terms::RobotState s;
  s.time = t;
  s.base_quat = {std::cos(yaw / 2), 0.0, 0.0, std::sin(yaw / 2)};  // yaw about z
  s.base_lin_vel = {1.0, 0.0, 0.0};                                  // world frame
  s.joint_pos = {qa, qb};
  s.joint_vel = {0.0, 0.0};
  return s;
}

TEST(Terms, EachTermIsComputedInItsFrameUnitsAndOrderWithHistoryOldestFirst) {
  const Contract c = contract();
  const terms::JointOutput joints = terms::joint_output(c);
  EXPECT_EQ(joints.key, "action");
  terms::Observations obs(manifest(false), c, joints);
  ASSERT_EQ(obs.size(), 14u);
  EXPECT_TRUE(obs.carried_action().empty());
  const double raw0[2] = {0.0, 0.0};
  obs.compute(state(M_PI / 2, 0.6, 0.3, 0.2), raw0);
  const std::vector<double>& v = obs.inputs()[0].values;
  // Facing +y, moving along world +x: the base sees the motion to its right (-y).
  EXPECT_NEAR(v[0], 0.0, 1e-12);
  EXPECT_NEAR(v[1], -1.0, 1e-12);
  EXPECT_NEAR(v[5], -1.0, 1e-12);  // upright: gravity straight down in the base frame
  // joint_pos_rel = q - offset; its older step is the first value after the start.
  EXPECT_NEAR(v[6], 0.5, 1e-12);
  EXPECT_NEAR(v[7], 0.5, 1e-12);
  EXPECT_NEAR(v[8], 0.5, 1e-12);
  EXPECT_NEAR(v[9], 0.5, 1e-12);
  EXPECT_NEAR(v[12], std::sin(2 * M_PI * 0.25), 1e-12);  // 0.2 s of a 0.8 s period
  EXPECT_NEAR(v[13], std::cos(2 * M_PI * 0.25), 1e-12);
  const double raw1[2] = {0.25, -0.75};
  obs.compute(state(0.0, 0.1, -0.2, 0.22), raw1);
  EXPECT_NEAR(v[0], 1.0, 1e-12);
  EXPECT_NEAR(v[6], 0.5, 1e-12);  // the older step: the previous one
  EXPECT_NEAR(v[8], 0.0, 1e-12);  // the newest
  EXPECT_NEAR(v[9], 0.0, 1e-12);
  EXPECT_EQ(v[10], 0.25);
  EXPECT_EQ(v[11], -0.75);
  // Written whole into a float32 input for a package built with caller_terms=True.
  std::vector<float> input(14, -9.0f);
  obs.write(0, input.data());
  EXPECT_EQ(input[10], 0.25f);
  EXPECT_EQ(input[6], 0.5f);
}

TEST(Terms, APackageCarryingLastActionAndHistoryKeepsThoseSlotsItself) {
  const Contract c = contract();
  terms::Observations obs(manifest(true), c, terms::joint_output(c));
  EXPECT_EQ(obs.carried_action(), "next.tdaot.last_action.observation.last_action");
  const double raw[2] = {0.25, -0.75};
  obs.compute(state(0.0, 0.6, 0.3, 0.0), raw);
  std::vector<float> input(14, -9.0f);
  obs.write(0, input.data());
  EXPECT_EQ(input[6], -9.0f);  // older history step: the package's
  EXPECT_EQ(input[7], -9.0f);
  EXPECT_FLOAT_EQ(input[8], 0.5f);  // the newest: the caller's
  EXPECT_EQ(input[10], -9.0f);      // last_action: the package's
  EXPECT_EQ(input[11], -9.0f);
  EXPECT_EQ(obs.inputs()[0].values[10], 0.25);  // but recorded as the policy sees it
}

TEST(Terms, TheJointOutputCarriesItsMapAndGainsAndGivesPdTorques) {
  const terms::JointOutput joints = terms::joint_output(contract());
  const double target[2] = {1.0, 0.0}, q[2] = {0.5, 0.1}, dq[2] = {2.0, -1.0};
  double tau[2];
  joints.pd_torques(target, q, dq, tau);
  EXPECT_DOUBLE_EQ(tau[0], 10.0 * 0.5 - 1.0 * 2.0);
  EXPECT_DOUBLE_EQ(tau[1], 20.0 * -0.1 + 1.0);
  // Scaled as a supervisor says (a soft start's ramp, a damp fallback's stiffness 0).
  joints.pd_torques(target, q, dq, tau, 0.5, 1.0);
  EXPECT_DOUBLE_EQ(tau[0], 0.5 * 10.0 * 0.5 - 1.0 * 2.0);
  joints.pd_torques(target, q, dq, tau, 0.0, 1.0);
  EXPECT_DOUBLE_EQ(tau[1], 1.0);
  EXPECT_DOUBLE_EQ(joints.raw_from_target(1, -0.2 + 0.5 * 3.0), 3.0);
  EXPECT_EQ(joints.rest, (std::vector<double>{0.1, -0.2}));
}

TEST(Terms, AContractWithoutGainsOrWithAPlainInputIsRefusedNamingTheKey) {
  Contract c = contract();
  c.outputs["action"].stiffness = {};
  try {
    terms::joint_output(c);
    FAIL() << "no gains accepted";
  } catch (const tdaot::ContractError& e) {
    EXPECT_EQ(e.key(), "action");
    EXPECT_NE(std::string(e.what()).find("contract output 'action' carries no PD gains (stiffness missing)"),
              std::string::npos);
  }
  EXPECT_NO_THROW(terms::joint_output(c, /*require_gains=*/false));
  Manifest m = manifest(false);
  m.inputs.push_back({"camera", DType::Float32, {4}});
  try {
    terms::Observations obs(m, contract(), terms::joint_output(contract()));
    FAIL() << "an input without terms accepted";
  } catch (const tdaot::ContractError& e) {
    EXPECT_EQ(e.key(), "camera");
    EXPECT_NE(std::string(e.what()).find("input 'camera' is not in the contract"), std::string::npos);
  }
}

}  // namespace
