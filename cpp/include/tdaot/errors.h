// Exceptions thrown by the tdaot runtime.
//
// Every failure a caller can cause is reported as a subclass of tdaot::Error
// (itself a std::runtime_error) whose message names the package path or the
// input key at fault, what was expected and what was received. The Python
// bindings map each class to the exception of the same name in tdaot.errors.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace tdaot {

// Base class of every tdaot exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The package file is missing, unreadable, not a .pt2 archive, or AOTInductor refused it.
class PackageError : public Error {
 public:
  PackageError(std::string path, const std::string& message)
      : Error(message), path_(std::move(path)) {}
  // The package path at fault.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// The package is not the artifact it claims to be: the whole file's sha256 differs from
// PolicyOptions::expected_sha256 (pinning), or a file inside it differs from the sha256 its
// manifest records, is missing, or is not listed at all.
class IntegrityError : public PackageError {
 public:
  using PackageError::PackageError;
};

// With PolicyOptions::trusted_keys set: the package carries no valid signature by any of those
// keys (unsigned, signed only by other keys, or its manifest changed after signing), or a
// trusted key cannot be used (a missing or garbage file, a private key, not Ed25519; the
// message names it). An IntegrityError: the package is not one its owners vouched for. Also
// thrown by Policy::swap_weights (path(): the weight file) when the policy has trusted keys
// and the weight file carries no valid signature by one of them.
class SignatureError : public IntegrityError {
 public:
  using IntegrityError::IntegrityError;
};

// The package holds no tdaot manifest, or the manifest is malformed or of an unknown schema.
class ManifestError : public PackageError {
 public:
  using PackageError::PackageError;
};

// The package was built for something this host or this runtime cannot provide
// (another device, CPU instruction set or torch version).
class HostMismatchError : public PackageError {
 public:
  using PackageError::PackageError;
};

// The package calls a custom operator (manifest "custom_ops") that no library loaded in this
// process registers; load its library first (PolicyOptions::op_libraries, tdaot-run --op-lib).
class MissingOperatorError : public HostMismatchError {
 public:
  MissingOperatorError(std::string path, std::string op, const std::string& message)
      : HostMismatchError(std::move(path), message), op_(std::move(op)) {}
  // The operator's qualified name ("namespace::name" or "namespace::name.overload").
  const std::string& op() const noexcept { return op_; }

 private:
  std::string op_;
};

// Base class of the input validation errors: an input does not match the manifest.
class InputError : public Error {
 public:
  InputError(std::string key, const std::string& message) : Error(message), key_(std::move(key)) {}
  // The manifest key ("a.b" for nested keys) of the input at fault; empty when
  // the fault is not tied to one key (for example a wrong number of inputs).
  const std::string& key() const noexcept { return key_; }

 private:
  std::string key_;
};

// A key the manifest lists as an input was not passed.
class MissingKeyError : public InputError {
 public:
  using InputError::InputError;
};

// A key was passed that the manifest does not list as an input.
class UnknownKeyError : public InputError {
 public:
  using InputError::InputError;
};

// An input has another dtype than the manifest's.
class DtypeError : public InputError {
 public:
  using InputError::InputError;
};

// An input has another rank or per-sample shape than the manifest's, or the
// positional path got the wrong number of inputs.
class ShapeError : public InputError {
 public:
  using InputError::InputError;
};

// The batch size is outside the manifest's range or differs between inputs.
class BatchSizeError : public InputError {
 public:
  using InputError::InputError;
};

// An input lives on another device than the package was built for.
class DeviceError : public InputError {
 public:
  using InputError::InputError;
};

// An input is not plain dense contiguous memory, which the generated kernels assume: a
// non-contiguous view, a sparse or mkldnn layout, a nested tensor, a tensor subclass, or a lazily
// negated view (resolve it with tensor.resolve_neg()).
class LayoutError : public InputError {
 public:
  using InputError::InputError;
};

// A service disagrees with the package's deployment contract (tdaot/contract.h): it asked for a
// signal the contract lacks, or its element names are not the policy's.
class ContractError : public Error {
 public:
  ContractError(std::string key, const std::string& message)
      : Error(message), key_(std::move(key)) {}
  // The manifest key of the signal at fault.
  const std::string& key() const noexcept { return key_; }

 private:
  std::string key_;
};

// A caller's misuse, as opposed to a bad package or input or an internal failure: invalid
// options, a moved-from object, a single-thread object used from two threads at once, an option
// or call that does not apply to this package (cuda_graph on a CPU package, reset of a package
// that is not recurrent). Like ONNX Runtime's ORT_INVALID_ARGUMENT.
class InvalidArgumentError : public Error {
 public:
  using Error::Error;
};

// The runtime broke one of its own invariants: a bug in tdaot, never something a caller, a
// package or an input can cause (those are the classes above). Kept apart so that a service can
// report it as a bug, and tests can assert that no path reaches it.
class InternalError : public Error {
 public:
  // The message is prefixed with "internal: ", as every such report was before this class.
  explicit InternalError(const std::string& message) : Error("internal: " + message) {}
};

// The compiled model itself failed while running validated inputs.
class ExecutionError : public Error {
 public:
  using Error::Error;
};

// A weight file (tdaot.export_weights) was refused by Policy::swap_weights: unreadable,
// truncated, its digest wrong, made for another package, or a tensor missing, of another
// shape or dtype, or not finite. The weights that were live keep serving.
class WeightsError : public Error {
 public:
  WeightsError(std::string path, std::string tensor, const std::string& message)
      : Error(message), path_(std::move(path)), tensor_(std::move(tensor)) {}
  // The weight file at fault.
  const std::string& path() const noexcept { return path_; }
  // The tensor at fault ("model/<model>/<constant>" or "weights/<name>"), or empty.
  const std::string& tensor() const noexcept { return tensor_; }

 private:
  std::string path_;
  std::string tensor_;
};

}  // namespace tdaot
