// Internal: does this host and runtime provide what a package was built for?
#pragma once

#include <string>
#include <unordered_map>

#include "tdaot/manifest.h"

namespace tdaot::detail {

// What the running process offers; a value so tests can describe other hosts.
struct HostInfo {
  bool cuda_available = false;
  int torch_major = 0;
  int torch_minor = 0;
  // cpuinfo feature flags as at::cpu::get_cpu_capabilities() names them ("avx2", "avx512_f").
  std::unordered_map<std::string, bool> cpu_features;
};

// This process's host, computed once.
const HostInfo& current_host();

// Throws HostMismatchError naming `path` when the package needs a device, torch major.minor
// or CPU instruction set that `host` lacks. `cpu_isa` is a list of tokens separated by spaces,
// commas or '+', matched case-insensitively ("avx512", "AVX512 AVX512_VNNI", "avx2"); an empty
// list or "none"/"default" needs nothing.
void check_host(const Manifest& manifest, const std::string& path,
                const HostInfo& host = current_host());

}  // namespace tdaot::detail
