// What the supervisor of a package's joint targets (tdaot::Supervisor in tdaot/contract.h) did on
// the last step of a row, and how a bind or session chooses it. Torch-free, plain data: a robot
// service reads it every tick without allocating (BindingBase::supervisor, Session::supervisor).
#pragma once

#include <cstdint>
#include <optional>

#include "tdaot/contract.h"

namespace tdaot {

enum class SupervisorMode : int32_t {
  running = 0,   // the policy's targets, clipped to the limits
  blending = 1,  // soft start: from the measured pose towards the policy's targets
  held = 2,      // fallback "hold": the last safe targets, until reset()
  damped = 3,    // fallback "damp": the measured positions, stiffness scale 0, until reset()
};

// "running", "blending", "held", "damped".
const char* supervisor_mode_name(SupervisorMode mode) noexcept;

// One row's supervisor after its last step (before the first: the state a reset gives).
struct SupervisorState {
  SupervisorMode mode = SupervisorMode::running;
  // Scale the service applies to the contract's gains this step: tau = gain_scale * stiffness *
  // (target - q) - damping_scale * damping * dq.
  double gain_scale = 1.0;
  double damping_scale = 1.0;
  double blend = 1.0;      // soft start progress, 0 -> 1 (1 outside a soft start)
  int64_t steps = 0;       // steps since activation or the row's last reset
};

// How a bind (BindOptions::supervisor) or a Session chooses its supervisor.
struct SupervisorOptions {
  bool enabled = true;  // false: none, even when the contract has one
  // Replaces the contract's supervisor (checked by Contract::check_supervisor at bind: a
  // ContractError naming the field); a package with a contract but no supervisor gets this one.
  std::optional<Supervisor> config{};
};

}  // namespace tdaot
