// The manifest JSON schema (v2): parsing with field-level errors, and serialising.
// Reading a manifest out of a package file lives in package.cpp.
#include "tdaot/manifest.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
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

// The top-level fields of schema 2; any other is kept in Manifest::extra.
constexpr std::array<std::string_view, 15> kFields{
    "schema_version", "inputs",        "outputs",       "batch",  "interaction_type",
    "device",         "cpu_target",    "cpu_isa",       "torch_version",
    "tensordict_version", "tdaot_version", "source",    "recurrent", "custom_ops",
    "files"};

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

// A dot-joined key: non-empty names joined by '.' (the Python stage refuses '.' inside a name).
void check_key(const Parser& p, const std::string& key, const std::string& field) {
  if (key.empty()) p.fail(field, "empty key");
  size_t start = 0;
  while (true) {
    const size_t dot = key.find('.', start);
    const size_t end = dot == std::string::npos ? key.size() : dot;
    if (end == start) {
      p.fail(field, "key '" + key + "' has an empty part (a key is non-empty names joined by '.')");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
}

TensorSpec parse_spec(const Parser& p, const json& value, const std::string& field) {
  p.object(value, field);
  TensorSpec spec;
  spec.key = p.string_member(value, field, "key");
  check_key(p, spec.key, Parser::join(field, "key"));
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

// "inputs" or "outputs": a non-empty list of specs with distinct keys (a policy takes and
// gives at least one tensor; the runner finds the batch size on the inputs).
std::vector<TensorSpec> parse_specs(const Parser& p, const json& root, const char* name) {
  const json& list = p.array(p.member(root, "", name), name);
  if (list.empty()) p.fail(name, "empty; a policy has at least one");
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
  range.min = p.integer_member(batch, "batch", "min", 1);
  range.max = p.integer_member(batch, "batch", "max", 1);
  if (range.min > range.max) {
    p.fail("batch", "min " + std::to_string(range.min) + " > max " + std::to_string(range.max));
  }
  return range;
}

Source parse_source(const Parser& p, const json& root) {
  const json& source = p.object(p.member(root, "", "source"), "source");
  Source result;
  result.module_class = p.text_member(source, "source", "module_class");
  // factory is null (or absent) when the package was built from Python rather than the CLI.
  auto factory = source.find("factory");
  if (factory != source.end() && !factory->is_null()) {
    result.factory = p.text(*factory, "source.factory");
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

// An identifier as the dispatcher's names use them: [A-Za-z_][A-Za-z0-9_]*.
bool is_identifier(std::string_view text) {
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text[0]))) return false;
  for (const char c : text) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// "ns::name" or "ns::name.overload", each part an identifier.
bool is_operator_name(std::string_view name) {
  const size_t colons = name.find("::");
  if (colons == std::string_view::npos || !is_identifier(name.substr(0, colons))) return false;
  const std::string_view rest = name.substr(colons + 2);
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return is_identifier(rest);
  return is_identifier(rest.substr(0, dot)) && is_identifier(rest.substr(dot + 1));
}

// The optional "custom_ops" list: qualified operator names ("ns::name[.overload]"), each once.
// The namespace is required, since the runtime looks each one up in the dispatcher by that name.
std::vector<std::string> parse_custom_ops(const Parser& p, const json& root) {
  auto it = root.find("custom_ops");
  if (it == root.end() || it->is_null()) return {};
  const json& list = p.array(*it, "custom_ops");
  std::vector<std::string> ops;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index("custom_ops", i);
    std::string name = p.string(list[i], field);
    if (!is_operator_name(name)) {
      p.fail(field, "'" + name +
                        "' is not a qualified operator name (namespace::name), with an optional "
                        ".overload; each part an identifier");
    }
    if (!seen.insert(name).second) p.fail(field, "'" + name + "' is listed twice");
    ops.push_back(std::move(name));
  }
  return ops;
}

// A file name as package.cpp finds it in the archive (without the top folder): relative, '/'
// separated, no empty, "." or ".." part. Package reading refuses such entries anyway; a manifest
// naming one can only be a forgery or a writer's bug.
bool is_relative_file_name(std::string_view name) {
  if (name.empty() || name.find('\\') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return false;
  }
  size_t start = 0;
  while (true) {
    const size_t slash = name.find('/', start);
    const std::string_view part = name.substr(start, slash - start);  // npos: to the end
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

// "files": archive file name -> sha256 hex digest. Required and non-empty in a sealed manifest,
// absent in an unsealed one.
std::map<std::string, std::string> parse_files(const Parser& p, const json& root,
                                               Sealing sealing) {
  if (sealing == Sealing::unsealed) {
    if (root.contains("files")) {
      p.fail("files", "present in an unsealed manifest; the digests are added when the package "
                      "is sealed");
    }
    return {};
  }
  const json& files = p.object(p.member(root, "", "files"), "files");
  if (files.empty()) p.fail("files", "empty; a package lists the digest of every file");
  std::map<std::string, std::string> digests;
  for (const auto& [name, digest] : files.items()) {
    const std::string field = "files['" + name + "']";
    if (name.empty()) p.fail(field, "empty file name");
    if (!is_relative_file_name(name)) {
      p.fail(field, "'" + name + "' is not a relative file name inside the package (no leading "
                                 "'/', '\\', empty, '.' or '..' part)");
    }
    if (digest_exempt(name)) {
      p.fail(field, "'" + name + "' is an AOTInductor metadata JSON or a zip bookkeeping record, "
                                 "which is never digested");
    }
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

Manifest Manifest::from_json(const std::string& text, const std::string& origin,
                             Sealing sealing) {
  json root;
  try {
    root = json::parse(text, DuplicateMemberCheck(origin));
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
  m.interaction_type = p.text_member(root, "", "interaction_type");
  m.device = p.text_member(root, "", "device");
  m.cpu_target = p.text_member(root, "", "cpu_target");
  m.cpu_isa = p.string_member(root, "", "cpu_isa");  // empty: scalar kernels, or CUDA
  m.torch_version = p.text_member(root, "", "torch_version");
  m.tensordict_version = p.text_member(root, "", "tensordict_version");
  m.tdaot_version = p.text_member(root, "", "tdaot_version");
  m.source = parse_source(p, root);
  m.recurrent = parse_recurrent(p, root, m);
  m.custom_ops = parse_custom_ops(p, root);
  m.files = parse_files(p, root, sealing);
  for (const auto& [name, value] : root.items()) {
    if (std::find(kFields.begin(), kFields.end(), name) == kFields.end()) {
      m.extra.emplace(name, value.dump());
    }
  }
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
  if (!files.empty()) out["files"] = files;  // empty: unsealed
  for (const auto& [name, value] : extra) out[name] = nlohmann::ordered_json::parse(value);
  return out.dump(indent);
}

std::vector<std::string> dtype_names() {
  std::vector<std::string> names;
  for (const auto& entry : kDtypes) names.emplace_back(entry.first);
  return names;
}

bool digest_exempt(std::string_view name) {
  for (const auto& record : kBookkeepingRecords) {
    if (name == record) return true;
  }
  constexpr std::string_view prefix = "data/aotinductor/";
  constexpr std::string_view suffix = "_metadata.json";
  return name.size() >= prefix.size() + suffix.size() && name.substr(0, prefix.size()) == prefix &&
         name.substr(name.size() - suffix.size()) == suffix;
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
