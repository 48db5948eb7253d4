// The manifest JSON schema: parsing, serialising and refusing manifests, dtype names and shape
// formatting. Reading manifests out of package files is in test_manifest_read.cpp.
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "test_support.h"

namespace tdaot {
namespace {

using nlohmann::json;
using test::catch_error;
using test::Contains;

// The example manifest of the schema documentation, as the Python stage writes it.
json sample_json() {
  return json::parse(R"({
    "schema_version": 2,
    "inputs": [{"key": "agents.observation", "dtype": "float32", "shape": [2, 5]},
               {"key": "agents.mask", "dtype": "bool", "shape": []}],
    "outputs": [{"key": "sample", "dtype": "float32", "shape": [2]}],
    "batch": {"min": 1, "max": 1048576},
    "interaction_type": "deterministic", "device": "cpu",
    "cpu_target": "native", "cpu_isa": "avx512",
    "torch_version": "2.13.0+cpu", "tensordict_version": "0.14.3", "tdaot_version": "0.1.0",
    "source": {"module_class": "tensordict.nn.sequence.TensorDictSequential",
               "factory": "examples/policies.py:tutorial_policy"},
    "files": {"data/aotinductor/model/a.wrapper.so":
                "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
              "data/aotinductor/model/a.wrapper.cpp":
                "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"}})");
}

// A recurrent manifest in the shape of examples/policies.py:recurrent_policy.
json recurrent_json() {
  json value = sample_json();
  value["inputs"] = json::parse(R"([
    {"key": "observation", "dtype": "float32", "shape": [3]},
    {"key": "hidden", "dtype": "float32", "shape": [8]},
    {"key": "is_init", "dtype": "bool", "shape": [1]}])");
  value["outputs"] = json::parse(R"([
    {"key": "action", "dtype": "float32", "shape": [2]},
    {"key": "next.hidden", "dtype": "float32", "shape": [8]}])");
  value["recurrent"] = json::parse(
      R"({"state": [{"input": "hidden", "output": "next.hidden"}], "is_init": "is_init"})");
  return value;
}

Manifest parse(const json& value) { return Manifest::from_json(value.dump(), "x.pt2"); }

void expect_same(const Manifest& a, const Manifest& b) {
  ASSERT_EQ(a.inputs.size(), b.inputs.size());
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    EXPECT_EQ(a.inputs[i].key, b.inputs[i].key);
    EXPECT_EQ(a.inputs[i].dtype, b.inputs[i].dtype);
    EXPECT_EQ(a.inputs[i].shape, b.inputs[i].shape);
  }
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    EXPECT_EQ(a.outputs[i].key, b.outputs[i].key);
    EXPECT_EQ(a.outputs[i].dtype, b.outputs[i].dtype);
    EXPECT_EQ(a.outputs[i].shape, b.outputs[i].shape);
  }
  EXPECT_EQ(a.schema_version, b.schema_version);
  EXPECT_EQ(a.batch.min, b.batch.min);
  EXPECT_EQ(a.batch.max, b.batch.max);
  EXPECT_EQ(a.interaction_type, b.interaction_type);
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.cpu_target, b.cpu_target);
  EXPECT_EQ(a.cpu_isa, b.cpu_isa);
  EXPECT_EQ(a.torch_version, b.torch_version);
  EXPECT_EQ(a.tensordict_version, b.tensordict_version);
  EXPECT_EQ(a.tdaot_version, b.tdaot_version);
  EXPECT_EQ(a.source.module_class, b.source.module_class);
  EXPECT_EQ(a.source.factory, b.source.factory);
  EXPECT_EQ(a.files, b.files);
}

TEST(ManifestJson, ParsesEveryField) {
  const Manifest m = parse(sample_json());
  EXPECT_EQ(m.schema_version, 2);
  ASSERT_EQ(m.inputs.size(), 2u);
  EXPECT_EQ(m.inputs[0].key, "agents.observation");
  EXPECT_EQ(m.inputs[0].dtype, c10::ScalarType::Float);
  EXPECT_EQ(m.inputs[0].shape, (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(m.inputs[1].dtype, c10::ScalarType::Bool);
  EXPECT_TRUE(m.inputs[1].shape.empty());
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_EQ(m.outputs[0].key, "sample");
  EXPECT_EQ(m.batch.min, 1);
  EXPECT_EQ(m.batch.max, 1048576);
  EXPECT_TRUE(m.batch.dynamic());
  EXPECT_EQ(m.interaction_type, "deterministic");
  EXPECT_EQ(m.device, "cpu");
  EXPECT_EQ(m.cpu_target, "native");
  EXPECT_EQ(m.cpu_isa, "avx512");
  EXPECT_EQ(m.torch_version, "2.13.0+cpu");
  EXPECT_EQ(m.tensordict_version, "0.14.3");
  EXPECT_EQ(m.tdaot_version, "0.1.0");
  EXPECT_EQ(m.source.module_class, "tensordict.nn.sequence.TensorDictSequential");
  EXPECT_EQ(m.source.factory, "examples/policies.py:tutorial_policy");
  EXPECT_EQ(m.input_index("agents.mask"), 1u);
  EXPECT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files.at("data/aotinductor/model/a.wrapper.so"),
            "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
  EXPECT_EQ(m.output_index("sample"), 0u);
  EXPECT_FALSE(m.input_index("sample").has_value());
  EXPECT_FALSE(m.output_index("agents.mask").has_value());
}

TEST(ManifestJson, RoundTrips) {
  const Manifest m = parse(sample_json());
  expect_same(m, Manifest::from_json(m.to_json(), "again"));
  expect_same(m, Manifest::from_json(m.to_json(2), "indented"));
  // The serialised form is the Python stage's schema, field for field.
  EXPECT_EQ(json::parse(m.to_json()), sample_json());
}

TEST(ManifestJson, NullOrAbsentFactoryIsEmptyAndSerialisesAsNull) {
  json value = sample_json();
  value["source"]["factory"] = nullptr;
  const Manifest m = parse(value);
  EXPECT_EQ(m.source.factory, "");
  EXPECT_TRUE(json::parse(m.to_json())["source"]["factory"].is_null());
  value["source"].erase("factory");
  EXPECT_EQ(parse(value).source.factory, "");
}

TEST(ManifestJson, IgnoresUnknownFields) {
  json value = sample_json();
  value["future_field"] = {{"anything", 1}};
  value["inputs"][0]["names"] = {"agent", "obs"};
  value["batch"]["step"] = 2;
  const Manifest m = parse(value);
  expect_same(m, parse(sample_json()));
  // Unknown top-level fields are kept and written back (as the Python stage keeps `extra`);
  // unknown fields inside known objects are dropped.
  ASSERT_EQ(m.extra.size(), 1u);
  EXPECT_EQ(json::parse(m.extra.at("future_field")), value["future_field"]);
  json expected = sample_json();
  expected["future_field"] = value["future_field"];
  EXPECT_EQ(json::parse(m.to_json()), expected);
}

TEST(ManifestJson, UnsealedManifestHasNoFiles) {
  json value = sample_json();
  value.erase("files");
  const Manifest m = parse_manifest(value.dump(), "build", Sealing::unsealed);
  EXPECT_TRUE(m.files.empty());
  EXPECT_EQ(json::parse(m.to_json()), value);  // no "files" written while empty
  EXPECT_EQ(parse_manifest(m.to_json(), "build", Sealing::unsealed).to_json(), m.to_json());
  // A package's manifest is always sealed.
  const auto missing = catch_error<ManifestError>([&] { parse(value); });
  ASSERT_TRUE(missing);
  EXPECT_TRUE(Contains(missing->what(), "field 'files': missing"));
  const auto present = catch_error<ManifestError>(
      [] { parse_manifest(sample_json().dump(), "build", Sealing::unsealed); });
  ASSERT_TRUE(present);
  EXPECT_TRUE(Contains(present->what(), "field 'files': present in an unsealed manifest"));
}

TEST(ManifestJson, DigestExemptNames) {
  EXPECT_TRUE(digest_exempt("data/aotinductor/model/abc_metadata.json"));
  EXPECT_TRUE(digest_exempt("data/aotinductor/model/abc.wrapper_metadata.json"));
  EXPECT_TRUE(digest_exempt(".data/version"));
  EXPECT_TRUE(digest_exempt("archive_format"));
  EXPECT_FALSE(digest_exempt("data/aotinductor/model/abc.wrapper.so"));
  EXPECT_FALSE(digest_exempt("data/constants/x_metadata.json"));
  EXPECT_FALSE(digest_exempt("data/aotinductor/_metadata.jso"));
}

TEST(ManifestJson, StaticBatch) {
  json value = sample_json();
  value["batch"] = {{"min", 4}, {"max", 4}};
  const Manifest m = parse(value);
  EXPECT_FALSE(m.batch.dynamic());
  EXPECT_TRUE(m.batch.contains(4));
  EXPECT_FALSE(m.batch.contains(5));
}

TEST(ManifestJson, Recurrent) {
  const Manifest m = parse(recurrent_json());
  ASSERT_TRUE(m.recurrent);
  ASSERT_EQ(m.recurrent->state.size(), 1u);
  EXPECT_EQ(m.recurrent->state[0].input, "hidden");
  EXPECT_EQ(m.recurrent->state[0].output, "next.hidden");
  EXPECT_EQ(m.recurrent->is_init, "is_init");
  EXPECT_EQ(json::parse(m.to_json()), recurrent_json());
}

TEST(ManifestJson, RecurrentAbsentOrNullIsNotRecurrentAndIsNotWritten) {
  EXPECT_FALSE(parse(sample_json()).recurrent);
  EXPECT_FALSE(json::parse(parse(sample_json()).to_json()).contains("recurrent"));
  json value = recurrent_json();
  value["recurrent"] = nullptr;
  EXPECT_FALSE(parse(value).recurrent);
}

TEST(ManifestJson, RecurrentWithoutIsInit) {
  json value = recurrent_json();
  value["recurrent"]["is_init"] = nullptr;
  const Manifest m = parse(value);
  ASSERT_TRUE(m.recurrent);
  EXPECT_EQ(m.recurrent->is_init, "");
  EXPECT_EQ(json::parse(m.to_json()), value);  // written back as null, as Python writes it
  value["recurrent"].erase("is_init");
  EXPECT_EQ(parse(value).recurrent->is_init, "");
}

TEST(ManifestJson, CustomOpsRoundTripAndAreWrittenOnlyWhenPresent) {
  EXPECT_TRUE(parse(sample_json()).custom_ops.empty());
  EXPECT_FALSE(json::parse(parse(sample_json()).to_json()).contains("custom_ops"));
  json value = sample_json();
  value["custom_ops"] = {"tdaot_test::scale_clamp", "my_ops::fk.out"};
  const Manifest m = parse(value);
  EXPECT_EQ(m.custom_ops, (std::vector<std::string>{"tdaot_test::scale_clamp", "my_ops::fk.out"}));
  EXPECT_EQ(json::parse(m.to_json()), value);
  value["custom_ops"] = nullptr;
  EXPECT_TRUE(parse(value).custom_ops.empty());
}

struct BadManifest {
  std::string name;
  std::function<void(json&)> edit;
  std::string message;  // expected after "manifest of 'x.pt2': "
  json (*base)() = sample_json;
};

class ManifestErrors : public ::testing::TestWithParam<BadManifest> {};

TEST_P(ManifestErrors, NameOriginAndField) {
  json value = GetParam().base();
  GetParam().edit(value);
  const auto error = catch_error<ManifestError>([&] { parse(value); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "manifest of 'x.pt2': " + GetParam().message));
  EXPECT_EQ(error->path(), "x.pt2");
}

INSTANTIATE_TEST_SUITE_P(
    Schema, ManifestErrors,
    ::testing::Values(
        BadManifest{"UnknownDtype", [](json& v) { v["inputs"][1]["dtype"] = "float8"; },
                    "field 'inputs[1].dtype': unknown dtype 'float8' (known: float32"},
        BadManifest{"SchemaVersion3", [](json& v) { v["schema_version"] = 3; },
                    "field 'schema_version': unsupported schema version 3 (this runtime reads "
                    "version 2)"},
        BadManifest{"SchemaVersion1", [](json& v) { v["schema_version"] = 1; },
                    "field 'schema_version': version 1 packages carry no file digests, which this "
                    "runtime verifies before loading; rebuild the package with tdaot >= 0.2"},
        BadManifest{"FilesMissing", [](json& v) { v.erase("files"); }, "field 'files': missing"},
        BadManifest{"FilesNotObject", [](json& v) { v["files"] = json::array(); },
                    "field 'files': expected an object, got array"},
        BadManifest{"FilesEmpty", [](json& v) { v["files"] = json::object(); },
                    "field 'files': empty; a package lists the digest of every file"},
        BadManifest{"FileDigestShort", [](json& v) { v["files"]["data/x"] = "abc"; },
                    "field 'files['data/x']': 'abc' is not a sha256 digest (64 lowercase hex"},
        BadManifest{"FileDigestUpperCase",
                    [](json& v) { v["files"]["data/x"] = std::string(64, 'A'); },
                    "field 'files['data/x']': '" + std::string(64, 'A') + "' is not a sha256"},
        BadManifest{"FileDigestNumber", [](json& v) { v["files"]["data/x"] = 7; },
                    "field 'files['data/x']': expected a string, got 7"},
        BadManifest{"FileNameEmpty", [](json& v) { v["files"][""] = std::string(64, 'a'); },
                    "field 'files['']': empty file name"},
        BadManifest{"SchemaVersionMissing", [](json& v) { v.erase("schema_version"); },
                    "field 'schema_version': missing"},
        BadManifest{"SchemaVersionString", [](json& v) { v["schema_version"] = "1"; },
                    "field 'schema_version': expected an integer, got \"1\""},
        BadManifest{"InputsMissing", [](json& v) { v.erase("inputs"); }, "field 'inputs': missing"},
        BadManifest{"InputsNotArray", [](json& v) { v["inputs"] = json::object(); },
                    "field 'inputs': expected an array, got object"},
        BadManifest{"SpecNotObject", [](json& v) { v["outputs"][0] = 3; },
                    "field 'outputs[0]': expected an object, got 3"},
        BadManifest{"ShapeMissing", [](json& v) { v["inputs"][0].erase("shape"); },
                    "field 'inputs[0].shape': missing"},
        BadManifest{"ShapeNegative", [](json& v) { v["inputs"][0]["shape"][1] = -5; },
                    "field 'inputs[0].shape[1]': expected an integer >= 0, got -5"},
        BadManifest{"ShapeFloat", [](json& v) { v["inputs"][0]["shape"][0] = 2.5; },
                    "field 'inputs[0].shape[0]': expected an integer, got 2.5"},
        BadManifest{"KeyEmpty", [](json& v) { v["outputs"][0]["key"] = ""; },
                    "field 'outputs[0].key': empty key"},
        BadManifest{"KeyDuplicate", [](json& v) { v["inputs"][1]["key"] = "agents.observation"; },
                    "field 'inputs[1].key': duplicate key 'agents.observation'"},
        BadManifest{"DtypeNotString", [](json& v) { v["outputs"][0]["dtype"] = nullptr; },
                    "field 'outputs[0].dtype': expected a string, got null"},
        BadManifest{"BatchMaxString", [](json& v) { v["batch"]["max"] = "64"; },
                    "field 'batch.max': expected an integer, got \"64\""},
        BadManifest{"BatchMinAboveMax",
                    [](json& v) {
                      v["batch"] = {{"min", 8}, {"max", 4}};
                    },
                    "field 'batch': min 8 > max 4"},
        BadManifest{"DeviceMissing", [](json& v) { v.erase("device"); }, "field 'device': missing"},
        BadManifest{"CpuIsaNumber", [](json& v) { v["cpu_isa"] = 512; },
                    "field 'cpu_isa': expected a string, got 512"},
        BadManifest{"SourceMissing", [](json& v) { v.erase("source"); }, "field 'source': missing"},
        BadManifest{"ModuleClassMissing", [](json& v) { v["source"].erase("module_class"); },
                    "field 'source.module_class': missing"},
        BadManifest{"FactoryNumber", [](json& v) { v["source"]["factory"] = 1; },
                    "field 'source.factory': expected a string, got 1"},
        BadManifest{"TopLevelArray", [](json& v) { v = json::array({1}); },
                    "expected a JSON object, got array"},
        BadManifest{"RecurrentNotObject", [](json& v) { v["recurrent"] = json::array({1}); },
                    "field 'recurrent': expected an object, got array", recurrent_json},
        BadManifest{"StateMissing", [](json& v) { v["recurrent"].erase("state"); },
                    "field 'recurrent.state': missing", recurrent_json},
        BadManifest{"StateNotArray", [](json& v) { v["recurrent"]["state"] = json::object(); },
                    "field 'recurrent.state': expected an array, got object", recurrent_json},
        BadManifest{"StateEmpty", [](json& v) { v["recurrent"]["state"] = json::array(); },
                    "field 'recurrent.state': empty; a recurrent policy carries some state",
                    recurrent_json},
        BadManifest{"StatePairNotObject", [](json& v) { v["recurrent"]["state"][0] = "hidden"; },
                    "field 'recurrent.state[0]': expected an object, got \"hidden\"",
                    recurrent_json},
        BadManifest{"StateInputMissing", [](json& v) { v["recurrent"]["state"][0].erase("input"); },
                    "field 'recurrent.state[0].input': missing", recurrent_json},
        BadManifest{"StateInputUnknown",
                    [](json& v) { v["recurrent"]["state"][0]["input"] = "cell"; },
                    "field 'recurrent.state[0].input': 'cell' is not one of the manifest's inputs",
                    recurrent_json},
        BadManifest{"StateOutputUnknown",
                    [](json& v) { v["recurrent"]["state"][0]["output"] = "next.cell"; },
                    "field 'recurrent.state[0].output': 'next.cell' is not one of the manifest's "
                    "outputs",
                    recurrent_json},
        BadManifest{"StateShapeMismatch", [](json& v) { v["outputs"][1]["shape"] = {4}; },
                    "field 'recurrent.state[0]': input 'hidden' is float32 [B, 8] but output "
                    "'next.hidden' is float32 [B, 4]; a state output must match its input",
                    recurrent_json},
        BadManifest{"StateDtypeMismatch", [](json& v) { v["outputs"][1]["dtype"] = "float64"; },
                    "field 'recurrent.state[0]': input 'hidden' is float32 [B, 8] but output "
                    "'next.hidden' is float64 [B, 8]",
                    recurrent_json},
        BadManifest{"StateInputTwice",
                    [](json& v) {
                      v["recurrent"]["state"].push_back(v["recurrent"]["state"][0]);
                    },
                    "field 'recurrent.state[1].input': input 'hidden' is already state",
                    recurrent_json},
        BadManifest{"IsInitNumber", [](json& v) { v["recurrent"]["is_init"] = 1; },
                    "field 'recurrent.is_init': expected a string, got 1", recurrent_json},
        BadManifest{"IsInitUnknown", [](json& v) { v["recurrent"]["is_init"] = "reset"; },
                    "field 'recurrent.is_init': 'reset' is not one of the manifest's inputs",
                    recurrent_json},
        BadManifest{"IsInitNotBool", [](json& v) { v["recurrent"]["is_init"] = "observation"; },
                    "field 'recurrent.is_init': input 'observation' has dtype float32; is_init "
                    "must be bool",
                    recurrent_json},
        BadManifest{"IsInitIsState",
                    [](json& v) {
                      v["outputs"].push_back(
                          {{"key", "next.is_init"}, {"dtype", "bool"}, {"shape", {1}}});
                      v["recurrent"]["state"].push_back(
                          {{"input", "is_init"}, {"output", "next.is_init"}});
                    },
                    "field 'recurrent.is_init': input 'is_init' is also state", recurrent_json},
        BadManifest{"CustomOpsNotArray", [](json& v) { v["custom_ops"] = "tdaot_test::x"; },
                    "field 'custom_ops': expected an array, got \"tdaot_test::x\""},
        BadManifest{"CustomOpNotString", [](json& v) { v["custom_ops"] = {1}; },
                    "field 'custom_ops[0]': expected a string, got 1"},
        BadManifest{"CustomOpWithoutNamespace",
                    [](json& v) { v["custom_ops"] = {"tdaot_test::a", "scale_clamp"}; },
                    "field 'custom_ops[1]': 'scale_clamp' is not a qualified operator name "
                    "(namespace::name)"}),
    [](const auto& info) { return info.param.name; });

TEST(ManifestJson, InvalidJson) {
  const auto error =
      catch_error<ManifestError>([] { Manifest::from_json("{\"inputs\": [", "x.pt2"); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "manifest of 'x.pt2': invalid JSON: "));
  EXPECT_EQ(error->path(), "x.pt2");
}

TEST(Dtypes, NamesRoundTrip) {
  const std::vector<std::string> names{"float32", "float64", "float16", "bfloat16", "int64",
                                       "int32",   "int16",   "int8",    "uint8",    "bool"};
  EXPECT_EQ(dtype_names(), names);
  for (const auto& name : names) EXPECT_EQ(dtype_name(dtype_from_name(name, "x")), name);
  EXPECT_EQ(dtype_from_name("int64", "x"), c10::ScalarType::Long);
  EXPECT_EQ(dtype_from_name("bfloat16", "x"), c10::ScalarType::BFloat16);
}

TEST(Dtypes, UnknownNameNamesOrigin) {
  const auto error = catch_error<ManifestError>([] { dtype_from_name("float8", "p.pt2"); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "manifest of 'p.pt2': unknown dtype 'float8'"));
  EXPECT_EQ(error->path(), "p.pt2");
}

TEST(Dtypes, NonManifestDtypeStillHasAName) {
  EXPECT_FALSE(dtype_name(c10::ScalarType::ComplexFloat).empty());
}

TEST(Shapes, Format) {
  EXPECT_EQ(format_shape({}), "[]");
  EXPECT_EQ(format_shape({3}), "[3]");
  EXPECT_EQ(format_shape({2, 5}), "[2, 5]");
  EXPECT_EQ(format_batched_shape({}), "[B]");
  EXPECT_EQ(format_batched_shape({2, 5}), "[B, 2, 5]");
}

}  // namespace
}  // namespace tdaot
