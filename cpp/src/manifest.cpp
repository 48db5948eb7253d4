// The manifest JSON schema (v2): parsing with field-level errors, and serialising.
// Reading a manifest out of a package file lives in package.cpp.
#include "tdaot/manifest.h"

#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "digest.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace {

using nlohmann::json;

constexpr std::array<std::pair<std::string_view, c10::ScalarType>, 10> kDtypes{{
    {"float32", c10::ScalarType::Float},
    {"float64", c10::ScalarType::Double},
    {"float16", c10::ScalarType::Half},
    {"bfloat16", c10::ScalarType::BFloat16},
    {"int64", c10::ScalarType::Long},
    {"int32", c10::ScalarType::Int},
    {"int16", c10::ScalarType::Short},
    {"int8", c10::ScalarType::Char},
    {"uint8", c10::ScalarType::Byte},
    {"bool", c10::ScalarType::Bool},
}};

std::optional<c10::ScalarType> lookup_dtype(std::string_view name) {
  for (const auto& [known, dtype] : kDtypes) {
    if (known == name) return dtype;
  }
  return std::nullopt;
}

std::string unknown_dtype_message(const std::string& name) {
  std::string message = "unknown dtype '" + name + "' (known:";
  for (const auto& entry : kDtypes) message.append(" ").append(entry.first);
  return message + ")";
}

std::string manifest_prefix(const std::string& origin) { return "manifest of '" + origin + "': "; }

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

  int64_t integer(const json& value, const std::string& field, int64_t min) const {
    if (!value.is_number_integer()) fail(field, "expected an integer, got " + describe(value));
    const auto number = value.get<int64_t>();
    if (number < min)
      fail(field, "expected an integer >= " + std::to_string(min) + ", got " + value.dump());
    return number;
  }

  std::string string_member(const json& object, const std::string& path, const char* name) const {
    return string(member(object, path, name), join(path, name));
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

TensorSpec parse_spec(const Parser& p, const json& value, const std::string& field) {
  p.object(value, field);
  TensorSpec spec;
  spec.key = p.string_member(value, field, "key");
  if (spec.key.empty()) p.fail(Parser::join(field, "key"), "empty key");
  const std::string dtype_field = Parser::join(field, "dtype");
  const std::string dtype = p.string(p.member(value, field, "dtype"), dtype_field);
  const auto parsed = lookup_dtype(dtype);
  if (!parsed) p.fail(dtype_field, unknown_dtype_message(dtype));
  spec.dtype = *parsed;
  const std::string shape_field = Parser::join(field, "shape");
  const json& shape = p.array(p.member(value, field, "shape"), shape_field);
  for (size_t i = 0; i < shape.size(); ++i) {
    spec.shape.push_back(p.integer(shape[i], Parser::index(shape_field, i), 0));
  }
  return spec;
}

std::vector<TensorSpec> parse_specs(const Parser& p, const json& root, const char* name) {
  const json& list = p.array(p.member(root, "", name), name);
  std::vector<TensorSpec> specs;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index(name, i);
    specs.push_back(parse_spec(p, list[i], field));
    if (!seen.insert(specs.back().key).second) {
      p.fail(Parser::join(field, "key"), "duplicate key '" + specs.back().key + "'");
    }
  }
  return specs;
}

BatchRange parse_batch(const Parser& p, const json& root) {
  const json& batch = p.object(p.member(root, "", "batch"), "batch");
  BatchRange range;
  range.min = p.integer_member(batch, "batch", "min", 0);
  range.max = p.integer_member(batch, "batch", "max", 0);
  if (range.min > range.max) {
    p.fail("batch", "min " + std::to_string(range.min) + " > max " + std::to_string(range.max));
  }
  return range;
}

Source parse_source(const Parser& p, const json& root) {
  const json& source = p.object(p.member(root, "", "source"), "source");
  Source result;
  result.module_class = p.string_member(source, "source", "module_class");
  // factory is null (or absent) when the package was built from Python rather than the CLI.
  auto factory = source.find("factory");
  if (factory != source.end() && !factory->is_null()) {
    result.factory = p.string(*factory, "source.factory");
  }
  return result;
}

// The spec `key` names in `specs`, or a failure at `field` saying which list lacks it.
const TensorSpec& spec_named(const Parser& p, const std::vector<TensorSpec>& specs,
                             const std::string& key, const std::string& field, const char* list) {
  for (const auto& spec : specs) {
    if (spec.key == key) return spec;
  }
  p.fail(field, "'" + key + "' is not one of the manifest's " + list);
}

// The optional "recurrent" section: absent or null means the policy is not recurrent. Every
// pair must name an input and an output of the same dtype and per-sample shape, since a
// session copies one into the other after each step.
std::optional<Recurrent> parse_recurrent(const Parser& p, const json& root, const Manifest& m) {
  auto it = root.find("recurrent");
  if (it == root.end() || it->is_null()) return std::nullopt;
  const json& section = p.object(*it, "recurrent");
  const json& list = p.array(p.member(section, "recurrent", "state"), "recurrent.state");
  if (list.empty()) p.fail("recurrent.state", "empty; a recurrent policy carries some state");
  Recurrent recurrent;
  std::unordered_set<std::string> inputs_seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index("recurrent.state", i);
    p.object(list[i], field);
    StatePair pair{p.string_member(list[i], field, "input"),
                   p.string_member(list[i], field, "output")};
    const TensorSpec& in = spec_named(p, m.inputs, pair.input, field + ".input", "inputs");
    const TensorSpec& out = spec_named(p, m.outputs, pair.output, field + ".output", "outputs");
    if (in.dtype != out.dtype || in.shape != out.shape) {
      p.fail(field, "input '" + in.key + "' is " + dtype_name(in.dtype) + " " +
                        format_batched_shape(in.shape) + " but output '" + out.key + "' is " +
                        dtype_name(out.dtype) + " " + format_batched_shape(out.shape) +
                        "; a state output must match its input");
    }
    if (!inputs_seen.insert(pair.input).second) {
      p.fail(field + ".input", "input '" + pair.input + "' is already state");
    }
    recurrent.state.push_back(std::move(pair));
  }
  auto is_init = section.find("is_init");
  if (is_init != section.end() && !is_init->is_null()) {
    recurrent.is_init = p.string(*is_init, "recurrent.is_init");
    const TensorSpec& spec =
        spec_named(p, m.inputs, recurrent.is_init, "recurrent.is_init", "inputs");
    if (spec.dtype != c10::ScalarType::Bool) {
      p.fail("recurrent.is_init", "input '" + spec.key + "' has dtype " + dtype_name(spec.dtype) +
                                      "; is_init must be bool");
    }
    if (inputs_seen.count(spec.key) != 0) {
      p.fail("recurrent.is_init", "input '" + spec.key + "' is also state");
    }
  }
  return recurrent;
}

// The optional "custom_ops" list: qualified operator names ("ns::name[.overload]"). The
// namespace is required, since the runtime looks each one up in the dispatcher by that name.
std::vector<std::string> parse_custom_ops(const Parser& p, const json& root) {
  auto it = root.find("custom_ops");
  if (it == root.end() || it->is_null()) return {};
  const json& list = p.array(*it, "custom_ops");
  std::vector<std::string> ops;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index("custom_ops", i);
    std::string name = p.string(list[i], field);
    const size_t colons = name.find("::");
    if (colons == 0 || colons == std::string::npos || colons + 2 == name.size()) {
      p.fail(field, "'" + name + "' is not a qualified operator name (namespace::name)");
    }
    ops.push_back(std::move(name));
  }
  return ops;
}

// The required "files" object: archive file name -> sha256 hex digest.
std::map<std::string, std::string> parse_files(const Parser& p, const json& root) {
  const json& files = p.object(p.member(root, "", "files"), "files");
  if (files.empty()) p.fail("files", "empty; a package lists the digest of every file");
  std::map<std::string, std::string> digests;
  for (const auto& [name, digest] : files.items()) {
    const std::string field = "files['" + name + "']";
    if (name.empty()) p.fail(field, "empty file name");
    std::string hex = p.string(digest, field);
    if (!detail::is_sha256_hex(hex) || detail::lowercase(hex) != hex) {
      p.fail(field, "'" + hex + "' is not a sha256 digest (64 lowercase hex digits)");
    }
    digests.emplace(name, std::move(hex));
  }
  return digests;
}

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

Manifest Manifest::from_json(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number like 1e400
    throw ManifestError(origin, manifest_prefix(origin) + "invalid JSON: " + e.what());
  }
  if (!root.is_object()) {
    throw ManifestError(origin, manifest_prefix(origin) + "expected a JSON object, got " +
                                    std::string(root.type_name()));
  }
  const Parser p(origin);
  Manifest m;
  // The version decides how to read everything else, so it is checked first.
  const int64_t version =
      p.integer_member(root, "", "schema_version", std::numeric_limits<int64_t>::min());
  if (version == 1) {
    p.fail("schema_version", "version 1 packages carry no file digests, which this runtime "
                             "verifies before loading; rebuild the package with tdaot >= 0.2");
  }
  if (version != kManifestSchemaVersion) {
    p.fail("schema_version", "unsupported schema version " + std::to_string(version) +
                                 " (this runtime reads version " +
                                 std::to_string(kManifestSchemaVersion) + ")");
  }
  m.inputs = parse_specs(p, root, "inputs");
  m.outputs = parse_specs(p, root, "outputs");
  m.batch = parse_batch(p, root);
  m.interaction_type = p.string_member(root, "", "interaction_type");
  m.device = p.string_member(root, "", "device");
  m.cpu_target = p.string_member(root, "", "cpu_target");
  m.cpu_isa = p.string_member(root, "", "cpu_isa");
  m.torch_version = p.string_member(root, "", "torch_version");
  m.tensordict_version = p.string_member(root, "", "tensordict_version");
  m.tdaot_version = p.string_member(root, "", "tdaot_version");
  m.source = parse_source(p, root);
  m.recurrent = parse_recurrent(p, root, m);
  m.custom_ops = parse_custom_ops(p, root);
  m.files = parse_files(p, root);
  return m;
}

std::string Manifest::to_json(int indent) const {
  // ordered_json keeps the field order the Python stage writes, for readable diffs.
  nlohmann::ordered_json out;
  out["schema_version"] = schema_version;
  out["inputs"] = specs_to_json(inputs);
  out["outputs"] = specs_to_json(outputs);
  out["batch"] = {{"min", batch.min}, {"max", batch.max}};
  out["interaction_type"] = interaction_type;
  out["device"] = device;
  out["cpu_target"] = cpu_target;
  out["cpu_isa"] = cpu_isa;
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
  out["files"] = files;
  return out.dump(indent);
}

std::string dtype_name(c10::ScalarType dtype) {
  for (const auto& [name, known] : kDtypes) {
    if (known == dtype) return std::string(name);
  }
  // Not a manifest dtype; still name it for error messages about received tensors.
  return c10::toString(dtype);
}

c10::ScalarType dtype_from_name(const std::string& name, const std::string& origin) {
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
