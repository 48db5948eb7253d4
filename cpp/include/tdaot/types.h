// The vocabulary types tdaot's headers share, apart from the classes that use them, so that a
// header needing only a type does not pull in the Policy (and the runtime's internals need not
// include the public policy.h for them).
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <string>

namespace tdaot {

// Inputs or outputs keyed by manifest key ("a.b" for the nested key ("a", "b")).
using TensorMap = std::map<std::string, at::Tensor>;

// How a package is loaded (defined in policy.h).
struct PolicyOptions;

}  // namespace tdaot
