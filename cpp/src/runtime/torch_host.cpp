// The full runtime's host: what this process's libtorch offers.
#include "runtime/torch_host.h"

#include <ATen/Context.h>
#include <ATen/cpu/Utils.h>
#include <torch/version.h>

namespace tdaot::detail {
namespace {

HostInfo detect_host() {
  HostInfo host;
  host.cuda_available = at::hasCUDA();
  host.torch_major = TORCH_VERSION_MAJOR;
  host.torch_minor = TORCH_VERSION_MINOR;
  for (const auto& [name, value] : at::cpu::get_cpu_capabilities()) {
    if (value.isBool()) host.cpu_features.emplace(name, value.toBool());
  }
  return host;
}

}  // namespace

const HostInfo& current_host() {
  static const HostInfo host = detect_host();
  return host;
}

}  // namespace tdaot::detail
