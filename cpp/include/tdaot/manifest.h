// The manifest a tdaot package carries: what goes in, what comes out, and what
// the artifact was built for. It is stored as JSON under the AOTInductor
// metadata key kManifestMetadataKey, so it can be read without loading the
// compiled library.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace tdaot {

// The AOTInductor metadata key under which the manifest JSON is stored.
inline constexpr const char* kManifestMetadataKey = "tdaot.manifest";
// The manifest schema version this runtime reads. Version 2 added the file digests; version 1
// packages are refused with a message to rebuild them.
inline constexpr int kManifestSchemaVersion = 2;

// One input or output: a dot-joined key, its dtype and its shape after the batch dim.
struct TensorSpec {
  std::string key;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> shape;  // per-sample shape, without the leading batch dim
};

// The batch sizes the artifact accepts, inclusive. A static artifact has min == max.
struct BatchRange {
  int64_t min = 1;
  int64_t max = 1;
  bool dynamic() const noexcept { return min != max; }
  bool contains(int64_t batch) const noexcept { return batch >= min && batch <= max; }
};

// Where the artifact came from.
struct Source {
  std::string module_class;  // fully qualified Python class of the exported module
  std::string factory;       // "file.py:function" when built from the CLI, else empty
};

// One piece of recurrent state: output `output` of a step is input `input` of the next
// (torchrl's ("next", k) -> k convention, so usually output "next.k" feeds input "k").
struct StatePair {
  std::string input;
  std::string output;
};

// The state a recurrent policy carries between steps; see tdaot::Session.
struct Recurrent {
  std::vector<StatePair> state;
  // The bool input that marks the first step after a reset (torchrl's "is_init"); empty when
  // the policy has none.
  std::string is_init;
};

struct Manifest {
  int schema_version = kManifestSchemaVersion;
  std::vector<TensorSpec> inputs;   // in the compiled model's positional order
  std::vector<TensorSpec> outputs;  // in the compiled model's output order
  BatchRange batch;
  std::string interaction_type;  // deterministic, mode, mean or random
  std::string device;            // "cpu" or "cuda"
  std::string cpu_target;        // the -march the kernels were compiled for ("native", ...)
  std::string cpu_isa;  // the vector ISA inductor generated code for ("avx512", "avx2", ...)
  std::string torch_version;
  std::string tensordict_version;
  std::string tdaot_version;
  Source source;
  // Present only for recurrent policies (the optional top-level "recurrent" field).
  std::optional<Recurrent> recurrent;
  // Custom operators the compiled model calls through AOTInductor's proxy executor, by
  // qualified name ("tdaot_test::scale_clamp", "ns::op.overload" for a non-default overload).
  // Policy refuses to load the package unless every one is registered (the optional top-level
  // "custom_ops" field; empty for packages that call only torch's own operators).
  std::vector<std::string> custom_ops;
  // The sha256 (64 lowercase hex digits) of every file in the package, by its name inside the
  // archive without the archive's top folder ("data/aotinductor/model/<hash>.wrapper.so").
  // Not listed: the AOTInductor metadata JSONs that carry this manifest (a file cannot hold
  // its own digest) and the zip writer's bookkeeping records (.data/version,
  // .data/serialization_id). Policy verifies every digest before it loads the library.
  std::map<std::string, std::string> files;

  // Index of the input with this key, or nullopt.
  std::optional<size_t> input_index(const std::string& key) const;
  // Index of the output with this key, or nullopt.
  std::optional<size_t> output_index(const std::string& key) const;

  // Parses a manifest; throws ManifestError naming `origin` and the field at fault.
  static Manifest from_json(const std::string& json, const std::string& origin);
  // Serialises to the same JSON schema the Python stage writes.
  std::string to_json(int indent = -1) const;
};

// Reads the manifest of a package without loading its compiled library.
// Throws PackageError when the file is missing or not a package, ManifestError
// when it holds no valid manifest.
Manifest read_manifest(const std::string& package_path);

// Manifest dtype names ("float32", "int64", "bool", ...) to and from ScalarType.
// dtype_from_name throws ManifestError naming `origin` for an unknown name.
std::string dtype_name(c10::ScalarType dtype);
c10::ScalarType dtype_from_name(const std::string& name, const std::string& origin);

// Formats a shape as "[a, b, c]" for messages.
std::string format_shape(const std::vector<int64_t>& shape);
// Formats a per-sample shape behind its batch dim as "[B, a, b]" for messages.
std::string format_batched_shape(const std::vector<int64_t>& shape);

}  // namespace tdaot
