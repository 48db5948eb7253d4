// Internal: the host as the full runtime sees it: libtorch's version, CUDA, and the CPU
// features as ATen reads them (the core's host checks take it as a value, core/host/host.h).
#pragma once

#include "core/host/host.h"

namespace tdaot::detail {

// This process's host, computed once.
const HostInfo& current_host();

}  // namespace tdaot::detail
