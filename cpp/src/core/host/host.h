// Internal: does this host and runtime provide what a package was built for?
#pragma once

#include <string>
#include <unordered_map>

#include "tdaot/manifest.h"

namespace tdaot::detail {

// The architecture this runtime was built for, as manifests name it.
#if defined(__aarch64__)
inline constexpr const char* kThisArchitecture = "aarch64";
#elif defined(__x86_64__)
inline constexpr const char* kThisArchitecture = "x86_64";
#else
inline constexpr const char* kThisArchitecture = "unknown";
#endif

// What the running process offers; a value so tests can describe other hosts.
struct HostInfo {
  // The architecture the process runs (kThisArchitecture).
  std::string architecture = kThisArchitecture;
  bool cuda_available = false;
  // The libtorch the runtime uses; 0.0 for the lite runtime, which has none and checks a
  // model's recorded needs instead of the torch version (tdaot/lite.h).
  int torch_major = 0;
  int torch_minor = 0;
  // cpuinfo feature flags as at::cpu::get_cpu_capabilities() names them ("avx2", "avx512_f").
  std::unordered_map<std::string, bool> cpu_features;
};

// This CPU's features read with CPUID, under cpuinfo's names (cpu_features.cpp).
std::unordered_map<std::string, bool> cpu_features();

// Throws HostMismatchError naming `path` when the package was built for another architecture
// (checked first: nothing else of it means anything on this host), or needs a device, torch
// major.minor
// (unless `host` has no torch) or CPU instruction set that `host` lacks. `cpu_isa` is a list of tokens separated by spaces,
// commas or '+', matched case-insensitively ("avx512", "AVX512 AVX512_VNNI", "avx2"); an empty
// list or "none"/"default" needs nothing.
void check_host(const Manifest& manifest, const std::string& path, const HostInfo& host);

}  // namespace tdaot::detail
