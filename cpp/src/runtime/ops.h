// Internal: custom operator libraries. A package that calls a custom operator needs its
// library loaded before AOTInductor loads the model: AOTI's proxy executor looks every extern
// call's schema up in the dispatcher at load and fails with a bare "Could not find schema".
#pragma once

#include <string>
#include <vector>

#include "tdaot/manifest.h"

namespace tdaot::detail {

// dlopen-s each library (RTLD_NOW | RTLD_GLOBAL), so its TORCH_LIBRARY registrations run.
// Throws PackageError naming the library path and dlerror() when one cannot be loaded.
void load_op_libraries(const std::vector<std::string>& libraries);

// True when the dispatcher knows the schema of `op` ("ns::name" or "ns::name.overload").
bool operator_registered(const std::string& op);

// Throws MissingOperatorError naming the package, the first unregistered custom operator of
// `manifest` and how to provide it.
void check_custom_ops(const Manifest& manifest, const std::string& path);

}  // namespace tdaot::detail
