// tdaot::Policy's hot weight swap: the public entry points over weights.h, and the checks of a
// weight file that need no package (file_kind, verify_weights).
#include <array>
#include <fstream>

#include "runtime/policy_impl.h"
#include "core/weights/weights_file.h"

namespace tdaot {

std::vector<detail::LiveWeights::Target> Policy::Impl::weight_targets() const {
  std::vector<detail::LiveWeights::Target> targets;
  for (const Model& model : models) {
    targets.push_back({model.spec->name, model.weights.get(), model.runner.get()});
  }
  return targets;
}

void Policy::swap_weights(const std::string& weights_path) const {
  const Impl& self = impl();
  const detail::WeightFile file = detail::read_swap_file(weights_path, self.trusted_keys);
  std::vector<std::string> names;
  for (const ModelSpec& model : self.manifest.models) names.push_back(model.name);
  self.live_weights->swap(file, self.manifest_sha256, names, self.weight_targets(), self.device);
}

void Policy::rollback_weights() const {
  const Impl& self = impl();
  self.live_weights->rollback(self.weight_targets(), self.path);
}

std::string Policy::weights_sha256() const { return impl().live_weights->sha256(); }

std::string weights_signing_payload(const std::string& weights_path) {
  return detail::weights_signing_payload(detail::read_weight_file(weights_path));
}

WeightFileInfo verify_weights(const std::string& weights_path,
                              const std::vector<std::string>& trusted_keys) {
  const detail::WeightFile file = detail::read_weight_file(weights_path);
  WeightFileInfo info{file.base_sha256, file.base_manifest_sha256, file.weights_sha256, ""};
  if (!trusted_keys.empty()) {
    info.signed_by = detail::verify_weights_signature(
        file, detail::load_public_keys(trusted_keys, weights_path));
  }
  return info;
}

}  // namespace tdaot
