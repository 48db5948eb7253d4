// tdaot::Policy's hot weight swap: the public entry points over weights.h, and the checks of a
// weight file that need no package (file_kind, verify_weights).
#include <array>
#include <fstream>

#include "runtime/policy_impl.h"
#include "core/weights/weights_file.h"

namespace tdaot {

std::vector<detail::SwapModel> Policy::Impl::swap_models() const {
  std::vector<detail::SwapModel> targets;
  for (const Model& model : models) {
    targets.push_back({model.spec->name, model.weights.get(), model.runner.get(), model.packed.get()});
  }
  return targets;
}

std::vector<detail::SwapTarget> Policy::Impl::swap_targets() const {
  return detail::swap_targets(swap_models());
}

void Policy::Impl::apply_swap(
    const detail::WeightFile& file,
    const std::vector<std::map<std::string, detail::WeightTensor>>& per_model) const {
  detail::apply_swap(file, per_model, swap_models(), device);
}

void Policy::Impl::exchange_weights() const { detail::exchange_weights(swap_models()); }

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
