// Internal: the supervisor of a package's joint targets over raw contiguous CPU buffers, the one
// implementation of tdaot::Supervisor's rules (tdaot/contract.h) for both runtimes: the lite
// binding calls it directly; the full runtime's Session and Binding through runtime/envelope.h
// (which stages CUDA tensors through host memory). Per row of the batch: a soft start after
// construction or a reset, the limits, the out-of-domain checks and the fallback. Allocates
// nothing after construction.
//
// A run is supervised in two calls around the envelope's guard (buffer_envelope.h):
//   observe(): before it, which rows had a non-finite input or output element (the envelope
//              replaces such outputs, so the supervisor looks first);
//   apply():   after it, every row's joint targets rewritten in the output buffer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/envelope.h"
#include "tdaot/manifest.h"
#include "tdaot/supervisor.h"

namespace tdaot::detail {

// The supervisor a bind or session runs: none when `options` leave it out or the package's contract
// has none and none is given; `options.config` checked against the contract (ContractError
// naming the field; also when the package at `path` has no contract).
std::optional<Supervisor> chosen_supervisor(const Manifest& manifest, const std::string& path,
                                            const SupervisorOptions& options);

// `state` (a row's, null without a supervisor) when `row` is in [0, batch); else throws
// InvalidArgumentError naming the row, the batch and the package at `path` (`owner`: "session").
const SupervisorState& supervisor_row(const SupervisorState* state, int64_t row, int64_t batch,
                                      const std::string& path, const char* owner);

class TargetSupervisor {
 public:
  // `config` was checked against the manifest's contract (Contract::check_supervisor or the
  // parser); the contract must be present.
  TargetSupervisor(const Manifest& manifest, const Supervisor& config, int64_t batch);

  void observe(const std::vector<const void*>& inputs, const std::vector<void*>& outputs);
  // `limited_rows`: per row, whether the envelope rate limited it this run (null: none).
  void apply(const std::vector<const void*>& inputs, const std::vector<void*>& outputs,
             const std::vector<uint8_t>* limited_rows);
  void reset();
  void reset(const std::vector<bool>& mask);

  // Row `row`'s state (checked by the caller: 0 <= row < batch).
  const SupervisorState& state(int64_t row) const { return states_[static_cast<size_t>(row)]; }
  int64_t batch() const noexcept { return batch_; }
  // Adds the supervisor's counts (blended, clipped, fallback) to `counts`.
  void add_counts(Interventions& counts) const noexcept;

 private:
  // A term's newest step in an input buffer: input index, first element, elements per row.
  struct Slot {
    size_t input = 0;
    int64_t first = 0;
    int64_t row = 0;
    DType dtype = DType::Float32;
    bool present = false;
  };
  void forget_row(int64_t row);
  double measured(const std::vector<const void*>& inputs, const Slot& slot, int64_t row,
                  int64_t j) const;
  bool out_of_domain(const std::vector<const void*>& inputs, int64_t row, bool limited);
  double clip(int64_t j, double value) const;

  int64_t batch_;
  int64_t joints_;
  size_t output_;     // index of the joint output in the manifest's outputs
  DType output_dtype_;
  std::vector<DType> input_dtypes_;
  std::vector<int64_t> input_row_;   // elements per row of each input
  std::vector<int64_t> output_row_;  // elements per row of each output
  Slot positions_, velocities_, gravity_;
  std::vector<double> offset_;       // the joint signal's offset (q = joint_pos_rel + offset)
  std::vector<double> rest_;         // the signal's rest value, clipped to the limits
  std::vector<double> low_, high_;   // the limits with the margin (-inf/inf when absent)
  std::vector<double> blend_step_;   // most a target moves per step in a soft start (inf: no cap)
  std::vector<double> max_velocity_; // inf when unchecked
  std::vector<double> max_error_;    // max_torque / stiffness, rad (inf: no cap)
  int64_t blend_steps_;              // 0: no soft start
  double start_gain_;
  double max_tilt_;
  int64_t max_limited_;
  bool damp_;
  // Per row: state, run-time values ([batch, joints]).
  std::vector<SupervisorState> states_;
  std::vector<uint8_t> nonfinite_;
  std::vector<int64_t> limited_run_;
  std::vector<double> start_, last_, safe_;
  Interventions counts_;
};

}  // namespace tdaot::detail
