// Host checks: refuse a package before dlopen-ing it when running it could only fail or,
// worse, die of SIGILL in the middle of a control loop.
#include "core/host/host.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

struct FeatureSet {
  std::string_view name;
  std::initializer_list<std::string_view> features;
};

// ISA names the Python stage (or AOTI_CPU_ISA) uses, mapped to the cpuinfo features the
// generated code needs. Tokens not listed here are looked up as cpuinfo feature names.
const FeatureSet kIsaFeatures[] = {
    {"none", {}},
    {"default", {}},
    {"scalar", {}},
    {"avx2", {"avx2", "fma3"}},
    // ATen's AVX512 kernels (and inductor's Vectorized<> for AVX512) need F, BW, DQ and VL.
    {"avx512", {"avx512_f", "avx512_bw", "avx512_dq", "avx512_vl"}},
    {"amx", {"amx_tile"}},
    // inductor's VecNEON (64-bit ARM's Advanced SIMD).
    {"asimd", {"asimd"}},
};

// x86-64 micro-architecture levels a package may be compiled for (-march). Other targets
// ("native", a CPU name) say nothing checkable beyond cpu_isa.
const FeatureSet kTargetFeatures[] = {
    {"x86-64", {}},
    {"x86-64-v2", {"sse4_2", "popcnt"}},
    {"x86-64-v3", {"sse4_2", "popcnt", "avx2", "fma3", "bmi", "bmi2", "f16c", "lzcnt"}},
    {"x86-64-v4",
     {"sse4_2", "popcnt", "avx2", "fma3", "bmi", "bmi2", "f16c", "lzcnt", "avx512_f", "avx512_bw",
      "avx512_dq", "avx512_vl", "avx512_cd"}},
};

[[noreturn]] void mismatch(const std::string& path, const std::string& problem) {
  throw HostMismatchError(path, "package '" + path + "' " + problem);
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::vector<std::string> split_tokens(const std::string& list) {
  std::vector<std::string> tokens;
  std::string current;
  for (char c : list + " ") {
    if (std::isspace(static_cast<unsigned char>(c)) || c == ',' || c == '+') {
      if (!current.empty()) tokens.push_back(lower(current));
      current.clear();
    } else {
      current += c;
    }
  }
  return tokens;
}

const FeatureSet* find_set(const FeatureSet* begin, const FeatureSet* end, std::string_view name) {
  auto it = std::find_if(begin, end, [&](const FeatureSet& s) { return s.name == name; });
  return it == end ? nullptr : it;
}

bool has_feature(const HostInfo& host, std::string_view feature) {
  auto it = host.cpu_features.find(std::string(feature));
  return it != host.cpu_features.end() && it->second;
}

// Throws naming `what` (for example "cpu_isa 'avx512'") and the first missing feature.
void require_features(const HostInfo& host, const std::string& path, const std::string& what,
                      std::initializer_list<std::string_view> features) {
  for (std::string_view feature : features) {
    if (!has_feature(host, feature)) {
      mismatch(path, "was built for " + what + ", which needs the CPU feature '" +
                         std::string(feature) +
                         "' this CPU lacks; rebuild it for this host's CPU (or an older target)");
    }
  }
}

void check_cpu_isa(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  const std::string what = "cpu_isa '" + manifest.cpu_isa + "'";
  for (const std::string& token : split_tokens(manifest.cpu_isa)) {
    if (const FeatureSet* set = find_set(std::begin(kIsaFeatures), std::end(kIsaFeatures), token)) {
      require_features(host, path, what, set->features);
    } else if (!has_feature(host, token)) {
      // An unknown name may be a newer ISA or another architecture's: refusing beats SIGILL.
      mismatch(path, "was built for " + what + ", but '" + token +
                         "' is not a CPU feature this host has (or this runtime knows)");
    }
  }
}

void check_cpu_target(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  const std::string target = lower(manifest.cpu_target);
  if (const FeatureSet* set =
          find_set(std::begin(kTargetFeatures), std::end(kTargetFeatures), target)) {
    require_features(host, path, "cpu_target '" + manifest.cpu_target + "'", set->features);
  }
}

// "2.13.0+cpu" -> {2, 13}; nullopt when there is no leading MAJOR.MINOR.
std::optional<std::pair<int, int>> major_minor(const std::string& version) {
  const char* const end = version.data() + version.size();
  int major = 0;
  int minor = 0;
  auto [after_major, e1] = std::from_chars(version.data(), end, major);
  if (e1 != std::errc() || after_major == end || *after_major != '.') return std::nullopt;
  auto [after_minor, e2] = std::from_chars(after_major + 1, end, minor);
  if (e2 != std::errc()) return std::nullopt;
  return std::make_pair(major, minor);
}

void check_torch_version(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  const auto built = major_minor(manifest.torch_version);
  const std::string runtime =
      std::to_string(host.torch_major) + "." + std::to_string(host.torch_minor);
  if (!built) {
    mismatch(path, "names torch version '" + manifest.torch_version +
                       "', which is not MAJOR.MINOR[...]; this runtime uses torch " + runtime);
  }
  // AOTInductor's C shim ABI is only promised within one torch minor release.
  if (built->first != host.torch_major || built->second != host.torch_minor) {
    mismatch(path, "was built with torch " + manifest.torch_version +
                       " but this runtime uses torch " + runtime + "; rebuild it with torch " +
                       runtime);
  }
}

// Packages from before the architecture was recorded name none: x86_64 builds, whose cpu_isa
// ("avx2", ...) this host's CPU features then refuse elsewhere.
void check_architecture(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  if (manifest.architecture.empty() || manifest.architecture == host.architecture) return;
  const std::string target = host.architecture == "aarch64" ? "aarch64" : "native";
  mismatch(path, "was built for " + manifest.architecture + ", but this host is " +
                     host.architecture + "; build it with cpu_target='" + target +
                     "' for this host, or run it on an " + manifest.architecture + " machine");
}

void check_device(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  if (manifest.device == "cpu") return;
  if (manifest.device == "cuda") {
    if (!host.cuda_available) {
      mismatch(path, "was built for device 'cuda', but CUDA is not available on this host");
    }
    return;
  }
  mismatch(path, "was built for device '" + manifest.device +
                     "', which this runtime does not support (cpu, cuda)");
}

}  // namespace

void check_host(const Manifest& manifest, const std::string& path, const HostInfo& host) {
  check_architecture(manifest, path, host);
  check_device(manifest, path, host);
  if (host.torch_major != 0) check_torch_version(manifest, path, host);
  // The CPU runs the host-side wrapper code even for CUDA packages.
  check_cpu_target(manifest, path, host);
  check_cpu_isa(manifest, path, host);
}

}  // namespace tdaot::detail
