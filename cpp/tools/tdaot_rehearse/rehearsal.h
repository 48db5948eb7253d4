// tdaot-rehearse's loop: a package whose contract says what each observation is (observation
// terms) and how its joint targets drive the joints (names, map, PD gains), closed in MuJoCo
// through the runtime this executable links (runner.h: the lite runtime's bound run, or the full
// runtime's Session), the way a robot service runs it (envelope on). The observation and the PD
// torques are tdaot/terms.h's, as a robot service computes them; mujoco_robot.h reads the state
// and drives the motors.
//
// Each physics step of the MJCF (its opt.timestep), the torque of every contract joint is
//   tau = stiffness * (target - q) - damping * dq
// written to the joint's motor (ctrl = tau / gear). Every control_dt (a whole number of physics
// steps), first at t = 0, the observation terms are computed from the simulation state and written
// raw (the contract's scale, offset and clip are compiled into the package), the policy runs, and
// its mapped output becomes the joint targets. See cpp/tools/tdaot_rehearse/README.md.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>

#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"

namespace tdaot::rehearse {

// A package, robot or option the rehearsal cannot run with (a joint missing from the MJCF or an
// actuator the contract lacks, a control period that is not a whole number of physics steps...):
// exit code 2, as tdaot::ContractError (no contract, no observation terms, no gains: terms.h).
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string package;
  std::string mjcf;
  double seconds = 60.0;
  std::array<double, 3> command{0.0, 0.0, 0.0};  // velocity_commands: vx, vy (m/s), yaw rate (rad/s)
  std::string runtime = "lite";
  std::string trajectory;  // CSV file, one row per control step; empty: none
  std::string keyframe;    // start from this MJCF keyframe; empty: the model's initial pose
  bool envelope = true;    // the lite runtime's safety envelope (BindOptions::envelope)
  bool supervisor = true;  // the contract's supervisor of the joint targets, when it has one
  // What happens to the robot (README.md, "Scenarios"): "" (nothing), "crouch-start" (the
  // joints start `crouch` rad deeper into each non-zero default angle), "push" (the base is
  // given `push_speed` m/s sideways at `push_time` s), "nan" (one observation element is NaN at
  // half the run: a failed sensor, which the policy turns into NaN targets).
  std::string scenario;
  double crouch = 0.3;
  double push_speed = 3.0;
  double push_time = 2.0;
  // The flight log to write at the end (docs/flight-recorder.md); empty: none. Its ring holds
  // the whole rehearsal's control steps, or the last `record_steps` when that is > 0.
  std::string record;
  int64_t record_steps = 0;
  // A fall: the base below this fraction of its starting height, or tilted more than 60 degrees.
  double fall_fraction = 0.5;
};

struct Summary {
  double simulated_s = 0.0;
  int64_t physics_steps = 0;
  int64_t control_steps = 0;
  int64_t decimation = 0;
  double timestep = 0.0;
  bool floating_base = false;     // the MJCF's robot has a free joint (a base that can fall)
  double start_height = 0.0;      // base z at t = 0
  double min_height = 0.0;        // lowest base z over the run
  double final_height = 0.0;
  double distance = 0.0;          // base xy displacement, start to end, m
  double forward = 0.0;           // the same along the base's starting heading, m
  double mean_forward_speed = 0.0;
  int64_t falls = 0;
  Interventions interventions;
  // The first second of the run (the handover): the largest joint torque the simulator applied
  // (N m, and its joint) and the base's lowest and last height (m).
  double start_peak_torque = 0.0;
  std::string start_peak_joint;
  double start_min_height = 0.0;
  double start_end_height = 0.0;
  double handover_torque = 0.0;    // the largest joint torque of the first control step (the switch)
  double peak_torque = 0.0;        // the whole run's largest joint torque
  std::string scenario;
  std::string supervisor;          // the supervisor's last state ("running"...); "none" without one
  double fallback_at = -1.0;       // when it first took a fallback (s); -1: never
  int64_t nonfinite_targets = 0;   // control steps whose targets had a NaN or infinity
  double wall_s = 0.0;            // the loop's wall-clock time (physics, policy, trajectory)
  double policy_us_mean = 0.0;    // the bound run alone, per control step
  double policy_us_max = 0.0;
  double real_time_factor = 0.0;  // simulated_s / wall_s
  std::string runtime;            // "lite" or "torch"
  std::string model;              // what served batch 1 (runner.h describe())
  int64_t joints = 0;
  int64_t observations = 0;
};

// Runs the rehearsal on this executable's runtime (options.runtime must be it); `log` hears what
// was matched. Throws UsageError or ContractError (exit 2), tdaot::Error (the package could not be
// read or run).
Summary run(const Options& options, std::ostream& log);

// The summary as lines for people, and as one JSON object (summary.cpp).
std::string format_summary(const Summary& summary);
std::string summary_json(const Summary& summary);

}  // namespace tdaot::rehearse
