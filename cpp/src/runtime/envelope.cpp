// The full runtime's safety envelope: tensor memory handed to the core's BufferEnvelope
// (envelope.h).
#include "runtime/envelope.h"

#include <ATen/Functions.h>

namespace tdaot::detail {
namespace {

bool direct(const at::Tensor& tensor) { return tensor.is_cpu() && tensor.is_contiguous(); }

// `tensor`'s memory when the core can read it in place, else a host copy kept in `staged`.
at::Tensor host_view(const at::Tensor& tensor, at::Tensor& staged) {
  if (direct(tensor)) return tensor;
  staged = tensor.to(at::kCPU).contiguous();
  return staged;
}

}  // namespace

Envelope::Envelope(const Manifest& manifest, int64_t batch, bool envelope,
                   const std::optional<Supervisor>& supervisor)
    : batch_(batch),
      input_data_(manifest.inputs.size()),
      output_data_(manifest.outputs.size()),
      rows_(static_cast<size_t>(batch)),
      staged_inputs_(manifest.inputs.size()),
      staged_outputs_(manifest.outputs.size()) {
  if (envelope) core_.emplace(manifest, batch);
  if (supervisor) supervisor_.emplace(manifest, *supervisor, batch);
}

const Interventions& Envelope::interventions() const noexcept {
  counts_ = core_ ? core_->interventions() : Interventions{};
  if (supervisor_) supervisor_->add_counts(counts_);
  return counts_;
}

bool Envelope::guard(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_data_[i] = host_view(inputs[i], staged_inputs_[i]).const_data_ptr();
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    output_data_[i] = host_view(outputs[i], staged_outputs_[i]).mutable_data_ptr();
  }
  if (supervisor_) supervisor_->observe(input_data_, output_data_);
  const bool stands = core_ ? core_->guard(input_data_, output_data_) : true;
  if (supervisor_) supervisor_->apply(input_data_, output_data_, core_ ? &core_->limited_rows() : nullptr);
  // The core or the supervisor may have rewritten any output (held, or rate limited): copy the staged ones back.
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (staged_outputs_[i].defined()) {
      outputs[i].copy_(staged_outputs_[i]);
      staged_outputs_[i].reset();
    }
  }
  for (at::Tensor& staged : staged_inputs_) staged.reset();
  return stands;
}

void Envelope::reset() {
  if (core_) core_->reset();
  if (supervisor_) supervisor_->reset();
}

void Envelope::reset(const at::Tensor& mask) {
  const at::Tensor rows = mask.to(at::kCPU).contiguous();
  const bool* selected = rows.const_data_ptr<bool>();
  for (int64_t row = 0; row < batch_; ++row) rows_[static_cast<size_t>(row)] = selected[row];
  reset(rows_);
}

void Envelope::reset(const std::vector<bool>& mask) {
  if (core_) core_->reset(mask);
  if (supervisor_) supervisor_->reset(mask);
}

}  // namespace tdaot::detail
