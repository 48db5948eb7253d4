// tdaot._C: the flight recorder's calls on Binding (tdaot/binding_base.h: recording, dump,
// snapshot; docs/flight-recorder.md), apart from module.cpp to keep each file one subject.
#include "bindings.h"

namespace tdaot::python {

void add_flight_recorder(py::class_<tdaot::Binding>& binding) {
  binding
      .def_property_readonly("record", &tdaot::Binding::recording,
                             "The steps the flight recorder keeps (bind's record=N); 0 without it.")
      .def(
          "dump",
          [](const tdaot::Binding& b, const std::string& path) {
            py::gil_scoped_release unlocked;
            b.dump(path);
          },
          py::arg("path"),
          "Writes the recorded steps to a flight log (tdaot-flightlog/1) at `path`; safe while "
          "another thread runs the binding.")
      .def(
          "snapshot",
          [](const tdaot::Binding& b) {
            std::string bytes;
            {
              py::gil_scoped_release unlocked;
              bytes = b.snapshot();
            }
            return py::bytes(bytes);
          },
          "The bytes dump() would write: every slot whole or marked unfinished, never torn.");
}

}  // namespace tdaot::python
