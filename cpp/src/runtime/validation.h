// Internal: checks inputs against a manifest before the compiled model sees them
// (AOTInductor itself checks neither shapes nor dtypes).
#pragma once

#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <string>
#include <vector>

#include "tdaot/manifest.h"
#include "tdaot/torch/types.h"

namespace tdaot::detail {

// Validates inputs for one manifest. On success nothing is allocated or formatted (this
// runs in control loops); every failure throws the InputError subclass for the first
// problem, naming the key, what was expected and what was received.
class InputValidator {
 public:
  // Keeps a reference: `manifest` must outlive the validator. Inputs must be on `device`; a
  // device without an index accepts any index of its type.
  InputValidator(const Manifest& manifest, c10::Device device);

  // Inputs in manifest order.
  void check_positional(const std::vector<at::Tensor>& inputs) const;

  // Inputs keyed by manifest key; returns them in manifest order (checked).
  std::vector<at::Tensor> order_keyed(const TensorMap& inputs) const;

 private:
  void check_tensors(const std::vector<at::Tensor>& inputs) const;
  void check_tensor(const TensorSpec& spec, const at::Tensor& tensor) const;

  const Manifest& manifest_;
  c10::Device device_;
};

// Throws for a tensor whose memory the compiled model cannot read as plain dense data: InputError
// when it is undefined, LayoutError for a Python tensor subclass that overrides
// __torch_dispatch__, a nested tensor, a layout other than strided (sparse, mkldnn) or a tensor
// without storage. Run before anything reads the sizes, which some of these do not have.
void check_plain(const TensorSpec& spec, const at::Tensor& tensor);

// The tensors of `specs` taken from `inputs`, in the order of `specs`. Throws MissingKeyError
// or UnknownKeyError naming the key and listing the expected keys. Checks nothing else.
std::vector<at::Tensor> pick_keyed(const std::vector<TensorSpec>& specs, const TensorMap& inputs);

// "a, b, c": the keys of `specs`, for messages.
std::string key_list(const std::vector<TensorSpec>& specs);

}  // namespace tdaot::detail
