// Internal: the safety envelope of the full runtime's Session and Binding, over at::Tensor. The
// rules live once, in core/run/buffer_envelope.h (the lite runtime runs the same code): after
// each step every floating input and output element must be finite (else the outputs become
// the previous step's and the caller keeps its state), and each output with a contract
// max_delta moves at most that far per element (not on a row's first step after creation or a
// reset).
//
// This class only hands tensor memory to it: CPU contiguous tensors (every CPU package's, the
// validator refuses other layouts) by pointer, allocating nothing; anything else (CUDA) through
// host copies, the outputs written back after the guard.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "core/run/buffer_envelope.h"
#include "core/run/supervisor.h"
#include "tdaot/envelope.h"
#include "tdaot/manifest.h"

namespace tdaot::detail {

// With a supervisor (core/run/supervisor.h), it runs around the guard on the same host memory:
// observe() before, apply() after. Either part may be off (`envelope` false: the supervisor
// alone, as a Binding bound without the envelope runs it).
class Envelope {
 public:
  Envelope(const Manifest& manifest, int64_t batch, bool envelope = true,
           const std::optional<Supervisor>& supervisor = std::nullopt);

  // Guards one step that ran on `inputs` and gave `outputs` (both in manifest order). Returns
  // true when the step stands; false when it had a non-finite element, in which case `outputs`
  // now hold the previous step's outputs and the caller must not carry its state.
  bool guard(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs);
  // Forgets the previous outputs of every row (they read as each output's rest value again).
  void reset();
  // The same for the rows where the checked bool [batch] `mask` (any device) is true.
  void reset(const at::Tensor& mask);
  // The same for the rows where mask[row] is true (batch values, checked by the caller).
  void reset(const std::vector<bool>& mask);

  // The envelope's and the supervisor's counts.
  const Interventions& interventions() const noexcept;
  // The supervisor's state of `row` (checked by the caller); null without a supervisor.
  const SupervisorState* supervisor(int64_t row) const noexcept {
    return supervisor_ ? &supervisor_->state(row) : nullptr;
  }

 private:
  std::optional<BufferEnvelope> core_;
  std::optional<TargetSupervisor> supervisor_;
  mutable Interventions counts_;  // interventions(): the parts' counts, summed on read
  int64_t batch_;
  // Reused by every guard() and reset(mask): the CPU path allocates nothing.
  std::vector<const void*> input_data_;
  std::vector<void*> output_data_;
  std::vector<bool> rows_;
  // Host copies of tensors off the CPU fast path (CUDA), made by the guard that needs them.
  std::vector<at::Tensor> staged_inputs_;
  std::vector<at::Tensor> staged_outputs_;
};

}  // namespace tdaot::detail
