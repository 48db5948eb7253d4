// The manifest a tdaot package carries: what goes in, what comes out, and what
// the artifact was built for. It is stored as JSON under the AOTInductor
// metadata key kManifestMetadataKey, so it can be read without loading the
// compiled library.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/dtype.h"

namespace tdaot {

// The AOTInductor metadata key under which the manifest JSON is stored.
inline constexpr const char* kManifestMetadataKey = "tdaot.manifest";
// The manifest schema version this runtime reads. Version 2 added the file digests; version 1
// packages are refused with a message to rebuild them.
inline constexpr int kManifestSchemaVersion = 2;

// One input or output: a dot-joined key, its dtype and its shape after the batch dim.
struct TensorSpec {
  std::string key;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // per-sample shape, without the leading batch dim
};

// The batch sizes the artifact accepts, inclusive. A static artifact has min == max.
struct BatchRange {
  int64_t min = 1;
  int64_t max = 1;
  bool dynamic() const noexcept { return min != max; }
  bool contains(int64_t batch) const noexcept { return batch >= min && batch <= max; }
};

// Whether a model runs on the lite runtime (tdaot/lite.h, no libtorch), as the build found it by
// reading the model library's dynamic symbol table. Absent in packages built before tdaot
// recorded it: such a model is taken as needing libtorch.
struct LiteSupport {
  bool runs = false;
  // Every dynamic symbol the model library needs beyond the C and C++ runtime (libc, libm,
  // libstdc++, libgcc_s): torch's C shim functions (aoti_torch_*), SLEEF's vector math, ...
  // The lite runtime refuses to load a model unless it provides every one.
  std::vector<std::string> needs;
  // When it does not run: the first symbols of `needs` the lite runtime lacks (may be empty).
  std::vector<std::string> missing;
  // When it does not run: why, in one line ("calls ATen: aoti_torch_cpu_addmm_out", "dynamic
  // batch: not built for the bound run"); empty when it runs.
  std::string why;
};

// A convolution weight the full runtime gives oneDNN packed (ModelSpec::packed_convolutions):
// the constant's original name and its layer's geometry, which decides oneDNN's layout.
struct PackedConvolution {
  std::string weight;
  std::array<int64_t, 2> padding{};   // >= 0
  std::array<int64_t, 2> stride{};    // >= 1
  std::array<int64_t, 2> dilation{};  // >= 1
  int64_t groups = 1;                 // >= 1
};

// One compiled model of the package (AOTInductor's "data/aotinductor/<name>/"): the batch sizes
// it serves and how it was tuned. A package may hold several, e.g. a dynamic-batch throughput
// model and static batch-1 latency models; the runner sends each call to Manifest::model_for.
struct ModelSpec {
  std::string name;    // [A-Za-z0-9_]+, unique in the package
  BatchRange batch;    // inside the manifest's batch range
  // "throughput" or "latency"; empty only for the model synthesised for a package whose
  // manifest lists no models (one model, "model", serving the whole batch range).
  std::string tuning;
  // Whether it runs on the lite runtime (the optional per-model "lite" field).
  std::optional<LiteSupport> lite;
  // The optional per-model "chunk_rows": a call of more rows runs as slices of at most this many
  // (the last holds the remainder, joined to the one before when smaller than batch.min), each
  // slice's outputs written into the whole call's. The build records it for a CPU model whose
  // rows are independent and whose largest intermediate outgrows its budget at the largest
  // batch (tdaot.builder.tuning). Absent (packages built before it, or not needed): never sliced.
  std::optional<int64_t> chunk_rows;
  // The optional per-model "packed_weights": the original names of the constants its linear
  // layers hand to oneDNN's matmul, which the full runtime gives oneDNN packed (at load and at
  // every weight swap). Absent (packages built before it, or none): every constant as built.
  std::vector<std::string> packed_weights;
  // The optional per-model "packed_convolutions": the same for the weights of its convolutions
  // on oneDNN's op, each with its layer's geometry; no weight is listed twice, here or above.
  std::vector<PackedConvolution> packed_convolutions;
};

// "lite" when the model runs on the lite runtime, else "needs libtorch: <why>" (tools' tables).
std::string lite_text(const ModelSpec& model);

// The model name of a package whose manifest lists no models (tdaot.build's first model).
inline constexpr const char* kDefaultModelName = "model";

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
  // The compiled models, as the optional top-level "models" lists them; always filled after
  // parsing (absent: one model "model" serving `batch`, with an empty tuning). Together they
  // serve every batch of `batch`.
  std::vector<ModelSpec> models;
  std::string interaction_type;  // deterministic, mode, mean or random
  std::string device;            // "cpu" or "cuda"
  std::string cpu_target;        // the -march the kernels were compiled for ("native", ...)
  std::string cpu_isa;  // the vector ISA inductor generated code for ("avx512", "avx2", ...)
  // The architecture the models run on ("x86_64", "aarch64"); empty in packages from before it
  // was recorded (the optional top-level "architecture"). An aarch64 package holds static-batch
  // lite models only, which may leave batches of `batch` unserved.
  std::string architecture;
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
  // The robot deployment contract (tdaot/contract.h; the optional top-level "contract").
  std::optional<Contract> contract;
  // tdaot's patches of torch's internals in force while the models compiled, and the changes to
  // results beyond torch's own the models take ("tanh_within_3_5_ulp", ...), by name (the
  // optional top-level "patches" and "numerics": distinct names; nullopt where the build did not
  // record them, an empty list where there were none). Information only: nothing loads by them.
  std::optional<std::vector<std::string>> patches;
  std::optional<std::vector<std::string>> numerics;
  // The sha256 (64 lowercase hex digits) of every file in the package, by its name inside the
  // archive without the archive's top folder ("data/aotinductor/model/<hash>.wrapper.so").
  // Not listed: the AOTInductor metadata JSONs that carry this manifest (a file cannot hold
  // its own digest) and the zip writer's bookkeeping records (.data/version,
  // .data/serialization_id). Policy verifies every digest before it loads the library.
  // Empty in an unsealed manifest.
  std::map<std::string, std::string> files;
  // The digest (64 lowercase hex digits) of every tensor a weight file of the package's
  // unchanged policy holds: what a freshly loaded policy reports as weights_sha256 (the
  // optional top-level "weights_sha256"). Empty where the build could not compute it (a model
  // it could not load): such a package cannot swap weights.
  std::string weights_sha256;
  // Top-level fields this runtime does not know (tolerated for forward compatibility), each as
  // its JSON text, so that to_json writes them back. Unknown fields inside known objects are
  // ignored and dropped.
  std::map<std::string, std::string> extra;

  // Index of the input with this key, or nullopt.
  std::optional<size_t> input_index(const std::string& key) const;
  // Index of the output with this key, or nullopt.
  std::optional<size_t> output_index(const std::string& key) const;

  // The model a call at `batch` runs on: of the models whose range holds `batch`, the one with
  // the narrowest range (ties: the first listed); nullptr when none does.
  const ModelSpec* model_for(int64_t batch) const;
  // "'model' 1..64, 'b1' 1": the models and the batches each serves, for messages.
  std::string describe_models() const;

  // Parses and validates a package's (sealed) manifest; throws ManifestError naming `origin` and
  // the field at fault. This is the one definition of a valid manifest: the Python stage reads
  // every manifest through it (tdaot._C) and checks every manifest it writes with it (the one it
  // hands AOTInductor before the files exist, unsealed, through the same parser). The rules,
  // and a conformance corpus both stages run, are in tests/manifests/.
  static Manifest from_json(const std::string& json, const std::string& origin);
  // Serialises to the same JSON schema the Python stage writes (normalised: known fields in
  // schema order, absent optional fields left out, null factory and is_init when empty, then
  // the unknown top-level fields). "models" is written unless it is the one model synthesised
  // for a manifest without it (or empty), so a manifest round-trips as it was read.
  std::string to_json(int indent = -1) const;
};

// Reads the manifest of a package without loading its compiled library.
// Throws PackageError when the file is missing or not a package, ManifestError
// when it holds no valid manifest.
Manifest read_manifest(const std::string& package_path);

// The manifest JSON exactly as the package stores it: the bytes its signatures sign (tdaot.sign
// signs them; PolicyOptions::trusted_keys verifies them). Read with read_manifest's checks.
std::string read_manifest_bytes(const std::string& package_path);

// Manifest dtype names ("float32", "int64", "bool", ...) to and from DType.
// dtype_from_name throws ManifestError naming `origin` for an unknown name.
std::string dtype_name(DType dtype);
DType dtype_from_name(const std::string& name, const std::string& origin);

}  // namespace tdaot
