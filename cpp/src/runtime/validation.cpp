// Input validation. The checks only compare sizes, dtypes and flags; a message is built only
// where its error is thrown.
#include "runtime/validation.h"

#include <c10/core/Device.h>
#include <c10/core/Layout.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "core/key_hints.h"
#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"

namespace tdaot::detail {
namespace {

std::string quoted(const std::string& key) { return "'" + key + "'"; }

std::string sizes_text(const at::Tensor& tensor) { return format_shape(tensor.sizes().vec()); }

bool shape_matches(const TensorSpec& spec, const at::Tensor& tensor) {
  const auto sizes = tensor.sizes();
  if (sizes.size() != spec.shape.size() + 1) return false;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    if (sizes[i + 1] != spec.shape[i]) return false;
  }
  return true;
}

[[noreturn]] void throw_batch_range(const TensorSpec& spec, int64_t batch,
                                    const Manifest& manifest) {
  const BatchRange& range = manifest.batch;
  const std::string head =
      "input " + quoted(spec.key) + " has batch size " + std::to_string(batch) + ", but ";
  if (!range.dynamic()) {
    throw BatchSizeError(spec.key, head + "the package was built for a static batch size of " +
                                       std::to_string(range.min));
  }
  // With several models, which batches each serves (the package's range is their union).
  const std::string models =
      manifest.models.size() > 1 ? " (models " + manifest.describe_models() + ")" : "";
  throw BatchSizeError(spec.key, head + "the package accepts batch sizes " +
                                     std::to_string(range.min) + ".." + std::to_string(range.max) +
                                     models);
}

[[noreturn]] void throw_batch_differs(const TensorSpec& spec, int64_t batch,
                                      const TensorSpec& first, int64_t first_batch) {
  throw BatchSizeError(spec.key, "input " + quoted(spec.key) + " has batch size " +
                                     std::to_string(batch) + ", but input " + quoted(first.key) +
                                     " has batch size " + std::to_string(first_batch) +
                                     "; all inputs must share the batch size");
}

[[noreturn]] void throw_missing(const std::vector<TensorSpec>& specs, const TensorMap& inputs) {
  std::vector<std::string> missing;
  for (const auto& spec : specs) {
    if (inputs.count(spec.key) == 0) missing.push_back(spec.key);
  }
  // The keys given that the package does not list: what a misspelt key was given as.
  std::vector<std::string> given;
  for (const auto& entry : inputs) {
    const std::string& key = entry.first;
    const bool known =
        std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.key == key; });
    if (!known) given.push_back(key);
  }
  throw MissingKeyError(missing.front(),
                        missing_keys_text(missing, given) + "; expected keys: " + key_list(specs));
}

[[noreturn]] void throw_unknown(const std::vector<TensorSpec>& specs, const TensorMap& inputs) {
  for (const auto& entry : inputs) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda (make fuzz).
    const std::string& key = entry.first;
    const bool known =
        std::any_of(specs.begin(), specs.end(), [&](const TensorSpec& s) { return s.key == key; });
    if (known) continue;
    throw UnknownKeyError(
        key, "unknown input key " + quoted(key) + "; expected keys: " + key_list(specs));
  }
  throw UnknownKeyError("", "unexpected inputs; expected keys: " + key_list(specs));
}

}  // namespace

std::string key_list(const std::vector<TensorSpec>& specs) {
  std::string out;
  for (const auto& spec : specs) out += (out.empty() ? "" : ", ") + spec.key;
  return out;
}

std::vector<at::Tensor> pick_keyed(const std::vector<TensorSpec>& specs, const TensorMap& inputs) {
  std::vector<at::Tensor> ordered;
  ordered.reserve(specs.size());
  for (const auto& spec : specs) {
    auto it = inputs.find(spec.key);
    if (it == inputs.end()) throw_missing(specs, inputs);
    ordered.push_back(it->second);
  }
  // Every listed key is present, so any surplus entry is a key the list lacks.
  if (inputs.size() != specs.size()) throw_unknown(specs, inputs);
  return ordered;
}

// Policy runs check_host, which refuses every other device, before any input is validated.
InputValidator::InputValidator(const Manifest& manifest, c10::Device device)
    : manifest_(manifest), device_(device) {}

void InputValidator::check_positional(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != manifest_.inputs.size()) {
    throw ShapeError("", "expected " + std::to_string(manifest_.inputs.size()) + " inputs (" +
                             key_list(manifest_.inputs) + "), got " +
                             std::to_string(inputs.size()));
  }
  check_tensors(inputs);
}

std::vector<at::Tensor> InputValidator::order_keyed(const TensorMap& inputs) const {
  std::vector<at::Tensor> ordered = pick_keyed(manifest_.inputs, inputs);
  check_tensors(ordered);
  return ordered;
}

void InputValidator::check_tensors(const std::vector<at::Tensor>& inputs) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = manifest_.inputs[i];
    check_tensor(spec, inputs[i]);
    const int64_t batch = inputs[i].size(0);
    if (i == 0) {
      if (!manifest_.batch.contains(batch)) throw_batch_range(spec, batch, manifest_);
    } else if (batch != inputs[0].size(0)) {
      throw_batch_differs(spec, batch, manifest_.inputs[0], inputs[0].size(0));
    }
    // Checked last: a wrong shape or batch is the likelier mistake and says more.
    if (!inputs[i].is_contiguous()) {
      throw LayoutError(spec.key, "input " + quoted(spec.key) + " is not contiguous (shape " +
                                      sizes_text(inputs[i]) + ", strides " +
                                      format_shape(inputs[i].strides().vec()) +
                                      "); AOTInductor assumes contiguous inputs: pass "
                                      "tensor.contiguous()");
    }
    // A lazy negation (torch._neg_view, the imaginary part of a conjugate view) is a flag the
    // generated kernels never read: they would compute with the un-negated memory.
    if (inputs[i].is_neg()) {
      throw LayoutError(spec.key, "input " + quoted(spec.key) +
                                      " is a lazily negated view (its negative bit is set); the "
                                      "compiled model reads the raw memory: pass "
                                      "tensor.resolve_neg()");
    }
  }
}

void check_plain(const TensorSpec& spec, const at::Tensor& tensor) {
  const std::string& key = spec.key;
  if (!tensor.defined()) {
    throw InputError(key, "input " + quoted(key) + " is an undefined tensor");
  }
  // First, and by flag only: asking such a tensor for its device or sizes may call into Python.
  const c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  if (impl->is_python_dispatch() || impl->has_symbolic_sizes_strides()) {
    throw LayoutError(key, "input " + quoted(key) +
                               " is a tensor subclass with its own __torch_dispatch__ (a jagged "
                               "nested, fake or distributed tensor, for example); the compiled "
                               "model reads plain memory: pass a plain dense tensor");
  }
  if (tensor.is_nested()) {
    throw LayoutError(key, "input " + quoted(key) +
                               " is a nested tensor; the compiled model takes dense tensors of "
                               "one shape: pass a plain dense tensor");
  }
  if (tensor.layout() != c10::kStrided) {
    std::ostringstream layout;
    layout << tensor.layout();
    throw LayoutError(key, "input " + quoted(key) + " has layout " + layout.str() +
                               "; the compiled model reads strided dense tensors: pass "
                               "tensor.to_dense()");
  }
  if (!tensor.has_storage()) {
    throw LayoutError(key, "input " + quoted(key) +
                               " has no storage of its own (a wrapper or batched tensor); the "
                               "compiled model reads plain memory: pass a plain dense tensor");
  }
}

void InputValidator::check_tensor(const TensorSpec& spec, const at::Tensor& tensor) const {
  const std::string& key = spec.key;
  check_plain(spec, tensor);
  if (tensor.device().type() != device_.type()) {
    throw DeviceError(key, "input " + quoted(key) + " is on device " + tensor.device().str() +
                               ", but the package was built for device " + manifest_.device);
  }
  if (device_.has_index() && tensor.device().index() != device_.index()) {
    throw DeviceError(key, "input " + quoted(key) + " is on device " + tensor.device().str() +
                               ", but the policy was loaded on " + device_.str());
  }
  if (tensor.scalar_type() != to_scalar_type(spec.dtype)) {
    throw DtypeError(key, "input " + quoted(key) + " has dtype " +
                              dtype_name(tensor.scalar_type()) + ", expected " +
                              dtype_name(spec.dtype));
  }
  if (!shape_matches(spec, tensor)) {
    throw ShapeError(key, "input " + quoted(key) + " has shape " + sizes_text(tensor) +
                              ", expected " + format_batched_shape(spec.shape));
  }
}

}  // namespace tdaot::detail
