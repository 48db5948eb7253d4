// Internal: checks inputs against a manifest before the compiled model sees them
// (AOTInductor itself checks neither shapes nor dtypes).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/DeviceType.h>

#include <vector>

#include "tdaot/manifest.h"
#include "tdaot/policy.h"

namespace tdaot::detail {

// Validates inputs for one manifest. On success nothing is allocated or formatted (this
// runs in control loops); every failure throws the InputError subclass for the first
// problem, naming the key, what was expected and what was received.
class InputValidator {
 public:
  // Keeps a reference: `manifest` must outlive the validator.
  explicit InputValidator(const Manifest& manifest);

  // Inputs in manifest order.
  void check_positional(const std::vector<at::Tensor>& inputs) const;

  // Inputs keyed by manifest key; returns them in manifest order (checked).
  std::vector<at::Tensor> order_keyed(const TensorMap& inputs) const;

 private:
  void check_tensors(const std::vector<at::Tensor>& inputs) const;
  void check_tensor(const TensorSpec& spec, const at::Tensor& tensor) const;
  [[noreturn]] void throw_missing(const TensorMap& inputs) const;
  [[noreturn]] void throw_unknown(const TensorMap& inputs) const;

  const Manifest& manifest_;
  c10::DeviceType device_type_;
};

}  // namespace tdaot::detail
