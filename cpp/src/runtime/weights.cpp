// Hot weight swap (weights.h).
#include "runtime/weights.h"

#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <algorithm>
#include <set>
#include <unordered_map>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/types.h"
#include "runtime/weights_file.h"

namespace tdaot::detail {
namespace {

constexpr const char* kModelPrefix = "model/";

// The file's constants of model `name`, by internal name.
std::map<std::string, at::Tensor> constants_of(const WeightFile& file, const std::string& name) {
  const std::string prefix = kModelPrefix + name + "/";
  std::map<std::string, at::Tensor> constants;
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

void check_model(const WeightFile& file, const LiveWeights::Target& target,
                 const std::map<std::string, at::Tensor>& constants) {
  if (!target.weights->unswappable().empty()) {
    throw WeightsError(file.path, "", "weights cannot be swapped into model '" + target.name +
                                          "': " + target.weights->unswappable());
  }
  const std::string prefix = kModelPrefix + target.name + "/";
  for (const auto& [name, constant] : target.weights->table()) {
    const auto found = constants.find(name);
    if (found == constants.end()) {
      refuse_weights(file.path, prefix + name,
             "is missing: model '" + target.name +
                 "' needs it (weights for another architecture or build of the package?)");
    }
    const at::Tensor& tensor = found->second;
    if (tensor.scalar_type() != constant.dtype) {
      refuse_weights(file.path, prefix + name,
             "has dtype " + dtype_name(tensor.scalar_type()) + ", but model '" + target.name +
                 "' takes " + dtype_name(constant.dtype));
    }
    if (tensor.sizes().vec() != constant.shape) {
      refuse_weights(file.path, prefix + name,
             "has shape " + format_shape(tensor.sizes().vec()) + ", but model '" + target.name +
                 "' takes " + format_shape(constant.shape));
    }
  }
  for (const auto& [name, tensor] : constants) {
    if (target.weights->table().count(name) == 0) {
      refuse_weights(file.path, prefix + name,
             "is not a constant of model '" + target.name +
                 "' (weights for another architecture or build of the package?)");
    }
  }
}

}  // namespace

ModelWeights::ModelWeights(const torch::inductor::AOTIModelContainerRunner& runner) {
  const auto fqns = runner.getConstantNamesToOriginalFQNs();
  const auto values = runner.extract_constants_map(/*use_inactive=*/false);  // by original name
  std::set<std::string> seen;
  for (const auto& [name, fqn] : fqns) {
    const auto value = values.find(fqn);
    if (!seen.insert(fqn).second || value == values.end()) {
      unswappable_ = "its constant '" + name + "' (original name '" + fqn +
                     "') cannot be told apart from the others";
      table_.clear();
      return;
    }
    table_[name] = Constant{value->second.scalar_type(), value->second.sizes().vec()};
  }
}

void ModelWeights::refresh(const ArrayrefLibrary& library, AOTInductorModelHandle& handle,
                           uint64_t& seen) const {
  if (seen == generation_.load(std::memory_order_acquire)) return;
  std::shared_ptr<const ConstantSet> set;
  uint64_t generation = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    set = live_;
    generation = generation_.load(std::memory_order_relaxed);
  }
  if (!set) {
    AOTInductorModelHandle fresh = library.new_instance();  // the library's own constants
    library.destroy(handle);
    handle = fresh;
  } else {
    std::vector<AOTInductorConstantMapEntry> pairs;
    pairs.reserve(set->names.size());
    for (size_t i = 0; i < set->names.size(); ++i) {
      // The instance takes ownership of the handle; the tensor shares the set's memory.
      pairs.push_back({set->names[i].c_str(),
                       torch::aot_inductor::new_tensor_handle(at::Tensor(set->tensors[i]))});
    }
    if (library.update_constants(handle, pairs.data(), static_cast<int32_t>(pairs.size())) !=
        AOTI_RUNTIME_SUCCESS) {
      throw Error("could not give a model instance its new weights: " + library.error_text());
    }
  }
  seen = generation;
}

void ModelWeights::publish(std::shared_ptr<const ConstantSet> set) {
  const std::lock_guard<std::mutex> lock(mutex_);
  previous_ = std::move(live_);
  live_ = std::move(set);
  generation_.fetch_add(1, std::memory_order_release);
}

void ModelWeights::exchange() {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::swap(live_, previous_);
  generation_.fetch_add(1, std::memory_order_release);
}

std::string LiveWeights::sha256() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return live_;
}

void LiveWeights::swap(const WeightFile& file, const std::string& manifest_sha256,
                       const std::vector<std::string>& package_models,
                       const std::vector<Target>& targets, c10::Device device) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (file.base_manifest_sha256 != manifest_sha256) {
    refuse_weights(file.path, "",
                   "was made for the package of sha256 " + file.base_sha256 +
                       " (manifest sha256 " + file.base_manifest_sha256 +
                       "), not for this one (manifest sha256 " + manifest_sha256 + ")");
  }
  check_entries(file, package_models);
  std::vector<std::map<std::string, at::Tensor>> per_model;
  for (const Target& target : targets) {
    per_model.push_back(constants_of(file, target.name));
    check_model(file, target, per_model.back());
  }
  // Everything is checked: from here on, the inactive buffers are written.
  has_previous_ = false;  // until the swap completes, the inactive buffers hold neither set
  std::vector<std::shared_ptr<const ConstantSet>> sets(targets.size());
  for (size_t i = 0; i < targets.size(); ++i) {
    auto set = std::make_shared<ConstantSet>();
    for (auto& [name, tensor] : per_model[i]) {
      set->names.push_back(name);
      set->tensors.push_back(tensor.to(device));
    }
    if (targets[i].runner != nullptr) {
      torch::inductor::TensorConstantMap map;
      for (size_t j = 0; j < set->names.size(); ++j) map[set->names[j]] = &set->tensors[j];
      try {
        targets[i].runner->update_constant_buffer(map, /*use_inactive=*/true,
                                                  /*validate_full_updates=*/true);
      } catch (const std::exception& e) {
        throw WeightsError(file.path, "", "weight file '" + file.path +
                                              "' could not be loaded into model '" +
                                              targets[i].name + "': " + e.what());
      }
    } else {
      sets[i] = std::move(set);
    }
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].runner != nullptr) {
      targets[i].runner->swap_constant_buffer();  // waits for the calls in flight
    } else {
      targets[i].weights->publish(std::move(sets[i]));
    }
  }
  previous_ = std::exchange(live_, file.weights_sha256);
  has_previous_ = true;
}

void LiveWeights::rollback(const std::vector<Target>& targets, const std::string& package_path) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!has_previous_) {
    throw WeightsError("", "", "package '" + package_path +
                                   "' has no previous weights to roll back to (no weights "
                                   "were swapped in, or the last swap failed while loading)");
  }
  for (const Target& target : targets) {
    if (target.runner != nullptr) {
      target.runner->swap_constant_buffer();
    } else {
      target.weights->exchange();
    }
  }
  std::swap(live_, previous_);
}

}  // namespace tdaot::detail
