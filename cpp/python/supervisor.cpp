// tdaot._C: the supervisor's and interventions' conversions between Python and
// tdaot/contract.h, for Policy.bind(), Session() and their read-outs.
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "tdaot/errors.h"
#include "tdaot/supervisor.h"

namespace tdaot::python {
namespace {

// A number or a list of numbers (a tdaot.Supervisor field, as its to_dict() gives it).
tdaot::SignalValues signal_values(const py::handle& value) {
  tdaot::SignalValues result;
  if (py::isinstance<py::float_>(value) || py::isinstance<py::int_>(value)) {
    result.values.push_back(value.cast<double>());
    return result;
  }
  result.per_element = true;
  result.values = value.cast<std::vector<double>>();
  return result;
}

}  // namespace

py::dict interventions_dict(const tdaot::Interventions& counts) {
  py::dict result;
  result["nonfinite"] = counts.nonfinite;
  result["rate_limited"] = counts.rate_limited;
  result["blended"] = counts.blended;
  result["clipped"] = counts.clipped;
  result["fallback"] = counts.fallback;
  return result;
}

tdaot::SupervisorOptions supervisor_options(const py::object& supervisor) {
  tdaot::SupervisorOptions options;
  if (supervisor.is_none()) return options;
  if (py::isinstance<py::bool_>(supervisor)) {
    options.enabled = supervisor.cast<bool>();
    return options;
  }
  const py::dict fields = supervisor.cast<py::dict>();
  tdaot::Supervisor config;
  for (const auto& [name_handle, value] : fields) {
    const std::string name = name_handle.cast<std::string>();
    if (value.is_none()) continue;
    if (name == "output") config.output = value.cast<std::string>();
    else if (name == "blend_seconds") config.blend_seconds = value.cast<double>();
    else if (name == "blend_max_velocity") config.blend_max_velocity = signal_values(value);
    else if (name == "start_gain_fraction") config.start_gain_fraction = value.cast<double>();
    else if (name == "low") config.low = signal_values(value);
    else if (name == "high") config.high = signal_values(value);
    else if (name == "margin") config.margin = value.cast<double>();
    else if (name == "max_velocity") config.max_velocity = signal_values(value);
    else if (name == "max_torque") config.max_torque = signal_values(value);
    else if (name == "max_tilt") config.max_tilt = value.cast<double>();
    else if (name == "max_rate_limited_steps") config.max_rate_limited_steps = value.cast<int64_t>();
    else if (name == "fallback") config.fallback = value.cast<std::string>();
    else throw tdaot::ContractError("supervisor", "contract supervisor: unknown field '" + name + "'");
  }
  options.config = std::move(config);
  return options;
}

py::tuple supervisor_tuple(const tdaot::SupervisorState& state) {
  return py::make_tuple(tdaot::supervisor_mode_name(state.mode), state.gain_scale,
                        state.damping_scale, state.blend, state.steps);
}

}  // namespace tdaot::python
