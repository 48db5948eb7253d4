// tdaot::Policy's hot weight swap: the public entry points over weights.h.
#include "policy_impl.h"
#include "weights_file.h"

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
  const detail::WeightFile file = detail::read_weight_file(weights_path);
  std::vector<std::string> names;
  for (const ModelSpec& model : self.manifest.models) names.push_back(model.name);
  self.live_weights->swap(file, self.sha256, names, self.weight_targets(), self.device);
}

void Policy::rollback_weights() const {
  const Impl& self = impl();
  self.live_weights->rollback(self.weight_targets(), self.path);
}

std::string Policy::weights_sha256() const { return impl().live_weights->sha256(); }

std::string weights_signing_payload(const std::string& weights_path) {
  return detail::weights_signing_payload(detail::read_weight_file(weights_path));
}

}  // namespace tdaot
