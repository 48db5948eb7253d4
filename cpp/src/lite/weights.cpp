// Hot weight swap on the lite runtime (lite/weights.h).
#include "lite/weights.h"

#include <set>
#include <type_traits>
#include <unordered_map>
#include <utility>

#include "shim.h"
#include "tdaot/errors.h"

namespace tdaot::detail {
const ConstantTable& LiteModelWeights::table() {
  if (!table_read_) read_table();
  return table_;
}

void LiteModelWeights::read_table() {
  table_read_ = true;
  if (library_.update_constants == nullptr) {
    unswappable_ = "its library lacks AOTInductorModelUpdateConstantsMapV2";
    return;
  }
  aoti::ContainerCreateWithDevice create = nullptr;
  aoti::ContainerDelete destroy = nullptr;
  aoti::ContainerGetNumConstants count_constants = nullptr;
  aoti::ContainerGetConstantText name_of = nullptr;
  aoti::ContainerGetConstantText fqn_of = nullptr;
  aoti::ContainerExtractConstantsMapEntries extract = nullptr;
  const auto need = [this](auto& entry, const char* name) {
    entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(library_.symbol(name));
    if (entry == nullptr) {
      unswappable_ = std::string("its library lacks ") + name +
                     ", through which the lite runtime reads its constant table";
    }
    return entry != nullptr;
  };
  if (!need(create, "AOTInductorModelContainerCreateWithDevice") ||
      !need(destroy, "AOTInductorModelContainerDelete") ||
      !need(count_constants, "AOTInductorModelContainerGetNumConstants") ||
      !need(name_of, "AOTInductorModelContainerGetConstantName") ||
      !need(fqn_of, "AOTInductorModelContainerGetConstantOriginalFQN") ||
      !need(extract, "AOTInductorModelContainerExtractConstantsMapEntries")) {
    return;
  }
  aoti::ContainerHandle raw = nullptr;
  if (create(&raw, 1, "cpu", nullptr) != aoti::kSuccess || raw == nullptr) {
    unswappable_ = "its constant table could not be read: " + library_.error_text();
    return;
  }
  // Kept alive by the set of the constants the model was built with, which points into it.
  const std::shared_ptr<void> container(raw, [destroy](void* c) {
    destroy(static_cast<aoti::ContainerHandle>(c));
  });
  size_t count = 0;
  const aoti::ConstantMapEntry* entries = nullptr;
  size_t extracted = 0;
  if (count_constants(raw, &count) != aoti::kSuccess ||
      extract(raw, &entries, &extracted, /*use_inactive=*/false) != aoti::kSuccess) {
    unswappable_ = "its constant table could not be read: " + library_.error_text();
    return;
  }
  std::unordered_map<std::string, AtenTensorHandle> values;  // by original name
  for (size_t i = 0; i < extracted; ++i) {
    values.emplace(entries[i].name, static_cast<AtenTensorHandle>(entries[i].handle));
  }
  auto built = std::make_shared<LiteConstantSet>();
  std::set<std::string> seen;
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    const char* fqn = nullptr;
    if (name_of(raw, i, &name) != aoti::kSuccess || fqn_of(raw, i, &fqn) != aoti::kSuccess) {
      unswappable_ = "its constant table could not be read: " + library_.error_text();
      table_.clear();
      return;
    }
    const auto value = values.find(fqn);
    if (!seen.insert(fqn).second || value == values.end()) {
      unswappable_ = std::string("its constant '") + name + "' (original name '" + fqn +
                     "') cannot be told apart from the others";
      table_.clear();
      return;
    }
    const lite::shim::Tensor& tensor = *lite::shim::from_handle(value->second);
    LiteConstant constant{name,
                          static_cast<DType>(tensor.dtype),
                          {tensor.sizes, tensor.sizes + tensor.ndim},
                          {tensor.strides, tensor.strides + tensor.ndim},
                          tensor.data(),
                          container};
    table_[name] = ConstantInfo{constant.dtype, constant.sizes, constant.strides, fqn};
    built->push_back(std::move(constant));
  }
  sets_.hold(std::move(built));  // what every instance already holds: no generation change
}

void LiteModelWeights::refresh(aoti::ModelHandle instance, uint64_t& seen,
                               std::shared_ptr<const LiteConstantSet>& held) const {
  if (!sets_.behind(seen)) return;
  auto [set, generation] = sets_.live();
  std::vector<aoti::ConstantMapEntry> pairs;
  pairs.reserve(set->size());
  for (const LiteConstant& constant : *set) {
    AtenTensorHandle handle = lite::shim::borrow(
        constant.data, static_cast<int64_t>(constant.sizes.size()), constant.sizes.data(),
        constant.strides.empty() ? nullptr : constant.strides.data(),
        static_cast<int32_t>(constant.dtype));
    if (handle == nullptr) {
      for (const aoti::ConstantMapEntry& made : pairs) {
        lite::shim::release(static_cast<AtenTensorHandle>(made.handle));
      }
      throw Error("could not give model '" + library_.path() + "' its new constant '" +
                  constant.name + "': " + lite::shim::last_error());
    }
    pairs.push_back({constant.name.c_str(), handle});
  }
  // The instance owns the handles from here (also when the call fails); they borrow the set's
  // memory, which `held` keeps alive while the instance may read it.
  if (library_.update_constants(instance, pairs.data(), static_cast<int32_t>(pairs.size())) !=
      aoti::kSuccess) {
    throw Error("could not give a model instance of '" + library_.path() +
                "' its new weights: " + library_.error_text());
  }
  held = std::move(set);
  seen = generation;
}

SwapTarget swap_target(const std::string& name, LiteModelWeights& weights) {
  const ConstantTable& table = weights.table();  // read at the first swap
  return {name, &table, weights.unswappable()};
}

void publish_swap(const std::map<std::string, WeightTensor>& constants, LiteModelWeights& weights) {
  auto set = std::make_shared<LiteConstantSet>();
  const ConstantTable& table = weights.table();
  for (const auto& [name, tensor] : constants) {
    const std::vector<int64_t>& strides = table.at(name).strides;
    const WeightTensor laid = in_layout(tensor, strides);
    set->push_back({name, laid.dtype, laid.shape, strides, laid.data.get(), laid.data});
  }
  weights.sets().publish(std::move(set));
}

}  // namespace tdaot::detail
