// tdaot::BindOptions: how a Policy binds inputs and outputs for one batch size, the same struct
// for the full runtime (tdaot::Policy::bind, tdaot/binding.h) and the lite one
// (tdaot::lite::Policy::bind, tdaot/lite.h). Torch-free.
#pragma once

#include <cstdint>

#include "tdaot/supervisor.h"

namespace tdaot {

struct BindOptions {
  // The safety envelope, allocation-free: when an input or output element of a run is not
  // finite, the outputs are the previous run's (before the first run: each output's contract
  // rest value, 0 without one) and the recurrent state is not carried; outputs with a contract
  // max_delta move at most that far per element per run (not on a row's first run after bind
  // or reset). Binding::interventions() counts both. The rules are tdaot::Session's.
  bool envelope = false;
  // Capture the bound run as a CUDA graph when bound and replay it on every run() (see
  // tdaot/binding.h). CUDA packages on the full runtime only: bind throws InvalidArgumentError
  // for a CPU package and on the lite runtime.
  bool cuda_graph = false;
  // The supervisor of the joint targets (tdaot/supervisor.h): by default the contract's, when it
  // has one; `enabled = false` leaves it out, `config` replaces it. Allocation-free per run; its
  // per-row state is BindingBase::supervisor(row). A package without a contract has none (a
  // `config` for it throws ContractError).
  SupervisorOptions supervisor{};
  // The flight recorder (docs/flight-recorder.md): keep the last `record` steps (0: none) in a
  // ring allocated when bound, every input and output, the start time and duration, the resets,
  // the interventions and each row's supervisor state; recording allocates nothing and takes no
  // lock per run. BindingBase::dump writes them to a flight log. A negative value throws
  // InvalidArgumentError; so does a CUDA package on the full runtime (CPU bindings only).
  int64_t record = 0;
};

}  // namespace tdaot
