// A weight file checked against a loaded package before a swap (weights_check.h).
#include "core/weights/weights_check.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {
namespace {

constexpr const char* kModelPrefix = "model/";

// The file's constants of model `name`, by internal name.
std::map<std::string, WeightTensor> constants_of(const WeightFile& file, const std::string& name) {
  const std::string prefix = kModelPrefix + name + "/";
  std::map<std::string, WeightTensor> constants;
  for (const auto& [key, tensor] : file.tensors) {
    if (key.rfind(prefix, 0) == 0) constants.emplace(key.substr(prefix.size()), tensor);
  }
  return constants;
}

// Every model/<m>/ entry names a model of the package; every entry is weights/ or model/.
void check_entries(const WeightFile& file, const std::vector<std::string>& package_models) {
  for (const auto& [key, tensor] : file.tensors) {
    if (key.rfind("weights/", 0) == 0) continue;
    const auto slash = key.find('/', std::string(kModelPrefix).size());
    if (key.rfind(kModelPrefix, 0) != 0 || slash == std::string::npos) {
      refuse_weights(file.path, key, "is neither weights/<name> nor model/<model>/<constant>");
    }
    const std::string model = key.substr(6, slash - 6);
    if (std::find(package_models.begin(), package_models.end(), model) == package_models.end()) {
      refuse_weights(file.path, key,
                     "is for model '" + model + "', which the package does not hold");
    }
  }
}

void check_model(const WeightFile& file, const SwapTarget& target,
                 const std::map<std::string, WeightTensor>& constants) {
  if (!target.unswappable.empty()) {
    throw WeightsError(file.path, "", "weight file '" + file.path +
                                          "' cannot be swapped into model '" + target.name +
                                          "': " + target.unswappable);
  }
  const std::string prefix = kModelPrefix + target.name + "/";
  for (const auto& [name, constant] : *target.table) {
    const auto found = constants.find(name);
    if (found == constants.end()) {
      refuse_weights(file.path, prefix + name,
                     "is missing: model '" + target.name +
                         "' needs it (weights for another architecture or build of the package?)");
    }
    const WeightTensor& tensor = found->second;
    if (tensor.dtype != constant.dtype) {
      refuse_weights(file.path, prefix + name,
                     "has dtype " + dtype_name(tensor.dtype) + ", but model '" + target.name +
                         "' takes " + dtype_name(constant.dtype));
    }
    if (tensor.shape != constant.shape) {
      refuse_weights(file.path, prefix + name,
                     "has shape " + format_shape(tensor.shape) + ", but model '" + target.name +
                         "' takes " + format_shape(constant.shape));
    }
    // The constant lifted from a weight the file also holds: the same bytes, else the file was
    // edited or mixed (the weights digest covers both, so this only refuses it sooner, by name).
    if (constant.fqn.empty()) continue;
    const auto weight = file.tensors.find("weights/" + constant.fqn);
    if (weight == file.tensors.end() || weight->second.dtype != tensor.dtype ||
        weight->second.shape != tensor.shape) {
      continue;
    }
    if (weight->second.nbytes != tensor.nbytes ||
        std::memcmp(weight->second.data.get(), tensor.data.get(), tensor.nbytes) != 0) {
      refuse_weights(file.path, prefix + name,
                     "differs from 'weights/" + constant.fqn +
                         "', the weight it is lifted from: the file's weights digest would not "
                         "cover what model '" + target.name + "' runs (edited or mixed file?)");
    }
  }
  for (const auto& [name, tensor] : constants) {
    if (target.table->count(name) == 0) {
      refuse_weights(file.path, prefix + name,
                     "is not a constant of model '" + target.name +
                         "' (weights for another architecture or build of the package?)");
    }
  }
}

}  // namespace

std::vector<std::map<std::string, WeightTensor>> check_swap(
    const WeightFile& file, const std::string& manifest_sha256,
    const std::vector<std::string>& package_models, const std::vector<SwapTarget>& targets) {
  if (file.base_manifest_sha256 != manifest_sha256) {
    refuse_weights(file.path, "",
                   "was made for the package of sha256 " + file.base_sha256 +
                       " (manifest sha256 " + file.base_manifest_sha256 +
                       "), not for this one (manifest sha256 " + manifest_sha256 + ")");
  }
  check_entries(file, package_models);
  std::vector<std::map<std::string, WeightTensor>> per_model;
  for (const SwapTarget& target : targets) {
    per_model.push_back(constants_of(file, target.name));
    check_model(file, target, per_model.back());
  }
  return per_model;
}

void check_swappable(const std::string& weights_path, const std::string& package_path,
                     const std::string& manifest_weights_sha256) {
  if (!manifest_weights_sha256.empty()) return;
  throw WeightsError(weights_path, "",
                     "weight file '" + weights_path + "' cannot be swapped into package '" +
                         package_path +
                         "': its manifest records no weights digest (it was built by an earlier "
                         "tdaot, or where one of its models could not be loaded, e.g. for "
                         "another architecture), so no digest could say which weights it runs; "
                         "build it again on a host that loads its models to swap its weights");
}

void WeightsLedger::swapped(const std::string& sha256) {
  previous_ = std::exchange(live_, sha256);
  has_previous_ = true;
}

void WeightsLedger::check_rollback(const std::string& package_path) const {
  if (!has_previous_) {
    throw WeightsError("", "", "package '" + package_path +
                                   "' has no previous weights to roll back to (no weights "
                                   "were swapped in, or the last swap failed while loading)");
  }
}

}  // namespace tdaot::detail
