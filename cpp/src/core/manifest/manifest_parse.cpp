// Manifest::from_json: the manifest JSON schema (v2) with field-level errors. The rules are
// listed in tests/manifests/README.md, which has a valid or invalid case for each.
#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "core/package/digest.h"
#include "core/manifest/manifest_schema.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot {
namespace {

using detail::DuplicateMemberCheck;
using detail::json;
using detail::kFields;
using detail::kMaxSampleBytes;
using detail::kTunings;
using detail::lookup_dtype;
using detail::manifest_prefix;
using detail::Parser;
using detail::range_text;
using detail::unknown_dtype_message;

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
  // One sample's bytes, checked as they are counted: a shape whose product overflows, or whose
  // sample is over kMaxSampleBytes, is refused here, before a runtime sizes a buffer from it.
  uint64_t bytes = element_size(spec.dtype);
  for (const int64_t size : spec.shape) {
    if (size != 0 && bytes > kMaxSampleBytes / static_cast<uint64_t>(size)) {
      bool empty = false;
      for (const int64_t other : spec.shape) empty = empty || other == 0;
      if (empty) break;  // zero elements, whatever the other sizes
      p.fail(shape_field, "'" + spec.key + "' has shape " + format_batched_shape(spec.shape) +
                              ": one sample would exceed " + std::to_string(kMaxSampleBytes) +
                              " bytes, the most a manifest may declare");
    }
    bytes *= static_cast<uint64_t>(size);
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

BatchRange parse_range(const Parser& p, const json& value, const std::string& field) {
  const json& batch = p.object(value, field);
  BatchRange range;
  range.min = p.integer_member(batch, field, "min", 1);
  range.max = p.integer_member(batch, field, "max", 1);
  if (range.min > range.max) {
    p.fail(field, "min " + std::to_string(range.min) + " > max " + std::to_string(range.max));
  }
  return range;
}

BatchRange parse_batch(const Parser& p, const json& root) {
  return parse_range(p, p.member(root, "", "batch"), "batch");
}

bool is_model_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// A list of distinct non-empty strings (symbol names).
std::vector<std::string> parse_names(const Parser& p, const json& value, const std::string& field) {
  const json& list = p.array(value, field);
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = Parser::index(field, i);
    names.push_back(p.text(list[i], item));
    if (!seen.insert(names.back()).second) p.fail(item, "'" + names.back() + "' is listed twice");
  }
  return names;
}

// Two integers of at least `min` (a convolution's padding, stride or dilation).
std::array<int64_t, 2> parse_pair(const Parser& p, const json& value, const std::string& field,
                                  int64_t min) {
  const json& list = p.array(value, field);
  if (list.size() != 2) {
    p.fail(field, "expected 2 integers (height, width), got " + std::to_string(list.size()));
  }
  return {p.integer(list[0], Parser::index(field, 0), min),
          p.integer(list[1], Parser::index(field, 1), min)};
}

// A model's optional "packed_convolutions": [{weight, padding, stride, dilation, groups}], no
// weight listed twice nor among its `packed_weights`.
std::vector<PackedConvolution> parse_packed_convolutions(const Parser& p, const json& value,
                                                         const std::string& field,
                                                         const std::vector<std::string>& packed) {
  const json& list = p.array(value, field);
  std::vector<PackedConvolution> convolutions;
  std::unordered_set<std::string> seen(packed.begin(), packed.end());
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string item = Parser::index(field, i);
    p.object(list[i], item);
    PackedConvolution conv;
    conv.weight = p.text_member(list[i], item, "weight");
    if (!seen.insert(conv.weight).second) {
      p.fail(item + ".weight", "'" + conv.weight + "' is listed twice among the packed weights");
    }
    conv.padding = parse_pair(p, p.member(list[i], item, "padding"), item + ".padding", 0);
    conv.stride = parse_pair(p, p.member(list[i], item, "stride"), item + ".stride", 1);
    conv.dilation = parse_pair(p, p.member(list[i], item, "dilation"), item + ".dilation", 1);
    conv.groups = p.integer_member(list[i], item, "groups", 1);
    convolutions.push_back(std::move(conv));
  }
  return convolutions;
}

// A model's optional "lite": {runs, needs, missing, why}. A model that runs lacks nothing and
// needs no reason; one that does not says why.
LiteSupport parse_lite(const Parser& p, const json& value, const std::string& field) {
  p.object(value, field);
  LiteSupport lite;
  const json& runs = p.member(value, field, "runs");
  if (!runs.is_boolean()) p.fail(field + ".runs", "expected true or false");
  lite.runs = runs.get<bool>();
  lite.needs = parse_names(p, p.member(value, field, "needs"), field + ".needs");
  auto missing = value.find("missing");
  if (missing != value.end() && !missing->is_null()) {
    lite.missing = parse_names(p, *missing, field + ".missing");
  }
  auto why = value.find("why");
  if (why != value.end() && !why->is_null()) lite.why = p.string(*why, field + ".why");
  if (lite.runs && !lite.missing.empty()) {
    p.fail(field + ".missing", "a model that runs on the lite runtime lacks nothing, but '" +
                                   lite.missing.front() + "' is listed");
  }
  if (!lite.runs && lite.why.empty()) {
    p.fail(field + ".why", "a model that does not run on the lite runtime says why");
  }
  return lite;
}

// The optional "models": a non-empty list of {name, batch, tuning}, each name once, each range
// inside the manifest's, together serving every batch of it. Absent (or null): the one model
// AOTInductor packages by default, serving the whole range, tuning unknown.
std::vector<ModelSpec> parse_models(const Parser& p, const json& root, const BatchRange& batch,
                                    bool gaps_allowed) {
  auto it = root.find("models");
  if (it == root.end() || it->is_null()) return {ModelSpec{kDefaultModelName, batch, "", std::nullopt, std::nullopt, {}, {}}};
  const json& list = p.array(*it, "models");
  if (list.empty()) p.fail("models", "empty; a package holds at least one model");
  std::vector<ModelSpec> models;
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index("models", i);
    p.object(list[i], field);
    ModelSpec model;
    model.name = p.string_member(list[i], field, "name");
    if (!is_model_name(model.name)) {
      p.fail(field + ".name", "'" + model.name +
                                  "' is not a model name (letters, digits and '_', non-empty)");
    }
    if (!seen.insert(model.name).second) {
      p.fail(field + ".name", "model '" + model.name + "' is listed twice");
    }
    model.batch = parse_range(p, p.member(list[i], field, "batch"), field + ".batch");
    if (model.batch.min < batch.min || model.batch.max > batch.max) {
      p.fail(field + ".batch", "batches " + range_text(model.batch) +
                                   " are not inside the manifest's batch range " +
                                   range_text(batch));
    }
    model.tuning = p.string_member(list[i], field, "tuning");
    if (std::find(kTunings.begin(), kTunings.end(), model.tuning) == kTunings.end()) {
      p.fail(field + ".tuning", "unknown tuning '" + model.tuning + "' (known: throughput latency)");
    }
    auto lite = list[i].find("lite");
    if (lite != list[i].end() && !lite->is_null()) model.lite = parse_lite(p, *lite, field + ".lite");
    auto chunk = list[i].find("chunk_rows");
    if (chunk != list[i].end() && !chunk->is_null()) {
      // A slice is a batch the model serves: never fewer rows than its smallest batch.
      model.chunk_rows = p.integer(*chunk, field + ".chunk_rows", model.batch.min);
    }
    auto packed = list[i].find("packed_weights");
    if (packed != list[i].end() && !packed->is_null()) {
      model.packed_weights = parse_names(p, *packed, field + ".packed_weights");
    }
    auto convolutions = list[i].find("packed_convolutions");
    if (convolutions != list[i].end() && !convolutions->is_null()) {
      model.packed_convolutions = parse_packed_convolutions(
          p, *convolutions, field + ".packed_convolutions", model.packed_weights);
    }
    models.push_back(std::move(model));
  }
  // An aarch64 package's static lite models may leave batches between theirs unserved.
  if (gaps_allowed) return models;
  // Every batch of the range is served: sweep the ranges in order of their start.
  std::vector<BatchRange> ranges;
  for (const auto& model : models) ranges.push_back(model.batch);
  std::sort(ranges.begin(), ranges.end(),
            [](const BatchRange& a, const BatchRange& b) { return a.min < b.min; });
  int64_t next = batch.min;  // the smallest batch not yet served
  for (const auto& range : ranges) {
    if (range.min > next) break;
    if (range.max >= next) {
      if (range.max == batch.max) return models;
      next = range.max + 1;
    }
  }
  p.fail("models", "no model serves batch " + std::to_string(next) +
                       " of the manifest's batch range " + range_text(batch));
}

// The optional "architecture": one of kArchitectures; absent (or null) in packages from before
// it was recorded, "" here.
std::string parse_architecture(const Parser& p, const json& root) {
  auto it = root.find("architecture");
  if (it == root.end() || it->is_null()) return "";
  const std::string architecture = p.text_member(root, "", "architecture");
  if (std::find(detail::kArchitectures.begin(), detail::kArchitectures.end(), architecture) ==
      detail::kArchitectures.end()) {
    p.fail("architecture", "unknown architecture '" + architecture + "' (known: x86_64 aarch64)");
  }
  return architecture;
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
    if (spec.dtype != DType::Bool) {
      p.fail("recurrent.is_init", "input '" + spec.key + "' has dtype " + dtype_name(spec.dtype) +
                                      "; is_init must be bool");
    }
    if (inputs_seen.count(spec.key) != 0) {
      p.fail("recurrent.is_init", "input '" + spec.key + "' is also state");
    }
  }
  return recurrent;
}

}  // namespace

Manifest Manifest::from_json(const std::string& text, const std::string& origin) {
  return parse_manifest(text, origin, Sealing::sealed);
}

Manifest parse_manifest(const std::string& text, const std::string& origin, Sealing sealing) {
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
  m.architecture = parse_architecture(p, root);
  m.models = parse_models(p, root, m.batch, m.architecture == detail::kCrossBuiltArchitecture);
  m.interaction_type = p.text_member(root, "", "interaction_type");
  m.device = p.text_member(root, "", "device");
  m.cpu_target = p.text_member(root, "", "cpu_target");
  m.cpu_isa = p.string_member(root, "", "cpu_isa");  // empty: scalar kernels, or CUDA
  m.torch_version = p.text_member(root, "", "torch_version");
  m.tensordict_version = p.text_member(root, "", "tensordict_version");
  m.tdaot_version = p.text_member(root, "", "tdaot_version");
  m.source = parse_source(p, root);
  m.recurrent = parse_recurrent(p, root, m);
  m.custom_ops = detail::parse_custom_ops(p, root);
  m.contract = detail::parse_contract(p, root, m);
  m.patches = detail::parse_recorded_names(p, root, "patches");
  m.numerics = detail::parse_recorded_names(p, root, "numerics");
  m.files = detail::parse_files(p, root, sealing);
  m.weights_sha256 = detail::parse_weights_sha256(p, root);
  for (const auto& [name, value] : root.items()) {
    if (std::find(kFields.begin(), kFields.end(), name) == kFields.end()) {
      m.extra.emplace(name, value.dump());
    }
  }
  return m;
}

}  // namespace tdaot
