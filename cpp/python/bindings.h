// Internal to tdaot._C: the conversions and class additions that module.cpp's bindings share
// with the files beside it (supervisor.cpp, flight_recorder.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"
#include "tdaot/torch/binding.h"

namespace tdaot::python {

namespace py = pybind11;

// {nonfinite, rate_limited, blended, clipped, fallback}: what Session.interventions() and
// Binding.interventions() return.
py::dict interventions_dict(const tdaot::Interventions& counts);

// How bind() and Session() choose the supervisor: None (the contract's), False (none), or a
// tdaot.Supervisor's to_dict() (it replaces the contract's; checked by the runtime).
tdaot::SupervisorOptions supervisor_options(const py::object& supervisor);

// A row's supervisor state as (mode name, gain_scale, damping_scale, blend, steps).
py::tuple supervisor_tuple(const tdaot::SupervisorState& state);

// Binding's flight recorder calls (flight_recorder.cpp).
void add_flight_recorder(py::class_<tdaot::Binding>& binding);

}  // namespace tdaot::python
