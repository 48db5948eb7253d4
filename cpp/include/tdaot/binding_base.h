// tdaot::BindingBase: what a bound run is, whichever runtime bound it. tdaot::Binding (the full
// runtime, tdaot/torch/binding.h: at::Tensor buffers) and tdaot::lite::Binding (tdaot/lite.h:
// raw buffers) both derive from it, so the stepping calls are one API, written once. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"

namespace tdaot {

namespace detail {
class BindingCore;  // the shared state behind both runtimes' Binding (src/core/run/binding_core.h)
}  // namespace detail

class BindingBase {
 public:
  // The number of rows.
  int64_t batch() const;
  // The name of the package's model that serves this batch size.
  const std::string& model() const;

  // Runs the model on the inputs and writes the outputs in place (for a recurrent package also
  // the next state, and clears is_init); with BindOptions::envelope, guarded (a non-finite run
  // leaves the previous outputs and the state in place). Throws ExecutionError when the model
  // fails, InvalidArgumentError when another thread is using this binding or (full runtime) a
  // tensor no longer has the memory it was bound with.
  void run();

  // Recurrent packages: zeroes the state of every row and marks it is_init for the next run;
  // with the envelope, its previous outputs are forgotten too (the next run is not rate
  // limited); with a supervisor, the rows start afresh (a soft start, out of any fallback).
  // Throws InvalidArgumentError when there is nothing to reset: a package that is not
  // recurrent, bound without the envelope and the supervisor.
  void reset();
  // The same for the rows where `rows` (one bool per row) is true; throws ShapeError when it
  // does not hold batch() values. Allocates nothing on the lite runtime.
  void reset(const std::vector<bool>& rows);

  // The envelope's and the supervisor's interventions so far (zeros without either).
  const Interventions& interventions() const;

  // Whether a supervisor guards the joint targets (BindOptions::supervisor, tdaot/supervisor.h).
  bool supervised() const;
  // Row `row`'s supervisor state after the last run: the mode, the gain scale the service
  // applies this tick. Allocation-free. Throws InvalidArgumentError without a supervisor or for
  // a row outside [0, batch()).
  const SupervisorState& supervisor(int64_t row = 0) const;

  // The flight recorder (BindOptions::record; docs/flight-recorder.md). The steps it keeps: the
  // ring's capacity, 0 for a binding bound without it.
  int64_t recording() const;
  // Writes the last recording() steps to a flight log file (tdaot-flightlog/1: the package's
  // sha256 and manifest, the layout, the ring's slots) at `path`, created or replaced. Throws
  // tdaot::Error naming the path when it cannot be written, InvalidArgumentError when the
  // binding does not record. Safe from any thread while another runs the binding.
  void dump(const std::string& path) const;
  // The same to an open file descriptor, async-signal-safe: write(2) only, no allocation, no
  // lock, no exception (the header was rendered when bound), so a signal handler may call it.
  // Returns 0, or the errno of the write that failed; EINVAL when the binding does not record
  // (or was moved from). errno is left as it was.
  int dump_fd(int fd) const noexcept;
  // The bytes dump() would write, for a thread that reads the ring while another runs the
  // binding: every slot copied whole or marked unfinished (seq_end 0), never torn. Allocates
  // (on the caller's thread). Throws InvalidArgumentError when the binding does not record.
  std::string snapshot() const;

 protected:
  // `type_name` ("tdaot::Binding") names the class in the message for a moved-from object.
  BindingBase(std::unique_ptr<detail::BindingCore> core, const char* type_name);
  ~BindingBase();
  BindingBase(BindingBase&&) noexcept;
  BindingBase& operator=(BindingBase&&) noexcept;
  BindingBase(const BindingBase&) = delete;
  BindingBase& operator=(const BindingBase&) = delete;

  // The shared state; throws InvalidArgumentError on a moved-from object instead of crashing.
  detail::BindingCore& core() const;
  // The same as the runtime's own Impl (derived from BindingCore; instantiated where complete).
  template <typename Impl>
  Impl& core_as() const {
    return static_cast<Impl&>(core());
  }

 private:
  std::unique_ptr<detail::BindingCore> core_;
  const char* type_name_;
};

}  // namespace tdaot
