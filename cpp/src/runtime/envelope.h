// Internal: the safety envelope of a tdaot::Session. After each step it checks that every
// floating input and output element is finite (else the step's outputs are replaced by the
// previous step's and the step does not count: the caller keeps its state), and moves each
// output with a contract max_delta at most that far per element from the previous step's
// output. Row by row, the first step after creation or a reset is not rate limited.
//
// On CPU packages (contiguous tensors) the guard reads and writes the tensors' memory directly
// and allocates nothing; elsewhere it goes through tensor operations.
#pragma once

#include <ATen/Tensor.h>

#include <cstdint>
#include <vector>

#include "tdaot/manifest.h"
#include "tdaot/session.h"

namespace tdaot::detail {

class Envelope {
 public:
  Envelope(const Manifest& manifest, int64_t batch);

  // Guards one step that ran on `inputs` and gave `outputs` (both in manifest order). Returns
  // true when the step stands; false when it had a non-finite element, in which case `outputs`
  // now hold the previous step's outputs and the caller must not carry its state.
  bool guard(const std::vector<at::Tensor>& inputs, std::vector<at::Tensor>& outputs);
  // Forgets the previous outputs of every row (they read as each output's rest value again).
  void reset();
  // The same for the rows where the checked bool [batch] `mask` is true.
  void reset(const at::Tensor& mask);

  const Interventions& interventions() const noexcept { return counts_; }

 private:
  struct Output {
    at::Tensor previous;            // CPU, contiguous, [batch, *shape]: what the last step gave
    std::vector<double> rest;       // per element of a row: before the first step
    std::vector<double> max_delta;  // per element of a row; empty: not rate limited
  };

  void forget_row(int64_t row);
  // Clamps `work` (CPU contiguous) to previous +- max_delta on rows not fresh; true if any moved.
  bool limit(const Output& output, at::Tensor& work) const;

  int64_t batch_;
  std::vector<Output> outputs_;
  std::vector<uint8_t> fresh_;  // per row: no step since creation or reset (not rate limited)
  Interventions counts_;
};

}  // namespace tdaot::detail
