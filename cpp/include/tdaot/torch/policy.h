// tdaot::Policy: one loaded tdaot package (a .pt2 AOTInductor artifact with a manifest).
//
// Load once, then call run() many times. Both run paths validate every input
// against the manifest (key, dtype, per-sample shape, batch range, device,
// layout) before the compiled model sees it, and throw a tdaot::InputError
// subclass naming the key otherwise; AOTInductor itself checks nothing.
//
// A package may hold several compiled models (its manifest's "models"), e.g. a dynamic-batch
// throughput model and static batch-1 latency models. Every one is loaded, checked and warmed
// up; each call (run, run_positional, Session, Binding) runs on the model serving its batch
// size (Manifest::model_for). For a control loop, bind() preallocates inputs and outputs for
// one batch size (tdaot/binding.h): the allocation-free path.
//
// Thread-safety: a Policy may be shared between threads once constructed;
// run() and run_positional() are safe to call concurrently. AOTInductor hands
// each call one of PolicyOptions::num_runners model instances and blocks while
// none is free, so with num_runners = N up to N calls run in parallel.
// The object is movable but not copyable. Recurrent policies are stepped
// through a tdaot::Session (session.h).
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/package.h"
#include "tdaot/policy_base.h"
#include "tdaot/torch/types.h"

namespace tdaot {

// How a package is loaded by the full runtime: PackageOptions (which file is accepted; shared
// with the lite runtime) and what loading it with libtorch adds.
struct PolicyOptions : PackageOptions {
  // Empty: load every model the package's manifest lists and dispatch each call by its batch
  // size. A model's name ("model", "b1", ...): load only that model; calls at batch sizes it
  // does not serve throw BatchSizeError (e.g. to compare one model against the dispatch).
  std::string model_name;
  // Intra-op threads for the ATen operators the compiled model calls (matmuls, convolutions).
  // Applied with at::set_num_threads at load and again in any thread that calls run() with
  // another count, because OpenMP's and MKL's counts belong to each calling thread. This
  // changes torch's setting for those threads and torch's process-wide default: the last
  // Policy (or torch call) wins. 0 leaves torch's setting alone. Kernels inductor generated
  // itself got their OpenMP thread count at compile time; this option does not change them.
  // Default 1: a control loop wants one predictable core, not a thread pool.
  int intra_op_threads = 1;
  // Model instances AOTInductor keeps per model of the package, each with its own activation
  // buffers: up to this many run() calls proceed in parallel; further callers wait for a free
  // one. (A Binding's allocation-free path has its own instance.)
  int num_runners = 1;
  // Runs on zero inputs done at load for each runner of each model (at the smallest batch the
  // model serves), so that one-time work (constant folding, lazy allocations, first-touch page
  // faults) is not paid by the first real call. A failure here throws ExecutionError.
  int warmup_runs = 1;
  // CUDA packages: the device index to load on; -1 is the current device. Ignored for cpu.
  int device_index = -1;
  // Keep the memory a call frees for the next call. A dynamic model allocates its intermediates
  // on every call; glibc's malloc may hand freed blocks back to the system in between, and the
  // next call then page-faults them in again (the MLP benchmark policy at 4096 rows: 1.4x its
  // time). True: at load, glibc's trim threshold is raised to 256 MiB and its mmap threshold
  // fixed at 32 MiB, process-wide, once, unless the environment sets either
  // (MALLOC_TRIM_THRESHOLD_, MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES). The process then keeps up
  // to 256 MiB of freed heap. False leaves malloc as the process set it. No effect without glibc.
  bool keep_freed_memory = true;
  // Shared libraries that register the custom operators the package calls (its manifest's
  // custom_ops), dlopen-ed with RTLD_NOW | RTLD_GLOBAL before the model is loaded and never
  // unloaded (the dispatcher keeps pointing into them). Libraries already in the process count
  // too, so a library linked into the program or loaded before needs no entry here.
  std::vector<std::string> op_libraries;
};

// The full runtime's Policy: what every runtime's Policy offers (tdaot/policy_base.h: manifest,
// contract, path, sha256, batch_sizes, swap_weights, weights_sha256, rollback_weights) and the
// at::Tensor run paths.
class Policy : public PolicyBase {
 public:
  // Loads the package at `package_path`. The file is read once; its sha256 is compared with
  // options.expected_sha256 when set, and every file it loads with the digest its manifest
  // records, before its library is loaded (verify_package checks every file). Throws PackageError (IntegrityError for a digest
  // mismatch, SignatureError for a missing or bad signature with trusted_keys set,
  // ManifestError, HostMismatchError, MissingOperatorError for an unregistered custom operator),
  // InvalidArgumentError for invalid options, ExecutionError when a warm-up run fails.
  explicit Policy(const std::string& package_path, const PolicyOptions& options = {});

  // Runs with inputs keyed by manifest key; returns the outputs keyed the same way.
  TensorMap run(const TensorMap& inputs) const;
  // Runs with inputs in manifest order; returns outputs in manifest order. The control-loop
  // path: validation allocates nothing; what AOTInductor allocates is listed in the README.
  std::vector<at::Tensor> run_positional(const std::vector<at::Tensor>& inputs) const;

  // Preallocated inputs and outputs for `batch` rows, run in place (tdaot/binding.h); for a
  // recurrent package, a bound session. Throws BatchSizeError when the package does not
  // accept `batch`, and ExecutionError when the CUDA graph of `options` cannot be captured.
  Binding bind(int64_t batch, const BindOptions& options = BindOptions()) const;

 private:
  struct Impl;  // defined in src/runtime/policy_impl.h
  friend class Session;
  friend class Binding;
};

// What verify_weights found in a weight file.
struct WeightFileInfo {
  std::string base_sha256;     // the sha256 of the package file it was made for
  // The sha256 of that package's manifest bytes: what swap_weights matches, so the file also
  // fits the package after the package is signed (again).
  std::string base_manifest_sha256;
  std::string weights_sha256;  // its weights' digest (Policy::weights_sha256 once it is live)
  std::string signed_by;       // the id of the trusted key whose signature verified, or ""
};
// Checks a weight file as Policy::swap_weights does before it changes anything, without a
// package: its structure, digests and finite values (WeightsError) and, when `trusted_keys`
// (as PolicyOptions::trusted_keys) is not empty, a valid signature by one of them
// (SignatureError naming the file or the unusable key). Whether it fits a package is
// swap_weights's check.
WeightFileInfo verify_weights(const std::string& weights_path,
                              const std::vector<std::string>& trusted_keys = {});

// The exact bytes a signature over the weight file at `weights_path` covers: its format, the
// package sha256 and manifest sha256 it was made for, the sha256 of its weights and of all
// its tensors (names, dtypes, shapes, bytes); never its "tdaot.signatures" metadata entry. The file is read and
// its digests checked first (WeightsError). tdaot.builder.weights_format.signing_payload is
// the Python twin.
std::string weights_signing_payload(const std::string& weights_path);

}  // namespace tdaot
