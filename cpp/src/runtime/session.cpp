// tdaot::Session: the state slots of a recurrent policy's inputs, filled between steps, and the
// safety envelope (envelope.h) around every step.
#include "tdaot/torch/session.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/run/busy_guard.h"
#include "core/run/carry.h"
#include "runtime/carry_buffers.h"
#include "runtime/envelope.h"
#include "runtime/policy_impl.h"

namespace tdaot {
namespace {

std::string in_quotes(const std::string& key) { return "'" + key + "'"; }

constexpr const char* kConcurrentUse =
    "tdaot::Session used from two threads at once: a session is single-threaded; give each "
    "thread its own session (they may share one Policy)";

// `batch`, once the package's batch range is known to hold it (buffers are sized by it).
int64_t checked_batch(const Manifest& manifest, const std::string& path, int64_t batch) {
  detail::check_batch_in_range(manifest, path, batch, "a session");
  return batch;
}

}  // namespace

struct Session::Impl {
  Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows, const SupervisorOptions& supervisor);

  // The entries of a keyed step that the session itself would otherwise fill in: a state
  // input replaces the carried state, the is_init entry marks rows as new.
  struct Carried {
    std::vector<std::pair<size_t, at::Tensor>> state;  // (slot, the caller's state)
    at::Tensor is_init;                                 // undefined when not given
  };
  // Splits `inputs` into the carried entries and the rest (the step's own inputs).
  TensorMap split(const TensorMap& inputs, Carried& carried) const;
  // Puts the caller's tensors into their slots, runs, carries the state; clears the slots.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& given, const Carried* carried);
  // Validates the carried entries (with the other inputs in their slots), then applies them.
  void apply(const Carried& carried);
  // bool [batch]: the rows the caller's is_init marks as new; checked against its spec.
  at::Tensor new_rows(const at::Tensor& is_init) const;

  std::shared_ptr<const Policy::Impl> policy;
  const Manifest& manifest;
  int64_t batch;
  // The model's inputs in manifest order. State and is_init slots hold the session's tensors;
  // the other slots hold the caller's tensors only during a step.
  std::vector<at::Tensor> slots;
  std::vector<TensorSpec> given_specs;  // the inputs step() takes, in manifest order
  std::vector<size_t> given_slots;      // their slot indices
  detail::Carry carry;                  // the state and is_init slots, and when they are written
  std::string is_init_key;  // the manifest's is_init input, else torchrl's "is_init"
  detail::Envelope envelope;
  std::atomic<bool> busy{false};
};

Session::Impl::Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows,
                    const SupervisorOptions& supervisor)
    : policy(std::move(policy_impl)),
      manifest(policy->manifest),
      batch(checked_batch(manifest, policy->path, rows)),
      carry(manifest),
      envelope(manifest, batch, /*envelope=*/true,
               detail::chosen_supervisor(manifest, policy->path, supervisor)) {
  slots.resize(manifest.inputs.size());
  // A package without recurrent state is stepped for the safety envelope alone.
  const auto options = at::TensorOptions().device(policy->device);
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    const TensorSpec& spec = manifest.inputs[i];
    if (carry.carried(i)) {
      slots[i] = at::zeros(detail::batched_shape(batch, spec.shape),
                           options.dtype(to_scalar_type(spec.dtype)));
    } else {
      given_specs.push_back(spec);
      given_slots.push_back(i);
    }
  }
  detail::TensorBuffers buffers(slots);
  carry.reset(buffers);  // every row starts new
  // Without recurrent state there is nothing for an is_init entry to reset: no key is special.
  if (manifest.recurrent) {
    is_init_key = manifest.recurrent->is_init.empty() ? "is_init" : manifest.recurrent->is_init;
  }
}

TensorMap Session::Impl::split(const TensorMap& inputs, Carried& carried) const {
  TensorMap rest;
  for (const auto& [key, tensor] : inputs) {
    if (key == is_init_key) {
      carried.is_init = tensor;
      continue;
    }
    const auto& pairs = carry.state();
    const auto state = std::find_if(pairs.begin(), pairs.end(), [&, &key = key](const detail::Carry::Pair& pair) {
      return manifest.inputs[pair.input].key == key;
    });
    if (state != pairs.end()) {
      carried.state.emplace_back(state->input, tensor);
    } else {
      rest.emplace(key, tensor);
    }
  }
  return rest;
}

at::Tensor Session::Impl::new_rows(const at::Tensor& is_init) const {
  // With an is_init input the validator has checked it against its spec; without one (a
  // package whose model does not read it) the flag must be one bool per row.
  if (!carry.is_init()) {
    const TensorSpec spec{is_init_key, DType::Bool, {}};
    detail::check_plain(spec, is_init);
    const bool one_per_row =
        is_init.dim() >= 1 && is_init.size(0) == batch && is_init.numel() == batch;
    if (is_init.scalar_type() != at::kBool || !one_per_row) {
      throw InputError(is_init_key, "input " + in_quotes(is_init_key) + " has dtype " +
                                        dtype_name(is_init.scalar_type()) + " and shape " +
                                        format_shape(is_init.sizes().vec()) +
                                        ", expected bool [" + std::to_string(batch) +
                                        "] (one flag per row: true resets the row's state)");
    }
    detail::check_reset_mask(is_init.reshape({batch}), batch, policy->device, "session");
  }
  return is_init.reshape({batch, -1}).any(1);
}

void Session::Impl::apply(const Carried& carried) {
  // Checked in place of the session's tensors, so the validator's messages and batch checks
  // apply to the caller's tensors; the session's own tensors go back whatever happens.
  std::vector<std::pair<size_t, at::Tensor>> swapped = carried.state;
  if (carried.is_init.defined() && carry.is_init()) {
    swapped.emplace_back(*carry.is_init(), carried.is_init);
  }
  for (auto& [slot, tensor] : swapped) std::swap(slots[slot], tensor);
  struct Restore {
    Impl& self;
    std::vector<std::pair<size_t, at::Tensor>>& swapped;
    ~Restore() {
      for (auto& [slot, tensor] : swapped) std::swap(self.slots[slot], tensor);
    }
  } restore{*this, swapped};
  policy->validator.check_positional(slots);
  const at::Tensor rows = carried.is_init.defined() ? new_rows(carried.is_init) : at::Tensor();
  // Valid: from here on nothing throws for the caller's data.
  for (auto& [slot, tensor] : swapped) std::swap(slots[slot], tensor);
  swapped.clear();
  for (const auto& [slot, tensor] : carried.state) slots[slot].copy_(tensor);
  if (rows.defined()) {
    detail::TensorBuffers buffers(slots);
    buffers.set_rows(rows);
    carry.reset_rows(buffers);
    envelope.reset(rows);  // those rows start afresh: not rate limited
  }
}

std::vector<at::Tensor> Session::Impl::run(const std::vector<at::Tensor>& given,
                                           const Carried* carried) {
  if (given.size() != given_specs.size()) {
    throw ShapeError("", "a session step expects " + std::to_string(given_specs.size()) +
                             " inputs (" + detail::key_list(given_specs) + "), got " +
                             std::to_string(given.size()));
  }
  // The caller's tensors leave their slots whatever happens, so the session never keeps them.
  struct ClearGiven {
    Impl& self;
    ~ClearGiven() {
      for (size_t slot : self.given_slots) self.slots[slot] = at::Tensor();
    }
  } clear{*this};
  for (size_t i = 0; i < given.size(); ++i) {
    const at::Tensor& tensor = given[i];
    // Checked before the validator, whose message would blame a state input's batch size; a
    // tensor without plain sizes (nested, sparse, subclass) is refused before they are read.
    detail::check_plain(given_specs[i], tensor);
    if (tensor.dim() > 0 && tensor.size(0) != batch) {
      throw BatchSizeError(given_specs[i].key, "input " + in_quotes(given_specs[i].key) +
                                                   " has batch size " +
                                                   std::to_string(tensor.size(0)) +
                                                   ", but the session was created for batch size " +
                                                   std::to_string(batch));
    }
    slots[given_slots[i]] = tensor;
  }
  if (carried != nullptr) {
    apply(*carried);  // validates every input, the carried ones in place of the session's
  } else {
    policy->validator.check_positional(slots);
  }
  std::vector<at::Tensor> outputs = policy->execute(slots);
  // A step with a non-finite element returns the previous outputs and leaves the state as is.
  if (!envelope.guard(slots, outputs)) return outputs;
  detail::TensorBuffers buffers(slots, outputs);
  carry.after_step(buffers);
  return outputs;
}

namespace detail {

void check_reset_mask(const at::Tensor& mask, int64_t batch, c10::Device device,
                      const char* owner) {
  if (!mask.defined()) throw InputError("", "the reset mask is an undefined tensor");
  if (mask.scalar_type() != at::kBool) {
    throw DtypeError(
        "", "the reset mask has dtype " + dtype_name(mask.scalar_type()) + ", expected bool");
  }
  if (mask.dim() != 1 || mask.size(0) != batch) {
    throw ShapeError("", "the reset mask has shape " + format_shape(mask.sizes().vec()) +
                             ", expected [" + std::to_string(batch) + "] (the " + owner +
                             "'s batch)");
  }
  if (mask.device().type() != device.type() ||
      (device.has_index() && mask.device().index() != device.index())) {
    throw DeviceError("", "the reset mask is on device " + mask.device().str() + ", but the " +
                              owner + "'s state is on " + device.str());
  }
}

void fill_masked_rows(at::Tensor& tensor, const at::Tensor& mask, bool value) {
  // [batch] -> [batch, 1, ...]: masked_fill_ broadcasts the mask over each row.
  std::vector<int64_t> shape(tensor.dim(), 1);
  shape[0] = mask.size(0);
  tensor.masked_fill_(mask.view(shape), value);
}

}  // namespace detail

Session::Session(const Policy& policy, int64_t batch, const SupervisorOptions& supervisor)
    : impl_(std::make_unique<Impl>(policy.shared_core_as<Policy::Impl>(), batch, supervisor)) {}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session::Impl& Session::impl() const {
  if (!impl_) throw InvalidArgumentError("this tdaot::Session was moved from; use the Session it was moved to");
  return *impl_;
}

int64_t Session::batch() const { return impl().batch; }

const std::vector<TensorSpec>& Session::inputs() const { return impl().given_specs; }

TensorMap Session::step(const TensorMap& inputs) {
  Impl& self = impl();
  Impl::Carried carried;
  const TensorMap rest = self.split(inputs, carried);
  std::vector<at::Tensor> given = detail::pick_keyed(self.given_specs, rest);
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  const bool any_carried = !carried.state.empty() || carried.is_init.defined();
  return detail::keyed_outputs(self.manifest, self.run(given, any_carried ? &carried : nullptr));
}

std::vector<at::Tensor> Session::step_positional(const std::vector<at::Tensor>& inputs) {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  return self.run(inputs, nullptr);
}

void Session::reset() {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  self.envelope.reset();
  detail::TensorBuffers buffers(self.slots);
  self.carry.reset(buffers);
}

void Session::reset(const at::Tensor& mask) {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  detail::check_reset_mask(mask, self.batch, self.policy->device, "session");
  self.envelope.reset(mask);
  detail::TensorBuffers buffers(self.slots);
  buffers.set_rows(mask);
  self.carry.reset_rows(buffers);
}

const Interventions& Session::interventions() const { return impl().envelope.interventions(); }

bool Session::supervised() const { return impl().envelope.supervisor(0) != nullptr; }

const SupervisorState& Session::supervisor(int64_t row) const {
  const Impl& self = impl();
  return detail::supervisor_row(self.envelope.supervisor(row < 0 || row >= self.batch ? 0 : row),
                                row, self.batch, self.policy->path, "session");
}

TensorMap Session::state() const {
  const Impl& self = impl();
  TensorMap state;
  for (const auto& pair : self.carry.state()) {
    state.emplace(self.manifest.inputs[pair.input].key, self.slots[pair.input]);
  }
  return state;
}

}  // namespace tdaot
