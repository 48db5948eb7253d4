// Internal: the state behind tdaot::Policy, shared with tdaot::Session.
#pragma once

#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "package.h"
#include "tdaot/policy.h"
#include "validation.h"

namespace tdaot {

struct Policy::Impl {
  Impl(std::string package_path, const PolicyOptions& options);

  // Runs validated inputs (in manifest order) and checks the output count.
  std::vector<at::Tensor> execute(const std::vector<at::Tensor>& inputs) const;

  std::string path;
  PolicyOptions options;
  std::string sha256;  // of the package file
  detail::Metadata metadata;
  Manifest manifest;
  // The device inputs must be on: cpu, or cuda with the index the model was loaded on.
  c10::Device device;
  detail::InputValidator validator;  // refers to `manifest`; Impl never moves (held by pointer)
  // The extracted files, while the runner needs them (see PolicyOptions::temp_dir).
  std::optional<detail::ExtractedModel> files;
  // run() is thread-safe: the AOTI container hands each call a model instance and blocks while
  // none is free. The pointer is non-const only because AOTIModelContainerRunner::run is not.
  std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner;

 private:
  Impl(const detail::Package& package, const PolicyOptions& options);
  void warm_up() const;
};

namespace detail {

// Outputs in manifest order, keyed by manifest key.
TensorMap keyed_outputs(const Manifest& manifest, std::vector<at::Tensor>&& outputs);

// Zero tensors for every input of `manifest` at `batch`, on `device`.
std::vector<at::Tensor> zero_inputs(const Manifest& manifest, int64_t batch, c10::Device device);

// [batch, *shape]
std::vector<int64_t> batched_shape(int64_t batch, const std::vector<int64_t>& shape);

}  // namespace detail
}  // namespace tdaot
