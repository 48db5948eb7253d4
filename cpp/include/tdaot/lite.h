// tdaot::lite: runs the batch-specialised models of a tdaot package with no libtorch at all.
//
//   tdaot::lite::Policy policy("walk.pt2", options);  // options: trusted_keys, expected_sha256...
//   tdaot::lite::Binding b = policy.bind(1);          // a batch size a lite model serves
//   float* obs = b.input<float>("observation");       // the binding's own storage, [1, *shape]
//   const float* action = b.output<float>("action");
//   for (;;) { read_sensors(obs); b.run(); send(action); }  // run(): no heap allocation
//
// What runs here: the models the build recorded as running on the lite runtime (the manifest's
// per-model "lite" record; `tdaot inspect` and `tdaot-lite inspect` list them): static-batch
// models built for the bound run, whose library needs from the process only torch's C shim
// functions, which this library implements over its own tensor handles, and SLEEF's vector math
// (the system's libsleef). The dynamic-batch throughput model needs ATen and runs only on the
// full runtime (tdaot/policy.h). A package is read exactly as the full runtime reads it (the
// same hardened zip read, pin, file digests, Ed25519 signatures, manifest parser and host ISA
// checks, from one shared core); instead of the torch major.minor check, each model's recorded
// needs are checked against what this process provides, so a package built by any torch whose
// models run here is accepted. Errors are the tdaot::Error hierarchy (tdaot/errors.h).
//
// Thread-safety: a Policy may be shared between threads once constructed, and bindings of one
// Policy are independent (each has its own model instance and its own copy of the weights it was
// built with; weights swapped in are shared by the bindings, read-only). A
// Binding is for one thread at a time: a run() or reset() while another call on it runs throws
// tdaot::Error. Policy and Binding are movable, not copyable; a Binding keeps the loaded model
// alive after its Policy is destroyed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/bind_options.h"
#include "tdaot/binding_base.h"
#include "tdaot/contract.h"
#include "tdaot/dtype.h"
#include "tdaot/envelope.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/package.h"
#include "tdaot/policy_base.h"

namespace tdaot::lite {

// How a package is loaded: PackageOptions (which file is accepted, where it is unpacked). The
// same name as the full runtime's tdaot::PolicyOptions, which adds what libtorch loading needs.
struct PolicyOptions : PackageOptions {};

// The one options struct of both runtimes' bind (tdaot/bind_options.h); cuda_graph is refused.
using BindOptions = tdaot::BindOptions;

class Binding;

// One of a lite binding's buffers, as inputs() and outputs() list them (manifest order): the
// lite runtime's counterpart of the full runtime's at::Tensor views.
struct BoundBuffer {
  std::string key;             // the manifest key ("a.b" for nested keys)
  DType dtype;
  std::vector<int64_t> shape;  // [batch, *per-sample shape]
  void* data;                  // contiguous, 64-byte aligned; an output's is written by run()
  size_t bytes;                // the element count times the dtype's size
};

// How the instances of one loaded lite model hold its constants (its weights and buffers), as
// Policy::constants() lists them. In place, every binding's instance reads them from the model
// library's own read-only bytes (one copy in memory, shared by the bindings); otherwise each
// instance holds AOTInductor's own copy of them, made when the binding is.
struct ModelConstants {
  std::string model;  // the model's name (ModelSpec::name, what Binding::model() says)
  bool in_place = false;
  // Not in place: why, e.g. which field of the constants' records (in the model's generated
  // wrapper source) holds a value the reader does not know. "" when in place.
  std::string why;
  // In place: the constants each instance still copies, since the model may write them (the
  // policy's buffers, as register_buffer named them: "norm.running_mean"), in the model's order.
  std::vector<std::string> copied;
};

// The lite runtime's Policy: what every runtime's Policy offers (tdaot/policy_base.h: manifest,
// contract, path, sha256, batch_sizes, swap_weights, weights_sha256, rollback_weights; a swap
// reaches each binding, made before or after, from its next run() on: the run that first sees
// new weights gives its model instance the new constants, it allocates, the runs after it do
// not) and bind().
class Policy : public PolicyBase {
 public:
  // Loads the lite models of the package at `package_path`. Throws what tdaot::Policy throws for
  // the file (PackageError, IntegrityError, SignatureError, ManifestError), HostMismatchError
  // when this CPU lacks the package's instruction set or the package has no model that runs on
  // the lite runtime (naming its models and why each needs libtorch), or when a model needs a
  // symbol this process does not provide (naming it; checked before the model is loaded).
  explicit Policy(const std::string& package_path, const PolicyOptions& options = {});

  // Inputs and outputs preallocated for `batch` rows, run in place. Throws BatchSizeError when
  // no lite model serves `batch` (batch_sizes() are those served), naming them.
  Binding bind(int64_t batch, const BindOptions& options = BindOptions()) const;

  // How each loaded lite model holds its constants (in place or copied, and why), in the order
  // the models are listed in the manifest; `tdaot-lite inspect` prints it.
  std::vector<ModelConstants> constants() const;

 private:
  struct Impl;  // defined in src/lite/policy_impl.h
  friend class Binding;
};

// The lite runtime's bound run: what both runtimes' Binding offer (tdaot/binding_base.h: batch,
// model, run, reset, reset(rows), interventions; run() allocates nothing) over raw buffers.
class Binding : public BindingBase {
 public:
  // The input of manifest key `key`: the binding's own contiguous storage of
  // input_shape(key), written in place before run(). Throws UnknownKeyError naming the key and
  // listing the inputs, DtypeError naming the key and both dtypes when T is not its dtype.
  template <typename T>
  T* input(const std::string& key) {
    return static_cast<T*>(input_data(key, dtype_of<T>::value));
  }
  // The output of manifest key `key`, written by run(); throws like input().
  template <typename T>
  const T* output(const std::string& key) const {
    return static_cast<const T*>(output_data(key, dtype_of<T>::value));
  }
  // The untyped forms: `dtype` must be the key's dtype.
  void* input_data(const std::string& key, DType dtype);
  const void* output_data(const std::string& key, DType dtype) const;
  // [batch, *per-sample shape] of an input or output; throws UnknownKeyError.
  std::vector<int64_t> input_shape(const std::string& key) const;
  std::vector<int64_t> output_shape(const std::string& key) const;
  // Every input and output buffer, in manifest order (what the full runtime's inputs() and
  // outputs() are): for code that walks a package's keys without knowing them.
  const std::vector<BoundBuffer>& inputs() const;
  const std::vector<BoundBuffer>& outputs() const;

 private:
  struct Impl;  // defined in src/lite/binding.cpp
  friend class Policy;
  explicit Binding(std::unique_ptr<Impl> impl);
};

}  // namespace tdaot::lite
