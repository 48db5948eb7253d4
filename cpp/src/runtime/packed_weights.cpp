// oneDNN's packed weights (packed_weights.h).
#include "runtime/packed_weights.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

// mkldnn::_reorder_linear_weight, the op inductor's `freezing` packs a linear layer's weight
// with: the weight in oneDNN's blocked layout for any batch (no batch-size hint).
at::Tensor packed_linear(const at::Tensor& plain) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_reorder_linear_weight", "")
                             .typed<at::Tensor(const at::Tensor&, std::optional<int64_t>)>();
  return op.call(plain.contiguous(), std::nullopt);
}

// mkldnn::_reorder_convolution_weight, `freezing`'s op for a convolution's weight: the layout
// oneDNN's convolution of that geometry takes (no input-size hint: the batch is the caller's).
at::Tensor packed_convolution(const at::Tensor& plain, const PackedConvolution& conv) {
  using Signature = at::Tensor(const at::Tensor&, c10::IntArrayRef, c10::IntArrayRef,
                               c10::IntArrayRef, int64_t, at::OptionalIntArrayRef);
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mkldnn::_reorder_convolution_weight", "")
                             .typed<Signature>();
  return op.call(plain.contiguous(), conv.padding, conv.stride, conv.dilation, conv.groups,
                 std::nullopt);
}

}  // namespace

PackedWeights::PackedWeights(const ModelSpec& spec, const ConstantTable& table,
                             const std::string& path)
    : path_(path), model_(spec.name) {
  for (const std::string& fqn : spec.packed_weights) add(table, fqn, std::nullopt);
  for (const PackedConvolution& conv : spec.packed_convolutions) add(table, conv.weight, conv);
}

void PackedWeights::add(const ConstantTable& table, const std::string& fqn,
                        std::optional<PackedConvolution> convolution) {
  auto it = table.begin();
  while (it != table.end() && it->second.fqn != fqn) ++it;
  if (it == table.end()) {
    const char* field = convolution ? "packed_convolutions" : "packed_weights";
    throw PackageError(path_, "model '" + model_ + "' of package '" + path_ + "' lists '" + fqn +
                                  "' among its " + field + ", but has no constant of that name");
  }
  constants_[it->first] = Packed{fqn, std::move(convolution)};
}

void PackedWeights::pack_live(torch::inductor::AOTIModelContainerRunner& runner) {
  const auto live = runner.extract_constants_map(/*use_inactive=*/false);  // by original name
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
  for (const auto& [name, packed] : constants_) {
    names.push_back(name);
    tensors.push_back(live.at(packed.fqn));  // the constructor found it in the same runner's table
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
    const auto it = constants_.find(names[i]);
    if (it == constants_.end()) continue;
    const std::optional<PackedConvolution>& convolution = it->second.convolution;
    try {
      packed.push_back(convolution ? packed_convolution(tensors[i], *convolution)
                                   : packed_linear(tensors[i]));
    } catch (const std::exception& e) {
      throw PackageError(path_, "model '" + model_ + "' of package '" + path_ +
                                    "': its weight '" + it->second.fqn +
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
