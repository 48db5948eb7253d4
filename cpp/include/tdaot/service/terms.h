// tdaot/terms.h: the observation a contract's terms describe, computed from what a robot
// measures, and the PD torques of its joint output's gains. No libtorch and no simulator: a robot
// service (cpp/examples/robot_service) fills a RobotState from its sensors, tdaot-rehearse from
// MuJoCo's mjData; both then run the same code (part of tdaot::core, so of tdaot::lite and
// tdaot::runtime alike).
//
//   const tdaot::terms::JointOutput joints = tdaot::terms::joint_output(*policy.contract());
//   tdaot::terms::Observations obs(policy.manifest(), *policy.contract(), joints);
//   for (;;) {                                 // every control_dt
//     obs.compute(read_robot_state(), raw_action);
//     for (size_t i = 0; i < obs.inputs().size(); ++i)
//       obs.write(i, binding.input_data(obs.inputs()[i].key, obs.inputs()[i].dtype));
//     binding.run();                           // targets: the joint output, mapped
//     ...                                      // every physics/servo tick:
//     joints.pd_torques(targets, q, dq, tau);  // tau = stiffness * (target - q) - damping * dq
//   }
//
// Each term is computed raw (the contract's scale, offset and clip are compiled into the
// package), in the frames and units of docs/contract.md: base_lin_vel the world-frame base
// velocity rotated into the base frame; base_ang_vel as given (base frame); projected_gravity
// (0, 0, -1) rotated into the base frame; velocity_commands the command; joint_pos_rel
// q - offset of the joint output; joint_vel_rel dq; last_action the previous raw action (zeros at
// the start); gait_phase sin and cos of 2 pi (t mod period) / period. A package built with the
// carried terms (the default) keeps last_action and the older steps of a history term itself
// (recurrent state tdaot.last_action.*, tdaot.history.*): write() leaves those elements alone and
// carried_action() names the output holding the raw action. For a package built with
// caller_terms=True every slot is written: the last K steps oldest first, every step filled with
// the first value after the start or reset(). values() hold what the policy saw either way.
//
// Not thread-safe: one Observations per control loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/dtype.h"
#include "tdaot/manifest.h"

namespace tdaot::terms {

// What the robot measures at one control step.
struct RobotState {
  double time = 0.0;                                // seconds since the start (gait_phase)
  std::array<double, 4> base_quat{1.0, 0.0, 0.0, 0.0};  // base orientation in the world: w, x, y, z
  std::array<double, 3> base_lin_vel{};             // world frame, m/s
  std::array<double, 3> base_ang_vel{};             // base frame, rad/s
  std::array<double, 3> command{};                  // velocity_commands: vx, vy (m/s), yaw rate (rad/s)
  std::vector<double> joint_pos;                    // per joint of the joint output, its order
  std::vector<double> joint_vel;
};

// The joint output signal (joint targets) with its map and PD gains, one value per joint.
struct JointOutput {
  std::string key;
  std::vector<std::string> names;
  std::vector<double> offset;  // target = raw * scale + offset (before the clip)
  std::vector<double> scale;
  std::vector<double> rest;    // what the output holds before the first step
  std::vector<double> stiffness;
  std::vector<double> damping;

  size_t size() const noexcept { return names.size(); }
  // tau[i] = stiffness[i] * (target[i] - q[i]) - damping[i] * dq[i], for every joint.
  void pd_torques(const double* target, const double* q, const double* dq, double* tau) const;
  // The same with the gains scaled as a supervisor says this tick (tdaot/supervisor.h
  // SupervisorState: gain_scale, damping_scale): tau[i] = gain_scale * stiffness[i] *
  // (target[i] - q[i]) - damping_scale * damping[i] * dq[i].
  void pd_torques(const double* target, const double* q, const double* dq, double* tau,
                  double gain_scale, double damping_scale) const;
  // The raw action of joint i recovered from its mapped target: exact unless a limit or
  // max_delta held the target.
  double raw_from_target(size_t i, double target) const { return (target - offset[i]) / scale[i]; }
};

// The joint output: the signal the contract's joint terms refer to, else the first output signal
// with gains, else the first output. Throws ContractError (naming the key) when the contract has
// no output signal, its joint terms refer to two outputs, or (require_gains) the output carries
// no stiffness or damping.
JointOutput joint_output(const Contract& contract, bool require_gains = true);

// `world` rotated into the frame of a base of orientation `quat` (w, x, y, z; unit length).
std::array<double, 3> world_to_base(const std::array<double, 4>& quat, const std::array<double, 3>& world);

// One term's place in its input and the steps it keeps.
struct TermSlot {
  const Term* term = nullptr;
  size_t first = 0;            // index of its first element in the input
  size_t size = 0;             // elements of one step
  int64_t history = 1;         // steps
  double period = 0.0;         // gait_phase, seconds
  std::vector<double> window;  // history * size, oldest first
  bool filled = false;         // the window holds a first value
};

// One package input whose contract signal is made of terms.
struct ObservationInput {
  std::string key;
  DType dtype = DType::Float32;
  std::vector<std::string> names;  // the signal's element names
  std::vector<TermSlot> terms;
  std::vector<double> values;      // this step's raw values, in the signal's order
  std::vector<bool> written;       // false: an element the package carries itself
};

class Observations {
 public:
  // Plans every input of `manifest` but the recurrent state and is_init from the contract's
  // terms. Throws ContractError naming the key and term when an input is not declared as terms,
  // is not float32/float64 of shape [n], or holds a term this library does not compute.
  Observations(const Manifest& manifest, const Contract& contract, const JointOutput& joints);

  const std::vector<ObservationInput>& inputs() const noexcept { return inputs_; }
  // Elements of every input together.
  size_t size() const noexcept;
  // The package's output holding the previous raw action (its next.tdaot.last_action.* state),
  // empty when the package does not carry last_action; its dtype.
  const std::string& carried_action() const noexcept { return carried_action_; }
  DType carried_dtype() const noexcept { return carried_dtype_; }

  // This step's terms from `state` (joint_pos/joint_vel: one per joint) and `raw_action`, the
  // previous step's raw action (one per joint; zeros at the start).
  void compute(const RobotState& state, const double* raw_action);
  // Writes input i's values into the package input `data` (its dtype, [1, n]), but for the
  // elements the package carries itself.
  void write(size_t i, void* data) const;
  // After a reset of the robot: each history window refills with its next first value.
  void reset();

 private:
  std::vector<ObservationInput> inputs_;
  std::vector<double> joint_offset_;  // joint_pos_rel is q - offset
  std::string carried_action_;
  DType carried_dtype_ = DType::Float32;
};

}  // namespace tdaot::terms
