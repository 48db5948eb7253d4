// Internal: the dtypes a minimal-arrayref model was compiled for, as its own wrapper source
// records them (`using AOTInductorModelInputs = std::tuple<ArrayRefTensor<float>, ...>;` and
// the same for its outputs, in the <hash>.wrapper.cpp extracted beside its library), checked
// against the manifest. The lite runtime hands such a model raw bytes: without this a manifest
// declaring float16 or float64 for a float32 model ran on reinterpreted bytes (issue 38). The
// full runtime's runner refuses the same manifests when it warms up. Torch-free.
#pragma once

#include <string>

#include "tdaot/manifest.h"

namespace tdaot::detail {

// Throws ManifestError (naming the package, model, key and both dtypes) when the wrapper source
// beside `library` (".so" -> ".cpp") records other input or output dtypes, or another count,
// than `manifest`. No source, or no such tuple in it: nothing is checked.
void check_arrayref_dtypes(const std::string& library, const Manifest& manifest,
                           const std::string& model, const std::string& package_path);

}  // namespace tdaot::detail
