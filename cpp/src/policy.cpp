// tdaot::Policy: manifest and host checks, then AOTInductor's loader behind input validation.
#include "tdaot/policy.h"

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <mutex>
#include <utility>

#include "host.h"
#include "package.h"
#include "validation.h"

namespace tdaot {

struct Policy::Impl {
  Impl(std::string package_path, const PolicyOptions& options)
      : path(std::move(package_path)),
        // The manifest is read before AOTI touches the file, so missing or foreign files and
        // packages built for another host never reach dlopen.
        metadata(detail::read_package_metadata(path, options.model_name)),
        manifest(detail::manifest_from_metadata(metadata, path)),
        validator(manifest) {
    detail::check_host(manifest, path);
    try {
      std::lock_guard<std::mutex> lock(detail::aoti_metadata_mutex());
      loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path, options.model_name);
    } catch (const std::exception& e) {
      throw PackageError(path, "package '" + path + "' could not be loaded by AOTInductor: " +
                                   detail::exception_text(e));
    }
  }

  std::vector<at::Tensor> execute(const std::vector<at::Tensor>& inputs) const {
    std::vector<at::Tensor> outputs;
    try {
      outputs = loader->run(inputs);
    } catch (const std::exception& e) {
      throw ExecutionError("package '" + path +
                           "': the compiled model failed: " + detail::exception_text(e));
    }
    if (outputs.size() != manifest.outputs.size()) {
      throw ExecutionError("package '" + path + "': the compiled model returned " +
                           std::to_string(outputs.size()) + " outputs, but the manifest lists " +
                           std::to_string(manifest.outputs.size()));
    }
    return outputs;
  }

  std::string path;
  detail::Metadata metadata;
  Manifest manifest;
  detail::InputValidator validator;  // refers to `manifest`; Impl never moves (held by pointer)
  // run() is thread-safe: the AOTI container hands each call a runner and blocks while none is
  // free. The pointer is non-const only because AOTIModelPackageLoader::run is not const.
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
};

Policy::Policy(const std::string& package_path, const PolicyOptions& options)
    : impl_(std::make_unique<Impl>(package_path, options)) {}

Policy::~Policy() = default;
Policy::Policy(Policy&&) noexcept = default;
Policy& Policy::operator=(Policy&&) noexcept = default;

const Policy::Impl& Policy::impl() const {
  if (!impl_) throw Error("this tdaot::Policy was moved from; use the Policy it was moved to");
  return *impl_;
}

const Manifest& Policy::manifest() const { return impl().manifest; }

const std::string& Policy::path() const { return impl().path; }

const std::unordered_map<std::string, std::string>& Policy::metadata() const {
  return impl().metadata;
}

TensorMap Policy::run(const TensorMap& inputs) const {
  const Impl& self = impl();
  std::vector<at::Tensor> outputs = self.execute(self.validator.order_keyed(inputs));
  TensorMap result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    result.emplace(self.manifest.outputs[i].key, std::move(outputs[i]));
  }
  return result;
}

std::vector<at::Tensor> Policy::run_positional(const std::vector<at::Tensor>& inputs) const {
  const Impl& self = impl();
  self.validator.check_positional(inputs);
  return self.execute(inputs);
}

}  // namespace tdaot
