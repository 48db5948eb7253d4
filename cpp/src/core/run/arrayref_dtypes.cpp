// A minimal-arrayref model's recorded dtypes against the manifest (arrayref_dtypes.h).
#include "core/run/arrayref_dtypes.h"

#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <vector>

#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

std::optional<DType> cpp_dtype(std::string_view type) {
  constexpr std::pair<std::string_view, DType> kTypes[] = {
      {"float", DType::Float32},        {"double", DType::Float64},
      {"half", DType::Float16},         {"c10::Half", DType::Float16},
      {"at::Half", DType::Float16},     {"bfloat16", DType::BFloat16},
      {"c10::BFloat16", DType::BFloat16}, {"at::BFloat16", DType::BFloat16},
      {"int64_t", DType::Int64},        {"int32_t", DType::Int32},
      {"int16_t", DType::Int16},        {"int8_t", DType::Int8},
      {"uint8_t", DType::UInt8},        {"bool", DType::Bool},
  };
  for (const auto& [name, dtype] : kTypes) {
    if (name == type) return dtype;
  }
  return std::nullopt;
}

// The element types of `using NAME = std::tuple<ArrayRefTensor<T>, ...>;`, or nullopt.
std::optional<std::vector<std::optional<DType>>> tuple_types(const std::string& source,
                                                             const std::string& name) {
  const std::string head = "using " + name + " = std::tuple<";
  const size_t start = source.find(head);
  if (start == std::string::npos) return std::nullopt;
  const size_t end = source.find(">;", start);
  if (end == std::string::npos) return std::nullopt;
  const std::string_view body(source.data() + start + head.size(), end - start - head.size());
  std::vector<std::optional<DType>> types;
  constexpr std::string_view kTensor = "ArrayRefTensor<";
  for (size_t at = body.find(kTensor); at != std::string_view::npos;
       at = body.find(kTensor, at + 1)) {
    const size_t from = at + kTensor.size();
    const size_t close = body.find('>', from);
    if (close == std::string_view::npos) return std::nullopt;
    types.push_back(cpp_dtype(body.substr(from, close - from)));
  }
  return types;
}

void compare(const std::vector<std::optional<DType>>& compiled,
             const std::vector<TensorSpec>& specs, const char* what, const std::string& model,
             const std::string& package_path) {
  const std::string head = "package '" + package_path + "': model '" + model + "' was compiled for ";
  if (compiled.size() != specs.size()) {
    throw ManifestError(package_path, head + std::to_string(compiled.size()) + " " + what +
                                          ", but the manifest lists " +
                                          std::to_string(specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (compiled[i] && *compiled[i] != specs[i].dtype) {
      throw ManifestError(package_path, head + std::string(what, std::string(what).size() - 1) +
                                            " '" + specs[i].key + "' of dtype " +
                                            dtype_name(*compiled[i]) +
                                            " (its wrapper source's ArrayRefTensor types), but "
                                            "the manifest says " + dtype_name(specs[i].dtype));
    }
  }
}

}  // namespace

void check_arrayref_dtypes(const std::string& library, const Manifest& manifest,
                           const std::string& model, const std::string& package_path) {
  const size_t dot = library.rfind(".so");
  if (dot == std::string::npos || dot + 3 != library.size()) return;
  std::ifstream in(library.substr(0, dot) + ".cpp", std::ios::binary);
  if (!in) return;
  std::ostringstream text;
  text << in.rdbuf();
  const std::string source = text.str();
  if (const auto inputs = tuple_types(source, "AOTInductorModelInputs")) {
    compare(*inputs, manifest.inputs, "inputs", model, package_path);
  }
  if (const auto outputs = tuple_types(source, "AOTInductorModelOutputs")) {
    compare(*outputs, manifest.outputs, "outputs", model, package_path);
  }
}

}  // namespace tdaot::detail
