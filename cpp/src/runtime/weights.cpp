// Hot weight swap (weights.h).
#include "runtime/weights.h"

#include <ATen/Functions.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>

#include <set>
#include <utility>

#include "tdaot/errors.h"
#include "tdaot/torch/types.h"

namespace tdaot::detail {
namespace {

// A weight file's tensor as an ATen tensor on `device` (its own memory) in the strides of the
// model's constant `info` (the copy keeps them: the tensor is dense).
at::Tensor to_tensor(const WeightTensor& tensor, const ConstantInfo& info, c10::Device device) {
  const WeightTensor laid = in_layout(tensor, info.strides);
  const auto options = at::dtype(to_scalar_type(laid.dtype));
  const at::Tensor view = info.strides.empty() ? at::from_blob(laid.data.get(), laid.shape, options)
                                               : at::from_blob(laid.data.get(), laid.shape, info.strides, options);
  return view.to(device, /*non_blocking=*/false, /*copy=*/true);
}

// A runner's live and inactive constant buffers traded (waiting for the calls in flight), its
// packed weights' sets with them.
void swap_buffers(const SwapModel& model) {
  model.runner->swap_constant_buffer();
  if (model.packed != nullptr) model.packed->buffers_swapped();
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
    table_[name] = ConstantInfo{static_cast<DType>(value->second.scalar_type()),
                                value->second.sizes().vec(), value->second.strides().vec(), fqn};
  }
}

void ModelWeights::refresh(const ArrayrefLibrary& library, AOTInductorModelHandle& handle,
                           uint64_t& seen) const {
  if (!sets_.behind(seen)) return;
  const auto [set, generation] = sets_.live();
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

std::vector<SwapTarget> swap_targets(const std::vector<SwapModel>& models) {
  std::vector<SwapTarget> targets;
  for (const SwapModel& model : models) {
    targets.push_back({model.name, &model.weights->table(), model.weights->unswappable()});
  }
  return targets;
}

void apply_swap(const WeightFile& file, const std::vector<std::map<std::string, WeightTensor>>& per_model,
                const std::vector<SwapModel>& models, c10::Device device) {
  // The inactive buffers are written first: until the swap completes they hold neither set.
  std::vector<std::shared_ptr<const ConstantSet>> sets(models.size());
  for (size_t i = 0; i < models.size(); ++i) {
    auto set = std::make_shared<ConstantSet>();
    const ConstantTable& table = models[i].weights->table();
    for (const auto& [name, tensor] : per_model[i]) {
      set->names.push_back(name);
      set->tensors.push_back(to_tensor(tensor, table.at(name), device));
    }
    if (models[i].runner != nullptr) {
      torch::inductor::TensorConstantMap map;
      for (size_t j = 0; j < set->names.size(); ++j) map[set->names[j]] = &set->tensors[j];
      try {
        models[i].runner->update_constant_buffer(map, /*use_inactive=*/true,
                                                 /*validate_full_updates=*/true);
        if (models[i].packed != nullptr) {
          models[i].packed->pack_inactive(*models[i].runner, set->names, set->tensors);
        }
      } catch (const std::exception& e) {
        throw WeightsError(file.path, "", "weight file '" + file.path +
                                              "' could not be loaded into model '" +
                                              models[i].name + "': " + e.what());
      }
    } else {
      sets[i] = std::move(set);
    }
  }
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].runner != nullptr) {
      swap_buffers(models[i]);
    } else {
      models[i].weights->sets().publish(std::move(sets[i]));
    }
  }
}

void exchange_weights(const std::vector<SwapModel>& models) {
  for (const SwapModel& model : models) {
    if (model.runner != nullptr) {
      swap_buffers(model);
    } else {
      model.weights->sets().exchange();
    }
  }
}

}  // namespace tdaot::detail
