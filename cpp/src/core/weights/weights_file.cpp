// Reading and checking a tdaot weight file (weights_file.h). No torch: values are checked and
// digested as the bytes they are.
#include "core/weights/weights_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/package/digest.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {
namespace {

constexpr std::pair<const char*, DType> kDtypes[] = {
    {"F32", DType::Float32}, {"F64", DType::Float64}, {"F16", DType::Float16},
    {"BF16", DType::BFloat16}, {"I64", DType::Int64}, {"I32", DType::Int32},
    {"I16", DType::Int16}, {"I8", DType::Int8}, {"U8", DType::UInt8}, {"BOOL", DType::Bool},
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) refuse_weights(path, "", "cannot be opened");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) refuse_weights(path, "", "could not be read");
  return bytes;
}

std::string metadata_entry(const WeightFile& file, const std::string& key) {
  const auto it = file.metadata.find(key);
  if (it == file.metadata.end()) {
    refuse_weights(file.path, "", "is not a tdaot weight file: its metadata lacks '" + key +
                              "' (make weight files with tdaot.export_weights)");
  }
  return it->second;
}

std::shared_ptr<void> aligned_bytes(size_t nbytes) {
  const size_t rounded = std::max<size_t>(64, (nbytes + 63) / 64 * 64);
  void* memory = std::aligned_alloc(64, rounded);
  if (memory == nullptr) throw std::bad_alloc();
  return std::shared_ptr<void>(memory, [](void* p) { std::free(p); });
}

// Whether every element is finite; integer and bool tensors always are.
bool all_finite(const WeightTensor& tensor) {
  const size_t count = tensor.nbytes / element_size(tensor.dtype);
  const auto check = [&](auto sample, auto finite) {
    const auto* values = static_cast<const decltype(sample)*>(tensor.data.get());
    return std::all_of(values, values + count, finite);
  };
  switch (tensor.dtype) {
    case DType::Float32: return check(float{}, [](float v) { return std::isfinite(v); });
    case DType::Float64: return check(double{}, [](double v) { return std::isfinite(v); });
    // Half floats by their bits: all exponent bits set is infinity or NaN.
    case DType::Float16: return check(uint16_t{}, [](uint16_t v) { return (v & 0x7C00) != 0x7C00; });
    case DType::BFloat16: return check(uint16_t{}, [](uint16_t v) { return (v & 0x7F80) != 0x7F80; });
    default: return true;
  }
}

WeightTensor parse_tensor(const std::string& path, const std::string& name,
                          const nlohmann::json& entry, const std::string& bytes, size_t data_start) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets")) {
    refuse_weights(path, name, "has a malformed header entry");
  }
  const auto code = entry["dtype"].get<std::string>();
  const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const auto& d) { return code == d.first; });
  if (found == std::end(kDtypes)) {
    refuse_weights(path, name, "has dtype '" + code + "', which tdaot does not use");
  }
  WeightTensor tensor;
  tensor.dtype = found->second;
  // Checked: a shape with more elements than any file holds is refused, never wrapped around.
  constexpr uint64_t kLimit = uint64_t{1} << 56;
  uint64_t count = 1;
  bool too_large = false;
  for (const auto& size : entry["shape"]) {
    const auto value = size.get<int64_t>();
    if (value < 0) refuse_weights(path, name, "has a negative size in its shape");
    tensor.shape.push_back(value);
    if (value != 0 && count > kLimit / static_cast<uint64_t>(value)) too_large = true;
    count *= static_cast<uint64_t>(value);
  }
  const auto offsets = entry["data_offsets"].get<std::vector<uint64_t>>();
  const uint64_t available = bytes.size() - data_start;
  if (offsets.size() != 2 || offsets[0] > offsets[1] || offsets[1] > available) {
    refuse_weights(path, name, "lies outside the file (truncated?)");
  }
  const uint64_t needed = count * element_size(tensor.dtype);
  if (too_large || needed != offsets[1] - offsets[0]) {
    refuse_weights(path, name, "holds " + std::to_string(offsets[1] - offsets[0]) +
                                   " bytes, but its dtype and shape need " +
                                   (too_large ? std::string("more") : std::to_string(needed)));
  }
  tensor.nbytes = static_cast<size_t>(needed);
  tensor.data = aligned_bytes(tensor.nbytes);
  std::memcpy(tensor.data.get(), bytes.data() + data_start + offsets[0], tensor.nbytes);
  return tensor;
}

}  // namespace

void refuse_weights(const std::string& path, const std::string& tensor,
                    const std::string& problem) {
  const std::string where = tensor.empty() ? "" : ": tensor '" + tensor + "'";
  throw WeightsError(path, tensor, "weight file '" + path + "'" + where + " " + problem);
}

std::string safetensors_dtype(DType dtype) {
  for (const auto& [code, type] : kDtypes) {
    if (type == dtype) return code;
  }
  throw Error("dtype " + dtype_name(dtype) + " has no safetensors code");
}

std::string canonical_digest(const std::map<std::string, WeightTensor>& tensors) {
  std::string payload;
  for (const auto& [name, tensor] : tensors) {  // std::map: bytewise name order
    std::string shape;
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      shape += (i ? "," : "") + std::to_string(tensor.shape[i]);
    }
    payload += name + "\n" + safetensors_dtype(tensor.dtype) + "\n" + shape + "\n" +
               std::to_string(tensor.nbytes) + "\n";
    payload.append(static_cast<const char*>(tensor.data.get()), tensor.nbytes);
  }
  return sha256_hex(payload);
}

std::string weights_signing_payload(const WeightFile& file) {
  return std::string(kWeightsFormat) + "\nbase_sha256 " + file.base_sha256 +
         "\nbase_manifest_sha256 " + file.base_manifest_sha256 + "\nweights_sha256 " +
         file.weights_sha256 + "\ncontent_sha256 " + file.content_sha256 + "\n";
}

std::string verify_weights_signature(const WeightFile& file,
                                     const std::vector<PublicKey>& trusted) {
  const auto found = file.metadata.find(kWeightsSignaturesKey);
  const std::optional<std::string> signatures =
      found == file.metadata.end() ? std::nullopt : std::optional<std::string>(found->second);
  return verify_signatures(weights_signing_payload(file), signatures, trusted,
                           {file.path, "weight file '" + file.path + "'", "header"});
}

WeightFile read_swap_file(const std::string& path, const std::vector<PublicKey>& trusted) {
  WeightFile file = read_weight_file(path);
  if (!trusted.empty()) verify_weights_signature(file, trusted);
  return file;
}

WeightTensor in_layout(const WeightTensor& tensor, const std::vector<int64_t>& strides) {
  const size_t dims = tensor.shape.size();
  if (strides.empty()) return tensor;
  if (strides.size() != dims) {
    throw InternalError(std::to_string(strides.size()) + " strides for a tensor of " +
                std::to_string(dims) + " dims");
  }
  int64_t count = 1;
  int64_t span = 1;  // elements from the first to one past the last
  bool contiguous = true;
  for (size_t d = dims; d-- > 0;) {
    if (strides[d] < 0) throw InternalError("a negative stride");
    if (tensor.shape[d] != 1 && strides[d] != count) contiguous = false;
    if (tensor.shape[d] == 0) return tensor;
    span += (tensor.shape[d] - 1) * strides[d];
    count *= tensor.shape[d];
  }
  if (contiguous) return tensor;
  const size_t size = element_size(tensor.dtype);
  WeightTensor laid = tensor;
  laid.nbytes = static_cast<size_t>(span) * size;
  laid.data = aligned_bytes(laid.nbytes);
  std::memset(laid.data.get(), 0, laid.nbytes);
  const auto* from = static_cast<const unsigned char*>(tensor.data.get());
  auto* to = static_cast<unsigned char*>(laid.data.get());
  std::vector<int64_t> index(dims, 0);
  int64_t offset = 0;  // of element `index` in the new layout
  for (int64_t i = 0; i < count; ++i) {
    std::memcpy(to + offset * size, from + i * size, size);
    for (size_t d = dims; d-- > 0;) {  // the next index in row-major order
      offset += strides[d];
      if (++index[d] < tensor.shape[d]) break;
      offset -= index[d] * strides[d];
      index[d] = 0;
    }
  }
  return laid;
}

WeightFile read_weight_file(const std::string& path) {
  WeightFile file;
  file.path = path;
  const std::string bytes = read_all(path);
  uint64_t header_size = 0;
  if (bytes.size() < 8) {
    refuse_weights(path, "", "is too short to be a safetensors file (truncated?)");
  }
  for (int i = 7; i >= 0; --i) {  // little-endian
    header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (header_size > bytes.size() - 8) {
    refuse_weights(path, "", "has a header longer than the file (truncated?)");
  }
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, header_size));
  } catch (const nlohmann::json::exception& e) {
    refuse_weights(path, "", std::string("has a header that is not JSON: ") + e.what());
  }
  if (!header.is_object()) refuse_weights(path, "", "has a header that is not a JSON object");
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        for (const auto& [key, value] : entry.items()) {
          file.metadata[key] = value.get<std::string>();
        }
        continue;
      }
      file.tensors[name] = parse_tensor(path, name, entry, bytes, 8 + header_size);
    }
  } catch (const nlohmann::json::exception& e) {
    refuse_weights(path, "", std::string("has a malformed header: ") + e.what());
  }
  const std::string format = metadata_entry(file, "tdaot.format");
  if (format != kWeightsFormat) {
    refuse_weights(path, "",
                   "has format '" + format + "'; this runtime reads '" + kWeightsFormat + "'");
  }
  file.base_sha256 = metadata_entry(file, "tdaot.base_sha256");
  file.base_manifest_sha256 = metadata_entry(file, "tdaot.base_manifest_sha256");
  file.weights_sha256 = metadata_entry(file, "tdaot.weights_sha256");
  file.content_sha256 = metadata_entry(file, "tdaot.content_sha256");
  const std::string content = canonical_digest(file.tensors);
  if (content != file.content_sha256) {
    refuse_weights(path, "", "does not match its digest: its tensors hash to " + content +
                         ", its header records " + file.content_sha256 + " (corrupted or edited)");
  }
  std::map<std::string, WeightTensor> weights;
  for (const auto& [name, tensor] : file.tensors) {
    if (name.rfind("weights/", 0) == 0) weights.emplace(name.substr(8), tensor);
    if (!all_finite(tensor)) {
      refuse_weights(path, name, "holds values that are not finite (NaN or infinity)");
    }
  }
  if (canonical_digest(weights) != file.weights_sha256) {
    refuse_weights(path, "", "does not match its weights digest " + file.weights_sha256);
  }
  return file;
}

}  // namespace tdaot::detail
