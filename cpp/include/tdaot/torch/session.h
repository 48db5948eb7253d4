// tdaot::Session: steps a policy inside a safety envelope, carrying a recurrent policy's state
// between steps.
//
// A recurrent package's manifest pairs outputs with inputs (torchrl's convention: output
// "next.hidden" feeds input "hidden" at the next step) and may name a bool "is_init" input.
// A session owns one state tensor [batch, *shape] per pair, zero at creation, and fills in
// the state inputs and is_init itself, so step() needs only the other inputs. is_init is true
// for the rows reset since the previous step (all rows on the first step) and false otherwise.
//
// A keyed step() may also carry those entries, as a torchrl rollout does (InitTracker puts
// is_init in every step); the session never ignores them:
// - a state input replaces the session's state for every row (then carried on as usual);
// - is_init (the manifest's is_init key, else "is_init"; bool, one flag per row when the
//   model does not read it) marks its true rows as new, exactly like reset(mask) before the
//   step: their state is zeroed and the model sees is_init true for them, together with the
//   rows reset() marked. Both are validated like every input; a refused step changes nothing.
// step_positional() takes only inputs(); use reset(mask) there.
//
// The safety envelope (every package, recurrent or not): when any floating input or output
// element of a step is NaN or infinite, the step returns the previous step's outputs instead
// (before the first step: each output's contract offset clipped to [low, high], 0 for outputs
// without a contract signal), does not update the state and counts a `nonfinite` intervention.
// An output whose contract signal has max_delta moves at most that far per element from the
// previous step's output (counted as `rate_limited`); the first step after creation or a
// reset() of a row is not rate limited. reset() forgets the previous outputs. Counts are steps.
//
// Steady state allocates nothing of the session's own: the state tensors and the previous
// outputs are preallocated, each step copies the state outputs into them, and on CPU the
// envelope reads and writes tensor memory directly.
//
// Thread-safety: a session is a single-threaded object (one per control loop or environment
// batch). Calling step() or reset() while another call on the same session is running throws
// tdaot::Error instead of corrupting the state. Several sessions may share one Policy and run
// concurrently; the session keeps the loaded model alive even if the Policy is destroyed.
#pragma once

#include <ATen/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"
#include "tdaot/torch/policy.h"

namespace tdaot {

class Session {
 public:
  // A session over `policy` for `batch` rows. Throws BatchSizeError when `batch` is outside
  // the package's batch range.
  // `supervisor`: the supervisor of the joint targets (tdaot/supervisor.h; by default the
  // contract's); a replacement is checked against the contract (ContractError naming the field).
  Session(const Policy& policy, int64_t batch, const SupervisorOptions& supervisor = {});
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // The number of rows.
  int64_t batch() const;
  // The inputs step() takes (every manifest input but the state and is_init), in the order
  // step_positional() takes them.
  const std::vector<TensorSpec>& inputs() const;

  // Runs one step with the non-state inputs keyed by manifest key (and optionally the state
  // and is_init, see above); returns every output keyed by manifest key (the state outputs
  // included) and keeps the state for the next step.
  TensorMap step(const TensorMap& inputs);
  // The same with the non-state inputs in inputs() order; outputs in manifest order.
  std::vector<at::Tensor> step_positional(const std::vector<at::Tensor>& inputs);

  // Zeroes the state of every row, marks every row as is_init for the next step and forgets
  // the previous outputs (the next step is not rate limited).
  void reset();
  // The same for the rows where `mask` (bool [batch], on the policy's device) is true.
  void reset(const at::Tensor& mask);

  // The state the next step will see, keyed by state input key. The tensors are the session's
  // own storage: reading is fine, writing changes what the next step sees.
  TensorMap state() const;

  // The safety envelope's and the supervisor's interventions so far (reset() does not clear
  // them).
  const Interventions& interventions() const;

  // Whether a supervisor guards the joint targets (tdaot/supervisor.h).
  bool supervised() const;
  // Row `row`'s supervisor state after the last step; allocation-free. Throws
  // InvalidArgumentError without a supervisor or for a row outside [0, batch).
  const SupervisorState& supervisor(int64_t row = 0) const;

 private:
  struct Impl;
  Impl& impl() const;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tdaot
