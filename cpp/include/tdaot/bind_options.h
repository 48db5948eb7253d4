// tdaot::BindOptions: how a Policy binds inputs and outputs for one batch size, the same struct
// for the full runtime (tdaot::Policy::bind, tdaot/binding.h) and the lite one
// (tdaot::lite::Policy::bind, tdaot/lite.h). Torch-free.
#pragma once

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
};

}  // namespace tdaot
