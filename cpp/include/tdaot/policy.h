// tdaot::Policy: one loaded tdaot package (a .pt2 AOTInductor artifact with a manifest).
//
// Load once, then call run() many times. Both run paths validate every input
// against the manifest (key, dtype, per-sample shape, batch range, device,
// layout) before the compiled model sees it, and throw a tdaot::InputError
// subclass naming the key otherwise; AOTInductor itself checks nothing.
//
// Thread-safety: a Policy may be shared between threads once constructed;
// run() and run_positional() are safe to call concurrently (AOTInductor hands
// each call a runner from its pool and blocks while none is free).
// The object is movable but not copyable.
#pragma once

#include <ATen/Tensor.h>

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot {

// Inputs or outputs keyed by manifest key ("a.b" for the nested key ("a", "b")).
using TensorMap = std::map<std::string, at::Tensor>;

struct PolicyOptions {
  // The model name inside the package; tdaot.build always writes "model".
  std::string model_name = "model";
};

class Policy {
 public:
  // Loads the package at `package_path`; throws PackageError, ManifestError or HostMismatchError.
  explicit Policy(const std::string& package_path, const PolicyOptions& options = {});
  ~Policy();
  Policy(Policy&&) noexcept;
  Policy& operator=(Policy&&) noexcept;
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  // The manifest read from the package.
  const Manifest& manifest() const;
  // The path the package was loaded from.
  const std::string& path() const;
  // All AOTInductor metadata of the package (the manifest JSON included).
  const std::unordered_map<std::string, std::string>& metadata() const;

  // Runs with inputs keyed by manifest key; returns the outputs keyed the same way.
  TensorMap run(const TensorMap& inputs) const;
  // Runs with inputs in manifest order; returns outputs in manifest order.
  std::vector<at::Tensor> run_positional(const std::vector<at::Tensor>& inputs) const;

 private:
  struct Impl;
  // The implementation; throws tdaot::Error on a moved-from Policy instead of crashing.
  const Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdaot
