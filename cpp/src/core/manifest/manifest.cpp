// The manifest: serialising (to_json), lookups, dtype names and message formatting. Parsing
// (Manifest::from_json) lives in manifest_parse.cpp; reading one out of a package in package.cpp.
#include "tdaot/manifest.h"

#include <nlohmann/json.hpp>
#include <string_view>

#include "core/manifest/manifest_internal.h"
#include "core/manifest/manifest_schema.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace {

using detail::json;
using detail::kDtypes;
using detail::lookup_dtype;
using detail::manifest_prefix;
using detail::range_text;
using detail::unknown_dtype_message;

json spec_to_json(const TensorSpec& spec) {
  return json::object(
      {{"key", spec.key}, {"dtype", dtype_name(spec.dtype)}, {"shape", spec.shape}});
}

json specs_to_json(const std::vector<TensorSpec>& specs) {
  json list = json::array();
  for (const auto& spec : specs) list.push_back(spec_to_json(spec));
  return list;
}

std::optional<size_t> index_of(const std::vector<TensorSpec>& specs, const std::string& key) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].key == key) return i;
  }
  return std::nullopt;
}

}  // namespace

std::optional<size_t> Manifest::input_index(const std::string& key) const {
  return index_of(inputs, key);
}

std::optional<size_t> Manifest::output_index(const std::string& key) const {
  return index_of(outputs, key);
}

const ModelSpec* Manifest::model_for(int64_t batch) const {
  const size_t best =
      narrowest_model(models.size(), batch, [&](size_t i) -> const ModelSpec& { return models[i]; });
  return best == models.size() ? nullptr : &models[best];
}

std::string Manifest::describe_models() const {
  std::string out;
  for (const auto& model : models) {
    out += (out.empty() ? "'" : ", '") + model.name + "' " + range_text(model.batch);
  }
  return out;
}

std::string Manifest::to_json(int indent) const {
  // ordered_json keeps the field order the Python stage writes, for readable diffs.
  nlohmann::ordered_json out;
  out["schema_version"] = schema_version;
  out["inputs"] = specs_to_json(inputs);
  out["outputs"] = specs_to_json(outputs);
  out["batch"] = {{"min", batch.min}, {"max", batch.max}};
  // The model synthesised for a manifest without "models" is not written back.
  const bool synthesised = models.size() == 1 && models[0].tuning.empty() &&
                           models[0].name == kDefaultModelName && models[0].batch.min == batch.min &&
                           models[0].batch.max == batch.max;
  if (!models.empty() && !synthesised) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& model : models) {
      nlohmann::ordered_json entry = {
          {"name", model.name},
          {"batch", {{"min", model.batch.min}, {"max", model.batch.max}}},
          {"tuning", model.tuning}};
      if (model.lite) {
        entry["lite"] = {{"runs", model.lite->runs}, {"needs", model.lite->needs}};
        if (!model.lite->runs) {
          entry["lite"]["missing"] = model.lite->missing;
          entry["lite"]["why"] = model.lite->why;
        }
      }
      if (model.chunk_rows) entry["chunk_rows"] = *model.chunk_rows;
      if (!model.packed_weights.empty()) entry["packed_weights"] = model.packed_weights;
      for (const PackedConvolution& conv : model.packed_convolutions) {
        entry["packed_convolutions"].push_back({{"weight", conv.weight},
                                                {"padding", conv.padding},
                                                {"stride", conv.stride},
                                                {"dilation", conv.dilation},
                                                {"groups", conv.groups}});
      }
      list.push_back(std::move(entry));
    }
    out["models"] = list;
  }
  out["interaction_type"] = interaction_type;
  out["device"] = device;
  out["cpu_target"] = cpu_target;
  out["cpu_isa"] = cpu_isa;
  if (!architecture.empty()) out["architecture"] = architecture;  // absent in older packages
  out["torch_version"] = torch_version;
  out["tensordict_version"] = tensordict_version;
  out["tdaot_version"] = tdaot_version;
  out["source"] = {{"module_class", source.module_class},
                   {"factory", source.factory.empty() ? json(nullptr) : json(source.factory)}};
  // Written only when present, as the Python stage does: older readers never see it.
  if (recurrent) {
    json state = json::array();
    for (const auto& pair : recurrent->state) {
      state.push_back({{"input", pair.input}, {"output", pair.output}});
    }
    out["recurrent"] = {
        {"state", state},
        {"is_init", recurrent->is_init.empty() ? json(nullptr) : json(recurrent->is_init)}};
  }
  if (!custom_ops.empty()) out["custom_ops"] = custom_ops;
  if (contract) out["contract"] = detail::contract_to_json(*contract);
  if (patches) out["patches"] = *patches;  // absent: not recorded
  if (numerics) out["numerics"] = *numerics;
  if (!files.empty()) out["files"] = files;  // empty: unsealed
  if (!weights_sha256.empty()) out["weights_sha256"] = weights_sha256;
  for (const auto& [name, value] : extra) out[name] = nlohmann::ordered_json::parse(value);
  return out.dump(indent);
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& entry : kDtypes) names.emplace_back(entry.first);
  return names;
}

bool digest_exempt(std::string_view name) {
  if (name == kSignatureEntry) return true;
  for (const auto& record : kBookkeepingRecords) {
    if (name == record) return true;
  }
  constexpr std::string_view prefix = "data/aotinductor/";
  constexpr std::string_view suffix = "_metadata.json";
  return name.size() >= prefix.size() + suffix.size() && name.substr(0, prefix.size()) == prefix &&
         name.substr(name.size() - suffix.size()) == suffix;
}

std::string lite_text(const ModelSpec& model) {
  if (model.lite && model.lite->runs) return "lite";
  return "needs libtorch: " +
         (model.lite ? model.lite->why : std::string("not recorded (built before tdaot recorded it)"));
}

std::string dtype_name(DType dtype) {
  for (const auto& [name, known] : kDtypes) {
    if (known == dtype) return std::string(name);
  }
  return "dtype code " + std::to_string(static_cast<int32_t>(dtype));
}

DType dtype_from_name(const std::string& name, const std::string& origin) {
  const auto dtype = lookup_dtype(name);
  if (!dtype) throw ManifestError(origin, manifest_prefix(origin) + unknown_dtype_message(name));
  return *dtype;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string format_batched_shape(const std::vector<int64_t>& shape) {
  std::string out = "[B";
  for (int64_t dim : shape) out += ", " + std::to_string(dim);
  return out + "]";
}

}  // namespace tdaot
