// oneDNN's packed weights (packed_weights.h).
#include "runtime/packed_weights.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

// mkldnn::_reorder_linear_weight, the op inductor's `freezing` packs a linear layer's weight
// with: the weight in oneDNN's blocked layout for any batch (no batch-size hint).
at::Tensor packed_for_onednn(const at::Tensor& plain) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                             .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  return op.call(plain.contiguous(), std::nullopt);
}

}  // namespace

PackedWeights::PackedWeights(const std::vector<std::string>& fqns, const ConstantTable& table,
                             const std::string& path, const std::string& model)
    : path_(path), model_(model) {
  for (const std::string& fqn : fqns) {
    auto it = table.begin();
    while (it != table.end() && it->second.fqn != fqn) ++it;
    if (it == table.end()) {
      throw PackageError(path, "model '" + model + "' of package '" + path + "' lists '" + fqn +
                                   "' among its packed_weights, but has no constant of that name");
    }
    constants_[it->first] = fqn;
  }
}

void PackedWeights::pack_live(torch::inductor::AOTIModelContainerRunner& runner) {
  const auto live = runner.extract_constants_map(/*use_inactive=*/false);  // by original name
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  for (const auto& [name, fqn] : constants_) {
    names.push_back(name);
    tensors.push_back(live.at(fqn));  // the constructor found it in the same runner's table
  }
  hand_over(runner, names, tensors, /*inactive=*/false);
}

void PackedWeights::pack_inactive(torch::inductor::AOTIModelContainerRunner& runner,
                                  const std::vector<std::string>& names,
                                  const std::vector<at::Tensor>& tensors) {
  hand_over(runner, names, tensors, /*inactive=*/true);
}

void PackedWeights::hand_over(torch::inductor::AOTIModelContainerRunner& runner,
                              const std::vector<std::string>& names,
                              const std::vector<at::Tensor>& tensors, bool inactive) {
  std::vector<std::string> packed_names;
  std::vector<at::Tensor> packed;
  for (size_t i = 0; i < names.size(); ++i) {
    if (constants_.count(names[i]) == 0) continue;
    try {
      packed.push_back(packed_for_onednn(tensors[i]));
    } catch (const std::exception& e) {
      throw PackageError(path_, "model '" + model_ + "' of package '" + path_ +
                                    "': its weight '" + constants_.at(names[i]) +
                                    "' could not be packed for oneDNN: " + e.what());
    }
    packed_names.push_back(names[i]);
  }
  torch::inductor::TensorConstantMap map;
  for (size_t i = 0; i < packed.size(); ++i) map[packed_names[i]] = &packed[i];
  runner.update_constant_buffer(map, inactive, /*validate_full_updates=*/false, /*user_managed=*/true);
  // The buffer no longer holds the set it had; the new tensors keep their addresses (the
  // vector's storage moves whole).
  (inactive ? inactive_ : live_) = std::move(packed);
}

}  // namespace tdaot::detail
