// Custom operator libraries: loaded before the model, then every operator the manifest lists
// is looked up, so a missing library is a load-time error naming the operator.
#include "runtime/ops.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>

#include "tdaot/errors.h"

namespace tdaot::detail {

void load_op_libraries(const std::vector<std::string>& libraries) {
  for (const std::string& library : libraries) {
    // RTLD_NOW: an unresolved symbol fails here, not in the middle of a control loop.
    // RTLD_GLOBAL: as torch.ops.load_library does, so libraries that build on each other's
    // operators resolve. The handle is never closed: the dispatcher keeps pointers into it.
    if (dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* reason = dlerror();
      throw PackageError(
          library, "custom operator library '" + library +
                       "' could not be loaded: " + (reason ? reason : "unknown dlopen error"));
    }
  }
}

bool operator_registered(const std::string& op) {
  // "ns::name.overload": the overload follows the first '.' after the namespace separator.
  const size_t colons = op.find("::");
  const size_t dot = op.find('.', colons == std::string::npos ? 0 : colons + 2);
  const std::string name = op.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchema(c10::OperatorName(name, overload)).has_value();
}

void check_custom_ops(const Manifest& manifest, const std::string& path) {
  for (const std::string& op : manifest.custom_ops) {
    if (operator_registered(op)) continue;
    throw MissingOperatorError(
        path, op,
        "package '" + path + "' calls the custom operator '" + op +
            "', which no library loaded in this process registers; pass the shared library that "
            "defines it (PolicyOptions::op_libraries, tdaot-run --op-lib, "
            "tdaot.load(..., op_libraries=[...]))");
  }
}

}  // namespace tdaot::detail
