// tdaot::Session: the state slots of a recurrent policy's inputs, filled between steps.
#include "tdaot/session.h"

#include <ATen/Functions.h>

#include <atomic>
#include <optional>
#include <utility>

#include "busy_guard.h"
#include "envelope.h"
#include "policy_impl.h"

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
  Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows);

  // Why `key` may not be passed to step(), or nullopt when it may.
  std::optional<std::string> refusal(const std::string& key) const;
  // Puts the caller's tensors into their slots, runs, carries the state; clears the slots.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& given);

  std::shared_ptr<const Policy::Impl> policy;
  const Manifest& manifest;
  int64_t batch;
  // The model's inputs in manifest order. State and is_init slots hold the session's tensors;
  // the other slots hold the caller's tensors only during a step.
  std::vector<at::Tensor> slots;
  std::vector<TensorSpec> given_specs;  // the inputs step() takes, in manifest order
  std::vector<size_t> given_slots;      // their slot indices
  struct Carry {
    size_t slot;    // the state input
    size_t output;  // the output copied into it after each step
  };
  std::vector<Carry> carries;
  std::optional<size_t> is_init_slot;
  bool is_init_set = true;  // whether any row of is_init is true (all are at creation)
  detail::Envelope envelope;
  std::atomic<bool> busy{false};
};

Session::Impl::Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows)
    : policy(std::move(policy_impl)),
      manifest(policy->manifest),
      batch(checked_batch(manifest, policy->path, rows)),
      envelope(manifest, batch) {
  slots.resize(manifest.inputs.size());
  // A package without recurrent state is stepped for the safety envelope alone.
  const Recurrent recurrent = manifest.recurrent.value_or(Recurrent{});
  const auto options = at::TensorOptions().device(policy->device);
  for (const StatePair& pair : recurrent.state) {
    // Manifest::from_json guarantees both keys exist with matching dtype and shape.
    const size_t slot = *manifest.input_index(pair.input);
    const TensorSpec& spec = manifest.inputs[slot];
    slots[slot] = at::zeros(detail::batched_shape(batch, spec.shape), options.dtype(spec.dtype));
    carries.push_back({slot, *manifest.output_index(pair.output)});
  }
  if (!recurrent.is_init.empty()) {
    is_init_slot = *manifest.input_index(recurrent.is_init);
    const TensorSpec& spec = manifest.inputs[*is_init_slot];
    slots[*is_init_slot] =
        at::ones(detail::batched_shape(batch, spec.shape), options.dtype(at::kBool));
  }
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    if (slots[i].defined()) continue;
    given_specs.push_back(manifest.inputs[i]);
    given_slots.push_back(i);
  }
}

std::optional<std::string> Session::Impl::refusal(const std::string& key) const {
  if (!manifest.recurrent) return std::nullopt;
  for (const StatePair& pair : manifest.recurrent->state) {
    if (pair.input == key) {
      return "input " + in_quotes(key) +
             " is recurrent state the session carries over from output " + in_quotes(pair.output) +
             "; pass only " + detail::key_list(given_specs) + " (reset() zeroes the state)";
    }
  }
  if (key == manifest.recurrent->is_init) {
    return "input " + in_quotes(key) +
           " is set by the session (true for rows reset since the last step); pass only " +
           detail::key_list(given_specs) + " and mark new rows with reset(mask)";
  }
  return std::nullopt;
}

std::vector<at::Tensor> Session::Impl::run(const std::vector<at::Tensor>& given) {
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
  policy->validator.check_positional(slots);
  std::vector<at::Tensor> outputs = policy->execute(slots);
  // A step with a non-finite element returns the previous outputs and leaves the state as is.
  if (!envelope.guard(slots, outputs)) return outputs;
  for (const Carry& carry : carries) slots[carry.slot].copy_(outputs[carry.output]);
  if (is_init_slot && is_init_set) {
    slots[*is_init_slot].fill_(false);
    is_init_set = false;
  }
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

Session::Session(const Policy& policy, int64_t batch)
    : impl_(std::make_unique<Impl>((policy.impl(), policy.impl_), batch)) {}

Session::~Session() = default;
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session::Impl& Session::impl() const {
  if (!impl_) throw Error("this tdaot::Session was moved from; use the Session it was moved to");
  return *impl_;
}

int64_t Session::batch() const { return impl().batch; }

const std::vector<TensorSpec>& Session::inputs() const { return impl().given_specs; }

TensorMap Session::step(const TensorMap& inputs) {
  Impl& self = impl();
  for (const auto& [key, tensor] : inputs) {
    if (auto why = self.refusal(key)) throw InputError(key, *why);
  }
  std::vector<at::Tensor> given = detail::pick_keyed(self.given_specs, inputs);
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  return detail::keyed_outputs(self.manifest, self.run(given));
}

std::vector<at::Tensor> Session::step_positional(const std::vector<at::Tensor>& inputs) {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  return self.run(inputs);
}

void Session::reset() {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  self.envelope.reset();
  for (const auto& carry : self.carries) self.slots[carry.slot].zero_();
  if (self.is_init_slot) {
    self.slots[*self.is_init_slot].fill_(true);
    self.is_init_set = true;
  }
}

void Session::reset(const at::Tensor& mask) {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  detail::check_reset_mask(mask, self.batch, self.policy->device, "session");
  self.envelope.reset(mask);
  for (const auto& carry : self.carries) {
    detail::fill_masked_rows(self.slots[carry.slot], mask, false);
  }
  if (self.is_init_slot) {
    detail::fill_masked_rows(self.slots[*self.is_init_slot], mask, true);
    self.is_init_set = true;  // possibly no row was masked; clearing again is cheap
  }
}

const Interventions& Session::interventions() const { return impl().envelope.interventions(); }

TensorMap Session::state() const {
  const Impl& self = impl();
  TensorMap state;
  for (const auto& carry : self.carries) {
    state.emplace(self.manifest.inputs[carry.slot].key, self.slots[carry.slot]);
  }
  return state;
}

}  // namespace tdaot
