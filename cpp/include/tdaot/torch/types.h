// The vocabulary types tdaot's torch headers share, apart from the classes that use them, so that
// a header needing only a type does not pull in the Policy (and the runtime's internals need not
// include the public policy.h for them).
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <string>

#include "tdaot/dtype.h"
#include "tdaot/manifest.h"

namespace tdaot {

// Inputs or outputs keyed by manifest key ("a.b" for the nested key ("a", "b")).
using TensorMap = std::map<std::string, at::Tensor>;

// How a package is loaded (defined in policy.h).
struct PolicyOptions;

// The torch dtype of a manifest dtype (DType uses c10::ScalarType's numbering).
inline c10::ScalarType to_scalar_type(DType dtype) { return static_cast<c10::ScalarType>(dtype); }

// A manifest dtype equals the torch dtype of the same code (spec.dtype == tensor.scalar_type()).
inline bool operator==(DType a, c10::ScalarType b) { return to_scalar_type(a) == b; }
inline bool operator==(c10::ScalarType a, DType b) { return a == to_scalar_type(b); }
inline bool operator!=(DType a, c10::ScalarType b) { return !(a == b); }
inline bool operator!=(c10::ScalarType a, DType b) { return !(a == b); }

// A tensor's dtype named for messages: the manifest's name ("float32") for a manifest dtype,
// torch's otherwise.
inline std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Long:
    case c10::ScalarType::Int:
    case c10::ScalarType::Short:
    case c10::ScalarType::Char:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool: return dtype_name(static_cast<DType>(dtype));
    default: return c10::toString(dtype);
  }
}

}  // namespace tdaot
