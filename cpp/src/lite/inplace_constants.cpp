// A lite model instance's constants read in place from its library (lite/inplace_constants.h).
#include "lite/inplace_constants.h"

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "lite/shim/shim.h"
#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

// "cached_torch_dtype_<suffix>" as the wrapper names a constant's dtype.
bool parse_dtype(const std::string& value, int32_t& dtype) {
  static const std::map<std::string, int32_t (*)()> known = {
      {"float32", aoti_torch_dtype_float32}, {"float64", aoti_torch_dtype_float64},
      {"float16", aoti_torch_dtype_float16}, {"bfloat16", aoti_torch_dtype_bfloat16},
      {"int64", aoti_torch_dtype_int64},     {"int32", aoti_torch_dtype_int32},
      {"int16", aoti_torch_dtype_int16},     {"int8", aoti_torch_dtype_int8},
      {"uint8", aoti_torch_dtype_uint8},     {"bool", aoti_torch_dtype_bool}};
  const std::string prefix = "cached_torch_dtype_";
  if (value.rfind(prefix, 0) != 0) return false;
  const auto found = known.find(value.substr(prefix.size()));
  if (found == known.end()) return false;
  dtype = found->second();
  return true;
}

// "{256, 48}" (or "{}").
bool parse_ints(const std::string& value, std::vector<int64_t>& out) {
  if (value.size() < 2 || value.front() != '{' || value.back() != '}') return false;
  std::istringstream in(value.substr(1, value.size() - 2));
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    try {
      out.push_back(std::stoll(item, &used));
    } catch (const std::exception&) {
      return false;
    }
    if (item.find_first_not_of(' ', used) != std::string::npos) return false;
  }
  return true;
}

// "\"module_0_weight\"": a plain string literal (no escapes).
bool parse_text(const std::string& value, std::string& out) {
  if (value.size() < 2 || value.front() != '"' || value.back() != '"') return false;
  out = value.substr(1, value.size() - 2);
  return out.find_first_of("\"\\") == std::string::npos;
}

// One `constants_info_[i].field = value;` line into `entries`; "" when read, else what this
// reader does not expect in it (naming the constant, the field and the value at fault).
std::string parse_line(const std::string& line, std::map<size_t, InplaceConstants::Entry>& entries,
                       std::map<size_t, int>& fields) {
  const size_t open = line.find("constants_info_[");
  const size_t close = line.find("].", open);
  const size_t equals = line.find(" = ", close);
  size_t index = 0;
  bool record = close != std::string::npos && equals != std::string::npos && line.back() == ';';
  if (record) {
    try {
      index = std::stoul(line.substr(open + 16, close - open - 16));
    } catch (const std::exception&) {
      record = false;
    }
  }
  if (!record) return "an unexpected constant record: " + line;
  const std::string field = line.substr(close + 2, equals - close - 2);
  const std::string value = line.substr(equals + 3, line.size() - equals - 4);
  InplaceConstants::Entry& e = entries[index];
  ++fields[index];
  const std::string at = "constant " + std::to_string(index) + "'s field '" + field + "'";
  const std::string unexpected = "an unexpected value in " + at + ": " + value;
  if (field == "name") return parse_text(value, e.name) ? "" : unexpected;
  if (field == "dtype") return parse_dtype(value, e.dtype) ? "" : unexpected;
  if (field == "device_type") return value == "cached_torch_device_type_cpu" ? "" : unexpected;
  if (field == "layout") {
    return value == "static_cast<int32_t>(cached_torch_layout_strided)" ? "" : unexpected;
  }
  // A folded constant is not in the blob.
  if (field == "from_folded") return value == "false" ? "" : unexpected;
  if (field == "shape") return parse_ints(value, e.sizes) ? "" : unexpected;
  if (field == "stride") return parse_ints(value, e.strides) ? "" : unexpected;
  if (field == "original_fqn") {
    if (!parse_text(value, e.original_fqn)) e.original_fqn.clear();  // only for messages
    return "";
  }
  if (field == "offset" || field == "data_size") {
    std::vector<int64_t> number;
    if (!parse_ints("{" + value + "}", number) || number.size() != 1 || number[0] < 0) {
      return unexpected;
    }
    (field == "offset" ? e.offset : e.data_size) = number[0];
    return "";
  }
  if (field == "type") {
    const std::string prefix = "static_cast<int32_t>(torch::aot_inductor::ConstantType::";
    if (value.rfind(prefix, 0) != 0) return unexpected;
    const std::string type = value.substr(prefix.size());
    e.copy = type == "Buffer)";
    const bool known = e.copy || type == "Parameter)" || type == "TensorConstant)" || type == "Unknown)";
    return known ? "" : unexpected;
  }
  // Opaque metadata, a new field: not a layout this reader knows.
  return "an unexpected field in constant " + std::to_string(index) + "'s record: " + line;
}

constexpr int kFields = 11;  // the fields above, each set once per constant

}  // namespace

std::unique_ptr<const InplaceConstants> InplaceConstants::read(const ModelLibrary& library,
                                                               const std::string& wrapper_source,
                                                               std::string& why) {
  auto* start = static_cast<uint8_t*>(library.symbol("_binary_constants_bin_start"));
  auto* end = static_cast<uint8_t*>(library.symbol("_binary_constants_bin_end"));
  if (library.update_constants == nullptr || start == nullptr || end == nullptr || end < start) {
    why = "the library has no embedded constants blob or no AOTInductorModelUpdateConstantsMapV2";
    return nullptr;
  }
  std::ifstream in(wrapper_source);
  if (!in) {
    why = "no wrapper source '" + wrapper_source + "'";
    return nullptr;
  }
  std::map<size_t, Entry> entries;
  std::map<size_t, int> fields;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("constants_info_[") == std::string::npos) continue;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    const std::size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos) line.erase(0, first);
    const std::string problem = parse_line(line, entries, fields);
    if (!problem.empty()) {
      why = problem;
      return nullptr;
    }
  }
  auto result = std::unique_ptr<InplaceConstants>(new InplaceConstants());
  // In the blob, each constant's bytes follow the previous one's, in the records' order.
  int64_t position = 0;
  for (auto& [index, e] : entries) {
    const size_t itemsize = aoti_torch_dtype_element_size(e.dtype);
    if (index != result->entries_.size() || fields[index] != kFields || e.data_size < 0 ||
        e.sizes.size() != e.strides.size() || itemsize == 0) {
      why = "constant " + std::to_string(index) + "'s record is incomplete";
      return nullptr;
    }
    int64_t last = 0;
    bool empty = false;
    for (size_t d = 0; d < e.sizes.size(); ++d) {
      if (e.sizes[d] < 0 || e.strides[d] < 0) empty = true;  // refused below
      if (e.sizes[d] == 0) empty = true;
      last += (e.sizes[d] - 1) * e.strides[d];
    }
    e.data = start + position;
    const auto extent = static_cast<int64_t>(itemsize) * (e.offset + last + 1);
    if (empty || extent > e.data_size ||
        reinterpret_cast<uintptr_t>(e.data) % itemsize != 0) {
      why = "constant '" + e.name + "' does not fit its bytes";
      return nullptr;
    }
    position += e.data_size;
    result->entries_.push_back(std::move(e));
  }
  if (result->entries_.empty() || position != end - start) {
    why = "the recorded constants do not add up to the library's blob";
    return nullptr;
  }
  return result;
}

std::vector<std::string> InplaceConstants::copied() const {
  std::vector<std::string> names;
  for (const Entry& e : entries_) {
    if (e.copy) names.push_back(e.original_fqn.empty() ? e.name : e.original_fqn);
  }
  return names;
}

aoti::ModelHandle InplaceConstants::create(const ModelLibrary& library) const {
  std::vector<aoti::ConstantMapEntry> pairs;
  const auto fail = [&](const std::string& problem) {
    for (const aoti::ConstantMapEntry& made : pairs) {
      aoti_torch_delete_tensor_object(static_cast<AtenTensorHandle>(made.handle));
    }
    throw Error("could not create a model instance of '" + library.path() + "': " + problem);
  };
  const int32_t cpu = aoti_torch_device_type_cpu();
  for (const Entry& e : entries_) {
    AtenTensorHandle handle = nullptr;
    if (aoti_torch_create_tensor_from_blob(e.data, static_cast<int64_t>(e.sizes.size()),
                                           e.sizes.data(), e.strides.data(), e.offset, e.dtype,
                                           cpu, 0, &handle) != AOTI_TORCH_SUCCESS) {
      fail("constant '" + e.name + "': " + lite::shim::last_error());
    }
    if (e.copy) {
      AtenTensorHandle copy = nullptr;
      const bool cloned = aoti_torch_clone(handle, &copy) == AOTI_TORCH_SUCCESS;
      aoti_torch_delete_tensor_object(handle);
      if (!cloned) fail("constant '" + e.name + "': " + lite::shim::last_error());
      handle = copy;
    }
    pairs.push_back({e.name.c_str(), handle});
  }
  // A non-empty map at creation keeps the model from copying its blob; the placeholder is
  // dropped when the real constants replace the map (the model owns every handle given).
  static uint8_t placeholder_byte = 0;
  AtenTensorHandle placeholder = nullptr;
  if (aoti_torch_create_tensor_from_blob(&placeholder_byte, 0, nullptr, nullptr, 0,
                                         aoti_torch_dtype_uint8(), cpu, 0,
                                         &placeholder) != AOTI_TORCH_SUCCESS) {
    fail(lite::shim::last_error());
  }
  const aoti::ConstantMapEntry placeholder_pair{"tdaot.placeholder", placeholder};
  aoti::ModelHandle model = nullptr;
  if (library.create(&model, &placeholder_pair, 1) != aoti::kSuccess || model == nullptr) {
    fail(library.error_text());
  }
  const auto given = static_cast<int32_t>(pairs.size());
  const aoti::RuntimeError updated = library.update_constants(model, pairs.data(), given);
  pairs.clear();  // the model's now, also when the call failed
  if (updated != aoti::kSuccess) {
    const std::string problem = library.error_text();
    library.destroy(model);
    fail(problem);
  }
  return model;
}

}  // namespace tdaot::detail
