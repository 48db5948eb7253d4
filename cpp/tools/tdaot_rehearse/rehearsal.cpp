// tdaot-rehearse's loop (rehearsal.h): the policy every control_dt through the runner, the PD
// torques every physics step, the summary's measures along the way.
#include "tdaot_rehearse/rehearsal.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <vector>

#include "tdaot/service/terms.h"
#include "tdaot_rehearse/mujoco_robot.h"
#include "tdaot_rehearse/runner.h"
#include "tdaot_rehearse/trajectory.h"

namespace tdaot::rehearse {
namespace {

using Clock = std::chrono::steady_clock;

// The number of physics steps per control step; UsageError unless control_dt is a whole number.
int64_t decimation(double control_dt, double timestep) {
  const double ratio = control_dt / timestep;
  const double steps = std::round(ratio);
  if (steps < 1.0 || std::abs(ratio - steps) > 1e-9 * std::max(1.0, ratio)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "the contract's control_dt %g s is not a whole number of the MJCF's physics steps "
                  "(timestep %g s: %.6g steps)",
                  control_dt, timestep, ratio);
    throw UsageError(text);
  }
  return static_cast<int64_t>(steps);
}

// The policy's side of one control step: observation in, targets and raw action out.
class Controller {
 public:
  Controller(PolicyRunner& runner, const terms::JointOutput& joints, const terms::Observations& observations)
      : runner_(runner), joints_(joints), observations_(observations) {
    const auto out = runner.manifest().output_index(joints.key);
    if (!out) throw UsageError("contract output '" + joints.key + "' is not an output of the package");
    dtype_ = runner.manifest().outputs[*out].dtype;
    if (dtype_ != DType::Float32 && dtype_ != DType::Float64) {
      throw UsageError("output '" + joints.key + "' is " + dtype_name(dtype_) +
                       "; joint targets must be float32 or float64");
    }
    for (const terms::ObservationInput& input : observations.inputs()) {
      inputs_.push_back(runner.input_data(input.key, input.dtype));
    }
    targets_ = joints.rest;  // until the first run: each output's offset, clipped
    raw_.assign(joints.size(), 0.0);
  }

  // Writes the observation computed by the caller, runs the policy, reads the action. `nan`: the
  // first element of the first input is written NaN (a failed sensor).
  void step(bool nan = false) {
    for (size_t i = 0; i < inputs_.size(); ++i) observations_.write(i, inputs_[i]);
    if (nan && !inputs_.empty()) {
      if (observations_.inputs()[0].dtype == DType::Float32) {
        static_cast<float*>(inputs_[0])[0] = std::numeric_limits<float>::quiet_NaN();
      } else {
        static_cast<double*>(inputs_[0])[0] = std::numeric_limits<double>::quiet_NaN();
      }
    }
    runner_.run();
    const void* out = runner_.output_data(joints_.key, dtype_);
    for (size_t i = 0; i < targets_.size(); ++i) {
      targets_[i] = read(out, dtype_, i);
      raw_[i] = joints_.raw_from_target(i, targets_[i]);
    }
    if (!observations_.carried_action().empty()) {  // the package's own raw action: exact
      const void* raw = runner_.output_data(observations_.carried_action(), observations_.carried_dtype());
      for (size_t i = 0; i < raw_.size(); ++i) raw_[i] = read(raw, observations_.carried_dtype(), i);
    }
  }
  const std::vector<double>& targets() const { return targets_; }
  const std::vector<double>& raw() const { return raw_; }

 private:
  static double read(const void* data, DType dtype, size_t i) {
    return dtype == DType::Float32 ? static_cast<const float*>(data)[i] : static_cast<const double*>(data)[i];
  }

  PolicyRunner& runner_;
  const terms::JointOutput& joints_;
  const terms::Observations& observations_;
  DType dtype_ = DType::Float32;
  std::vector<void*> inputs_;
  std::vector<double> targets_;
  std::vector<double> raw_;
};

void describe(std::ostream& log, const Options& options, const PolicyRunner& runner, const MujocoRobot& robot,
              const terms::JointOutput& joints, const terms::Observations& observations, int64_t steps,
              double control_dt) {
  const char* supervisor = runner.supervisor() != nullptr ? ", supervisor on"
                           : options.supervisor            ? ", no supervisor in the contract"
                                                           : ", supervisor off";
  log << "tdaot-rehearse: " << options.package << " (" << runner.describe()
      << (options.envelope ? ", envelope on" : ", envelope off") << supervisor << ") in " << options.mjcf
      << " (MuJoCo " << mj_versionString() << ")\n";
  if (!options.scenario.empty()) {
    char text[256];
    if (options.scenario == "crouch-start") {
      std::snprintf(text, sizeof text, "  scenario crouch-start: each joint %g rad deeper into its default angle\n",
                    options.crouch);
    } else if (options.scenario == "push") {
      std::snprintf(text, sizeof text, "  scenario push: the base pushed %g m/s sideways at %g s\n",
                    options.push_speed, options.push_time);
    } else {
      std::snprintf(text, sizeof text, "  scenario nan: a NaN observation at %g s\n", options.seconds / 2);
    }
    log << text;
  }
  log << "  " << joints.size() << " joints of output '" << joints.key << "' matched to their motors; base: "
      << robot.base_name() << "\n";
  for (const terms::ObservationInput& input : observations.inputs()) {
    log << "  input '" << input.key << "' [" << input.values.size() << "]:";
    for (const terms::TermSlot& slot : input.terms) {
      log << " " << slot.term->name;
      if (slot.history > 1) log << "x" << slot.history;
    }
    log << "\n";
  }
  char text[256];
  std::snprintf(text, sizeof text,
                "  physics step %g s, policy every %lld steps (control_dt %g s), command (%g, %g, %g), %g s\n",
                robot.timestep(), static_cast<long long>(steps), control_dt, options.command[0],
                options.command[1], options.command[2], options.seconds);
  log << text;
}

// Whether the base is down now: below the fall fraction of its start height, or tilted more
// than 60 degrees (gravity's z in the base frame above -0.5).
bool down(const MujocoRobot& robot, double start_height, double fraction) {
  const std::array<double, 3> up = terms::world_to_base(robot.base_orientation(), {0.0, 0.0, -1.0});
  return robot.base_position()[2] < fraction * start_height || up[2] > -0.5;
}

}  // namespace

Summary run(const Options& options, std::ostream& log) {
  if (!(options.seconds > 0.0) || !std::isfinite(options.seconds)) throw UsageError("--seconds must be > 0");
  if (options.runtime != kRuntime) {
    throw UsageError(std::string("--runtime ") + options.runtime + ": this executable runs the " + kRuntime +
                     " runtime");
  }
  if (!options.scenario.empty() && options.scenario != "crouch-start" && options.scenario != "push" &&
      options.scenario != "nan") {
    throw UsageError("--scenario " + options.scenario + ": expected crouch-start, push or nan");
  }
  if (options.scenario == "push" && !(options.push_time < options.seconds)) {
    char text[160];
    std::snprintf(text, sizeof text, "--scenario push: the push at %g s is not within the run (--seconds %g)",
                  options.push_time, options.seconds);
    throw UsageError(text);
  }
  if (options.scenario == "crouch-start" && !(options.crouch >= 0.0 && std::isfinite(options.crouch))) {
    throw UsageError("--crouch must be >= 0 (radians)");
  }
  std::unique_ptr<PolicyRunner> runner = make_runner(options.package);
  if (!runner->contract()) {
    throw UsageError("package '" + options.package +
                     "' has no contract: tdaot-rehearse needs one whose input signal is made of observation "
                     "terms and whose joint output carries PD gains (tdaot.Contract, docs/contract.md)");
  }
  const Contract& contract = *runner->contract();
  const terms::JointOutput joints = terms::joint_output(contract);
  terms::Observations observations(runner->manifest(), contract, joints);
  const auto control_steps = static_cast<int64_t>(std::ceil(options.seconds / contract.control_dt - 1e-9));
  const int64_t record = options.record.empty()
                             ? 0
                             : (options.record_steps > 0 ? std::min(options.record_steps, control_steps) : control_steps);
  runner->bind(options.envelope, options.supervisor, record);
  MujocoRobot robot(options.mjcf, options.keyframe);
  robot.match(joints);
  if (options.scenario == "crouch-start") {
    // Deeper into each non-zero default angle (knees bend further, hips and ankles with them),
    // inside the joint's range; joints at 0 by default stay there.
    std::vector<double> crouched(joints.size());
    for (size_t i = 0; i < joints.size(); ++i) {
      const double angle = joints.offset[i];
      const double deeper = angle > 0 ? angle + options.crouch : (angle < 0 ? angle - options.crouch : 0.0);
      const std::array<double, 2> range = robot.joint_range(i);
      crouched[i] = std::clamp(deeper, range[0], range[1]);
    }
    robot.pose(crouched);
  }
  if (options.scenario == "push" && !robot.floating_base()) {
    throw UsageError("--scenario push moves the base, but the MJCF's robot has no free joint");
  }
  Controller controller(*runner, joints, observations);

  Summary summary;
  summary.runtime = kRuntime;
  summary.model = runner->describe();
  summary.joints = static_cast<int64_t>(joints.size());
  summary.observations = static_cast<int64_t>(observations.size());
  summary.timestep = robot.timestep();
  summary.decimation = decimation(contract.control_dt, robot.timestep());
  describe(log, options, *runner, robot, joints, observations, summary.decimation, contract.control_dt);
  std::optional<Trajectory> trajectory;
  if (!options.trajectory.empty()) trajectory.emplace(options.trajectory, joints, observations, robot);

  summary.floating_base = robot.floating_base();
  const std::array<double, 3> start = robot.base_position();
  summary.start_height = summary.min_height = summary.floating_base ? start[2] : 0.0;
  // The starting heading: the base's x axis in the world, flattened.
  double heading[2] = {1.0, 0.0};
  if (summary.floating_base) {
    const std::array<double, 4> q = robot.base_orientation();
    const std::array<double, 4> conjugate{q[0], -q[1], -q[2], -q[3]};  // base to world
    const std::array<double, 3> axis = terms::world_to_base(conjugate, {1.0, 0.0, 0.0});
    const double norm = std::hypot(axis[0], axis[1]);
    if (norm > 1e-9) heading[0] = axis[0] / norm, heading[1] = axis[1] / norm;
  }
  std::vector<double> tau(joints.size(), 0.0);
  std::vector<double> applied(joints.size(), 0.0);
  summary.scenario = options.scenario;
  summary.start_end_height = summary.start_min_height = summary.start_height;
  const int64_t nan_step = options.scenario == "nan" ? control_steps / 2 : -1;
  bool pushed = false;
  bool fallen = false;
  double policy_us = 0.0;
  const auto started = Clock::now();
  for (int64_t step = 0; step < control_steps; ++step) {
    const double t = robot.time();
    if (options.scenario == "push" && !pushed && t >= options.push_time - 1e-9) {
      robot.push({0.0, options.push_speed, 0.0});
      pushed = true;
    }
    const auto before = Clock::now();
    observations.compute(robot.read(options.command), controller.raw().data());
    controller.step(step == nan_step);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - before).count();
    policy_us += us;
    summary.policy_us_max = std::max(summary.policy_us_max, us);
    // The gains as the supervisor says this tick (a soft start's ramp, a damp fallback).
    const SupervisorState* supervised = runner->supervisor();
    const double gain_scale = supervised != nullptr ? supervised->gain_scale : 1.0;
    const double damping_scale = supervised != nullptr ? supervised->damping_scale : 1.0;
    if (supervised != nullptr && summary.fallback_at < 0 &&
        (supervised->mode == SupervisorMode::held || supervised->mode == SupervisorMode::damped)) {
      summary.fallback_at = t;
    }
    const std::vector<double>& targets = controller.targets();
    if (!std::all_of(targets.begin(), targets.end(), [](double v) { return std::isfinite(v); })) {
      ++summary.nonfinite_targets;
    }
    if (trajectory) {
      const terms::RobotState& state = robot.read(options.command);
      joints.pd_torques(targets.data(), state.joint_pos.data(), state.joint_vel.data(), tau.data(), gain_scale,
                        damping_scale);
      robot.applied_torques(tau.data(), applied.data());
      trajectory->write(t, robot, observations, controller.raw(), targets, applied, runner->interventions(),
                        supervised);
    }
    for (int64_t k = 0; k < summary.decimation; ++k) {
      const terms::RobotState& state = robot.read(options.command);
      joints.pd_torques(targets.data(), state.joint_pos.data(), state.joint_vel.data(), tau.data(), gain_scale,
                        damping_scale);
      robot.step(tau.data());
      const bool first_second = robot.time() <= 1.0 + 1e-9;
      for (size_t i = 0; i < joints.size(); ++i) {
        const double torque = std::abs(robot.last_torque(i));
        summary.peak_torque = std::max(summary.peak_torque, torque);
        if (step == 0) summary.handover_torque = std::max(summary.handover_torque, torque);
        if (first_second && torque > summary.start_peak_torque) {
          summary.start_peak_torque = torque;
          summary.start_peak_joint = joints.names[i];
        }
      }
      if (first_second && summary.floating_base) {
        summary.start_end_height = robot.base_position()[2];
        summary.start_min_height = std::min(summary.start_min_height, summary.start_end_height);
      }
    }
    ++summary.control_steps;
    summary.physics_steps += summary.decimation;
    if (summary.floating_base) {
      summary.min_height = std::min(summary.min_height, robot.base_position()[2]);
      const bool down_now = down(robot, summary.start_height, options.fall_fraction);
      if (down_now && !fallen) ++summary.falls;
      fallen = down_now;
    }
  }
  summary.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
  summary.simulated_s = robot.time();
  const std::array<double, 3> end = robot.base_position();
  summary.final_height = summary.floating_base ? end[2] : 0.0;
  summary.distance = std::hypot(end[0] - start[0], end[1] - start[1]);
  summary.forward = (end[0] - start[0]) * heading[0] + (end[1] - start[1]) * heading[1];
  summary.mean_forward_speed = summary.simulated_s > 0 ? summary.forward / summary.simulated_s : 0.0;
  summary.interventions = runner->interventions();
  const SupervisorState* last = runner->supervisor();
  summary.supervisor = last != nullptr ? supervisor_mode_name(last->mode) : "none";
  summary.policy_us_mean = summary.control_steps ? policy_us / static_cast<double>(summary.control_steps) : 0.0;
  summary.real_time_factor = summary.wall_s > 0 ? summary.simulated_s / summary.wall_s : 0.0;
  if (trajectory) trajectory->close();
  if (record > 0) {
    runner->dump(options.record);
    log << "tdaot-rehearse: flight log of the last " << record << " control steps written to " << options.record
        << "\n";
  }
  return summary;
}

}  // namespace tdaot::rehearse
