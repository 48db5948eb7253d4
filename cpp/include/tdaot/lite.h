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

#include "tdaot/contract.h"
#include "tdaot/dtype.h"
#include "tdaot/envelope.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/package.h"

namespace tdaot::lite {

// How a package is loaded: PackageOptions (which file is accepted, where it is unpacked).
struct Options : PackageOptions {};

// Options of Policy::bind.
struct BindOptions {
  // The safety envelope of tdaot::Session, allocation-free too: when an input or output element
  // of a run is not finite, the outputs are the previous run's (and the state is not carried);
  // outputs with a contract max_delta move at most that far per run (not on a row's first run
  // after bind or reset). interventions() counts both.
  bool envelope = false;
};

class Binding;

class Policy {
 public:
  // Loads the lite models of the package at `package_path`. Throws what tdaot::Policy throws for
  // the file (PackageError, IntegrityError, SignatureError, ManifestError), HostMismatchError
  // when this CPU lacks the package's instruction set or the package has no model that runs on
  // the lite runtime (naming its models and why each needs libtorch), or when a model needs a
  // symbol this process does not provide (naming it; checked before the model is loaded).
  explicit Policy(const std::string& package_path, const Options& options = {});
  ~Policy();
  Policy(Policy&&) noexcept;
  Policy& operator=(Policy&&) noexcept;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const Manifest& manifest() const;
  // The deployment contract the package was built with (tdaot/contract.h), or nullopt.
  const std::optional<Contract>& contract() const;
  const std::string& path() const;
  // The sha256 of the package file as loaded (64 lowercase hex digits).
  const std::string& sha256() const;
  // The batch sizes the loaded lite models serve, ascending.
  std::vector<int64_t> batch_sizes() const;

  // Inputs and outputs preallocated for `batch` rows, run in place. Throws BatchSizeError when
  // no lite model serves `batch`, naming the batch sizes that are served.
  Binding bind(int64_t batch, const BindOptions& options = BindOptions()) const;

  // Hot weight swap, as tdaot::Policy::swap_weights (docs: weight swap). Reads the weight file
  // at `weights_path` (tdaot.export_weights) and checks all of it first: its digests, its
  // signature when the policy has trusted keys, that it was made for this package, and every
  // constant of every loaded lite model by name, dtype and shape. Then each binding (made before
  // or after) runs on the new weights from its next run() on: a run in flight finishes on the
  // old ones, and the run that first sees new weights gives its model instance the new
  // constants (it allocates; the runs after it do not). Throws WeightsError naming the file and
  // tensor, or the model whose weights cannot be swapped and why; SignatureError naming the
  // file; the live weights then keep serving unchanged. Safe to call while other threads run
  // bindings of this policy; swaps are serialised.
  void swap_weights(const std::string& weights_path) const;
  // The sha256 of the live weights ("" for a package built before tdaot recorded it).
  std::string weights_sha256() const;
  // Makes the weights live before the last swap (or rollback) live again. Throws WeightsError
  // when there is nothing to roll back to.
  void rollback_weights() const;

  struct Impl;  // defined in src/lite/policy.cpp

 private:
  const Impl& impl() const;
  std::shared_ptr<const Impl> impl_;
};

class Binding {
 public:
  ~Binding();
  Binding(Binding&&) noexcept;
  Binding& operator=(Binding&&) noexcept;
  Binding(const Binding&) = delete;
  Binding& operator=(const Binding&) = delete;

  int64_t batch() const;
  // The name of the package's model that serves this batch size.
  const std::string& model() const;

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

  // Runs the model on the inputs and writes the outputs (for a recurrent package also the next
  // state, and clears is_init). No heap allocation. Throws ExecutionError when the model fails,
  // tdaot::Error when another thread is using this binding.
  void run();

  // Recurrent packages (a bound session, as tdaot::Binding): zeroes the state of every row and
  // marks it is_init for the next run; with the envelope, its previous outputs are forgotten too
  // (the next run is not rate limited). Throws InvalidArgumentError when there is nothing to
  // reset: a package that is not recurrent, bound without the envelope.
  void reset();
  // The same for the rows where `mask` (one bool per row) is true; throws ShapeError when it
  // does not hold batch() values.
  void reset(const std::vector<bool>& mask);

  // The envelope's interventions so far (BindOptions::envelope; zeros without it).
  const Interventions& interventions() const;

  struct Impl;  // defined in src/lite/binding.cpp

 private:
  friend class Policy;
  explicit Binding(std::unique_ptr<Impl> impl);
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdaot::lite
