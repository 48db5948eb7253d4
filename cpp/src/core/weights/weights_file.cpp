// Reading and checking a tdaot weight file (weights_file.h). No torch: values are checked and
// digested as the bytes they are.
#include "core/weights/weights_file.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <tuple>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/json_limits.h"
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

// The file's bytes. Refused before anything is read: a path that is not a regular file (a
// directory, a device such as /dev/zero, a FIFO: opened with O_NONBLOCK, so not even the open
// waits) or one over kMaxWeightFileBytes; refused while reading: a file that grows past its
// size or past the limit.
std::string read_all(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) refuse_weights(path, "", std::string("cannot be opened: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    refuse_weights(path, "", std::string("cannot be read: ") + std::strerror(errno));
  }
  if (S_ISDIR(info.st_mode)) refuse_weights(path, "", "is a directory, not a weight file");
  if (!S_ISREG(info.st_mode)) {
    refuse_weights(path, "", "is not a regular file (a device, FIFO or socket), not a weight file");
  }
  const uint64_t size = static_cast<uint64_t>(info.st_size);
  if (size > kMaxWeightFileBytes) {
    refuse_weights(path, "", "is " + std::to_string(size) + " bytes, over the limit of " +
                                 std::to_string(kMaxWeightFileBytes) + " bytes for a weight file");
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) refuse_weights(path, "", std::string("could not be read: ") + std::strerror(errno));
    if (got == 0) refuse_weights(path, "", "became shorter while it was read");
    done += static_cast<size_t>(got);
  }
  char extra = 0;
  if (::read(fd, &extra, 1) > 0) refuse_weights(path, "", "grew while it was read");
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

// Whether every element of `count` of `dtype` at `data` (any alignment) is finite; integer and
// bool tensors always are.
bool all_finite(DType dtype, const char* data, size_t nbytes) {
  const auto check = [&](auto sample, auto finite) {
    using T = decltype(sample);
    for (size_t at = 0; at + sizeof(T) <= nbytes; at += sizeof(T)) {
      T value;
      std::memcpy(&value, data + at, sizeof(T));
      if (!finite(value)) return false;
    }
    return true;
  };
  switch (dtype) {
    case DType::Float32: return check(float{}, [](float v) { return std::isfinite(v); });
    case DType::Float64: return check(double{}, [](double v) { return std::isfinite(v); });
    // Half floats by their bits: all exponent bits set is infinity or NaN.
    case DType::Float16: return check(uint16_t{}, [](uint16_t v) { return (v & 0x7C00) != 0x7C00; });
    case DType::BFloat16: return check(uint16_t{}, [](uint16_t v) { return (v & 0x7F80) != 0x7F80; });
    default: return true;
  }
}

// One header entry, checked but not yet copied: its tensor's dtype and shape, and where its
// bytes lie in the file.
struct Entry {
  WeightTensor tensor;  // data unset until materialise()
  uint64_t begin = 0;   // offsets into the file's bytes
  uint64_t end = 0;
};

Entry parse_entry(const std::string& path, const std::string& name, const nlohmann::json& entry,
                  uint64_t file_size, uint64_t data_start) {
  if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
      !entry.contains("data_offsets") || !entry["dtype"].is_string() ||
      !entry["shape"].is_array() || !entry["data_offsets"].is_array()) {
    refuse_weights(path, name,
                   "has a malformed header entry (expected {dtype: string, shape: [int...], "
                   "data_offsets: [begin, end]})");
  }
  const auto code = entry["dtype"].get<std::string>();
  const auto* found = std::find_if(std::begin(kDtypes), std::end(kDtypes),
                                   [&](const auto& d) { return code == d.first; });
  if (found == std::end(kDtypes)) {
    refuse_weights(path, name, "has dtype '" + code + "', which tdaot does not use");
  }
  Entry parsed;
  WeightTensor& tensor = parsed.tensor;
  tensor.dtype = found->second;
  // Checked: a shape with more elements than any file holds is refused, never wrapped around.
  constexpr uint64_t kLimit = uint64_t{1} << 56;
  uint64_t count = 1;
  bool too_large = false;
  for (const auto& size : entry["shape"]) {
    if (!size.is_number_integer()) refuse_weights(path, name, "has a shape entry " + size.dump() + " that is not an integer");
    const auto value = size.get<int64_t>();
    if (value < 0) refuse_weights(path, name, "has a negative size in its shape");
    tensor.shape.push_back(value);
    if (value != 0 && count > kLimit / static_cast<uint64_t>(value)) too_large = true;
    count *= static_cast<uint64_t>(value);
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  if (offsets.size() != 2 || !offsets[0].is_number_unsigned() || !offsets[1].is_number_unsigned()) {
    refuse_weights(path, name, "has data_offsets " + offsets.dump() + ", expected [begin, end]");
  }
  parsed.begin = offsets[0].get<uint64_t>();
  parsed.end = offsets[1].get<uint64_t>();
  const uint64_t available = file_size - data_start;
  if (parsed.begin > parsed.end || parsed.end > available) {
    refuse_weights(path, name, "has data_offsets [" + std::to_string(parsed.begin) + ", " +
                                   std::to_string(parsed.end) + "], outside the file's " +
                                   std::to_string(available) + " data bytes (truncated?)");
  }
  const uint64_t needed = count * element_size(tensor.dtype);
  if (too_large || needed != parsed.end - parsed.begin) {
    refuse_weights(path, name, "holds " + std::to_string(parsed.end - parsed.begin) +
                                   " bytes, but its dtype and shape need " +
                                   (too_large ? std::string("more") : std::to_string(needed)));
  }
  tensor.nbytes = static_cast<size_t>(needed);
  parsed.begin += data_start;
  parsed.end += data_start;
  return parsed;
}

// sha256 over every entry in name order, as canonical_digest, straight from the file's bytes.
std::string digest_entries(const std::map<std::string, Entry>& entries, const std::string& bytes) {
  Sha256 digest;
  for (const auto& [name, entry] : entries) {
    std::string shape;
    for (size_t i = 0; i < entry.tensor.shape.size(); ++i) {
      shape += (i ? "," : "") + std::to_string(entry.tensor.shape[i]);
    }
    digest.update(name + "\n" + safetensors_dtype(entry.tensor.dtype) + "\n" + shape + "\n" +
                  std::to_string(entry.tensor.nbytes) + "\n");
    digest.update(std::string_view(bytes.data() + entry.begin, entry.tensor.nbytes));
  }
  return digest.hex();
}

// Reads and checks `path` (read_weight_file) and, when `trusted` is not empty, its signature,
// before any tensor is copied out of the file's bytes.
WeightFile check_bytes(const std::string& bytes, const std::string& path,
                       const std::vector<PublicKey>* trusted) {
  WeightFile file;
  file.path = path;
  uint64_t header_size = 0;
  if (bytes.size() < 8) {
    refuse_weights(path, "", "is too short to be a safetensors file (truncated?)");
  }
  for (int i = 7; i >= 0; --i) {  // little-endian
    header_size = (header_size << 8) | static_cast<unsigned char>(bytes[i]);
  }
  if (header_size > bytes.size() - 8) {
    refuse_weights(path, "", "has a header of " + std::to_string(header_size) +
                                 " bytes, longer than the file (truncated?)");
  }
  const uint64_t data_start = 8 + header_size;
  nlohmann::json header;
  try {
    header = parse_json_limited(std::string_view(bytes).substr(8, header_size), 32);
  } catch (const JsonDepthError& e) {
    refuse_weights(path, "", std::string("has a header that is not JSON: ") + e.what());
  } catch (const nlohmann::json::exception& e) {
    refuse_weights(path, "", std::string("has a header that is not JSON: ") + e.what());
  }
  if (!header.is_object()) refuse_weights(path, "", "has a header that is not a JSON object");
  std::map<std::string, Entry> entries;
  try {
    for (const auto& [name, entry] : header.items()) {
      if (name == "__metadata__") {
        if (!entry.is_object()) refuse_weights(path, "", "has a __metadata__ that is not an object");
        for (const auto& [key, value] : entry.items()) {
          if (!value.is_string()) {
            refuse_weights(path, "", "has metadata '" + key + "' that is not a string");
          }
          file.metadata[key] = value.get<std::string>();
        }
        continue;
      }
      entries.emplace(name, parse_entry(path, name, entry, bytes.size(), data_start));
    }
  } catch (const nlohmann::json::exception& e) {
    refuse_weights(path, "", std::string("has a malformed header: ") + e.what());
  }
  // No two entries share a byte: every byte is digested and copied at most once.
  std::vector<std::pair<const std::string*, const Entry*>> by_offset;
  for (const auto& [name, entry] : entries) {
    if (entry.end > entry.begin) by_offset.emplace_back(&name, &entry);  // empty ones hold no byte
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::tie(a.second->begin, a.second->end) < std::tie(b.second->begin, b.second->end);
  });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const Entry& before = *by_offset[i - 1].second;
    const Entry& after = *by_offset[i].second;
    if (after.begin < before.end) {
      refuse_weights(path, *by_offset[i].first,
                     "overlaps tensor '" + *by_offset[i - 1].first + "' (bytes " +
                         std::to_string(after.begin - data_start) + ".." +
                         std::to_string(after.end - data_start) + " and " +
                         std::to_string(before.begin - data_start) + ".." +
                         std::to_string(before.end - data_start) +
                         " of the data); entries may not share bytes");
    }
  }
  const std::string format = metadata_entry(file, "tdaot.format");
  if (format == kWeightsFormat1) {
    refuse_weights(path, "",
                   std::string("has format '") + kWeightsFormat1 +
                       "', whose weights digest leaves its models' constants out; this runtime "
                       "reads '" + kWeightsFormat +
                       "' (export it again with tdaot.export_weights)");
  }
  if (format != kWeightsFormat) {
    refuse_weights(path, "",
                   "has format '" + format + "'; this runtime reads '" + kWeightsFormat + "'");
  }
  file.base_sha256 = metadata_entry(file, "tdaot.base_sha256");
  file.base_manifest_sha256 = metadata_entry(file, "tdaot.base_manifest_sha256");
  file.weights_sha256 = metadata_entry(file, "tdaot.weights_sha256");
  const std::string content = digest_entries(entries, bytes);
  if (content != file.weights_sha256) {
    refuse_weights(path, "", "does not match its digest: its tensors hash to " + content +
                         ", its header records " + file.weights_sha256 + " (corrupted or edited)");
  }
  for (const auto& [name, entry] : entries) {
    if (!all_finite(entry.tensor.dtype, bytes.data() + entry.begin, entry.tensor.nbytes)) {
      refuse_weights(path, name, "holds values that are not finite (NaN or infinity)");
    }
  }
  // The signature, over the header's digest, before a tensor is materialised.
  if (trusted != nullptr && !trusted->empty()) verify_weights_signature(file, *trusted);
  for (auto& [name, entry] : entries) {
    WeightTensor tensor = std::move(entry.tensor);
    tensor.data = aligned_bytes(tensor.nbytes);
    if (tensor.nbytes != 0) std::memcpy(tensor.data.get(), bytes.data() + entry.begin, tensor.nbytes);
    file.tensors.emplace(name, std::move(tensor));
  }
  return file;
}

WeightFile read_checked(const std::string& path, const std::vector<PublicKey>* trusted) {
  return check_bytes(read_all(path), path, trusted);
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
         file.weights_sha256 + "\n";
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
  return read_checked(path, &trusted);
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

WeightFile read_weight_file(const std::string& path) { return read_checked(path, nullptr); }

WeightFile read_weight_bytes(const std::string& bytes, const std::string& path,
                             const std::vector<PublicKey>& trusted) {
  return check_bytes(bytes, path, &trusted);
}

}  // namespace tdaot::detail
