// Internal: the manifest schema's tables and the JSON walker that Manifest::from_json
// (manifest_parse.cpp) reads with; Manifest::to_json and the dtype helpers live in manifest.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

using nlohmann::json;

// The most bytes one sample of one input or output may take (its per-sample shape times its
// dtype's size): 1 GiB, far over any policy's, far under what a size computation overflows at.
inline constexpr uint64_t kMaxSampleBytes = uint64_t{1} << 30;

inline constexpr std::array<std::pair<std::string_view, DType>, 10> kDtypes{{
    {"float32", DType::Float32},
    {"float64", DType::Float64},
    {"float16", DType::Float16},
    {"bfloat16", DType::BFloat16},
    {"int64", DType::Int64},
    {"int32", DType::Int32},
    {"int16", DType::Int16},
    {"int8", DType::Int8},
    {"uint8", DType::UInt8},
    {"bool", DType::Bool},
}};

inline std::optional<DType> lookup_dtype(std::string_view name) {
  for (const auto& [known, dtype] : kDtypes) {
    if (known == name) return dtype;
  }
  return std::nullopt;
}

inline std::string unknown_dtype_message(const std::string& name) {
  std::string message = "unknown dtype '" + name + "' (known:";
  for (const auto& entry : kDtypes) message.append(" ").append(entry.first);
  return message + ")";
}

// The top-level fields of schema 2; any other is kept in Manifest::extra.
inline constexpr std::array<std::string_view, 21> kFields{
    "schema_version", "inputs",        "outputs",       "batch",  "models",
    "interaction_type", "device",      "cpu_target",    "cpu_isa", "architecture",
    "torch_version", "tensordict_version", "tdaot_version", "source", "recurrent",
    "custom_ops", "contract", "files", "patches", "numerics", "weights_sha256"};

// The architectures a package's models may be built for (tdaot.builder.targets).
inline constexpr std::array<std::string_view, 2> kArchitectures{"x86_64", "aarch64"};
// The one whose packages hold only static-batch lite models, which may leave batches of the
// package's range unserved (tdaot.builder.cross_models).
inline constexpr std::string_view kCrossBuiltArchitecture = "aarch64";

// The tunings a model may have been built with (tdaot.builder.tuning).
inline constexpr std::array<std::string_view, 2> kTunings{"throughput", "latency"};

inline std::string manifest_prefix(const std::string& origin) {
  return "manifest of '" + origin + "': ";
}

// "1..64", or "1" for a static range.
inline std::string range_text(const BatchRange& range) {
  return range.dynamic() ? std::to_string(range.min) + ".." + std::to_string(range.max)
                         : std::to_string(range.min);
}

// Walks the JSON document and throws ManifestError naming the origin and the
// dotted field path ("inputs[1].dtype") of the first problem.
class Parser {
 public:
  explicit Parser(const std::string& origin) : origin_(origin) {}

  [[noreturn]] void fail(const std::string& field, const std::string& problem) const {
    throw ManifestError(origin_, manifest_prefix(origin_) + "field '" + field + "': " + problem);
  }

  // The member `name` of object `object` (itself at `path`); fails when it is absent.
  const json& member(const json& object, const std::string& path, const char* name) const {
    auto it = object.find(name);
    if (it == object.end()) fail(join(path, name), "missing");
    return *it;
  }

  const json& object(const json& value, const std::string& field) const {
    if (!value.is_object()) fail(field, "expected an object, got " + describe(value));
    return value;
  }

  const json& array(const json& value, const std::string& field) const {
    if (!value.is_array()) fail(field, "expected an array, got " + describe(value));
    return value;
  }

  std::string string(const json& value, const std::string& field) const {
    if (!value.is_string()) fail(field, "expected a string, got " + describe(value));
    return value.get<std::string>();
  }

  // A non-empty string (names, versions: an empty one is a writer's bug, never a meaning).
  std::string text(const json& value, const std::string& field) const {
    std::string result = string(value, field);
    if (result.empty()) fail(field, "empty string");
    return result;
  }

  int64_t integer(const json& value, const std::string& field, int64_t min) const {
    if (!value.is_number_integer()) fail(field, "expected an integer, got " + describe(value));
    // nlohmann keeps integers above INT64_MAX as unsigned; get<int64_t> would wrap them.
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(field, "integer " + value.dump() + " is out of range (at most " +
                      std::to_string(std::numeric_limits<int64_t>::max()) + ")");
    }
    const auto number = value.get<int64_t>();
    if (number < min)
      fail(field, "expected an integer >= " + std::to_string(min) + ", got " + value.dump());
    return number;
  }

  std::string string_member(const json& object, const std::string& path, const char* name) const {
    return string(member(object, path, name), join(path, name));
  }

  std::string text_member(const json& object, const std::string& path, const char* name) const {
    return text(member(object, path, name), join(path, name));
  }

  int64_t integer_member(const json& object, const std::string& path, const char* name,
                         int64_t min) const {
    return integer(member(object, path, name), join(path, name), min);
  }

  static std::string join(const std::string& path, const char* name) {
    return path.empty() ? std::string(name) : path + "." + name;
  }

  static std::string index(const std::string& path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

 private:
  // Scalars are shown by value, containers by kind, so messages stay one line.
  static std::string describe(const json& value) {
    if (value.is_structured()) return value.type_name();
    return value.dump();
  }

  const std::string& origin_;
};

// Rejects an object member that appears twice ({"batch": ..., "batch": ...}): nlohmann, like
// most JSON readers, would keep the last one silently, so two readers of the same bytes could
// disagree on what the manifest says. Tracks the path of the value being parsed for the message.
class DuplicateMemberCheck {
 public:
  explicit DuplicateMemberCheck(const std::string& origin) : origin_(origin) {}

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        frames_.push_back(Frame{false, 0, {}, {}});
        break;
      case json::parse_event_t::array_start:
        frames_.push_back(Frame{true, 0, {}, {}});
        break;
      case json::parse_event_t::key: {
        Frame& top = frames_.back();
        top.key = parsed.get<std::string>();
        if (!top.keys.insert(top.key).second) {
          throw ManifestError(origin_, manifest_prefix(origin_) + "field '" + path() +
                                           "': appears twice in one JSON object");
        }
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        frames_.pop_back();
        next_element();
        break;
      case json::parse_event_t::value:
        next_element();
        break;
    }
    return true;
  }

 private:
  struct Frame {
    bool array;
    size_t index;                 // arrays: the element being parsed
    std::string key;              // objects: the member being parsed
    std::set<std::string> keys;   // objects: the members seen so far
  };

  void next_element() {
    if (!frames_.empty() && frames_.back().array) ++frames_.back().index;
  }

  std::string path() const {
    std::string out;
    for (const Frame& frame : frames_) {
      if (frame.array) {
        out += "[" + std::to_string(frame.index) + "]";
      } else {
        out += (out.empty() ? "" : ".") + frame.key;
      }
    }
    return out;
  }

  const std::string& origin_;
  std::vector<Frame> frames_;
};

// The optional "contract" (manifest_contract.cpp): nullopt when absent or null; its keys are
// checked against `m`'s inputs and outputs, which must be parsed first.
std::optional<Contract> parse_contract(const Parser& p, const json& root, const Manifest& m);
nlohmann::ordered_json contract_to_json(const Contract& contract);

// The package's record (manifest_records.cpp). "custom_ops": qualified operator names, each once.
std::vector<std::string> parse_custom_ops(const Parser& p, const json& root);
// "patches" or "numerics" (`field`): distinct names; nullopt when absent (an older package).
std::optional<std::vector<std::string>> parse_recorded_names(const Parser& p, const json& root,
                                                             const char* field);
// "files": archive file name -> sha256; required in a sealed manifest, refused in an unsealed one.
std::map<std::string, std::string> parse_files(const Parser& p, const json& root, Sealing sealing);
// "weights_sha256": 64 lowercase hex digits; empty when absent.
std::string parse_weights_sha256(const Parser& p, const json& root);

}  // namespace tdaot::detail
