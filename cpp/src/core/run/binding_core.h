// Internal: the state and the stepping rules both runtimes' Binding share
// (tdaot/binding_base.h): one thread at a time (BusyGuard), what a reset needs, the reset mask's
// size, the envelope's counts. Each runtime's Binding::Impl derives from it and supplies the
// buffer-specific steps. Torch-free.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/run/flight_recorder.h"
#include "tdaot/bind_options.h"
#include "tdaot/binding_base.h"
#include "tdaot/envelope.h"
#include "tdaot/manifest.h"
#include "tdaot/supervisor.h"

namespace tdaot::detail {

class PolicyCore;

class BindingCore {
 public:
  virtual ~BindingCore() = default;
  BindingCore(const BindingCore&) = delete;
  BindingCore& operator=(const BindingCore&) = delete;

  // BindingBase's calls: each holds the busy guard while it runs.
  void run();
  void reset();
  void reset(const std::vector<bool>& rows);
  const Interventions& interventions() const;
  const SupervisorState& supervisor(int64_t row) const;
  virtual const std::string& model_name() const = 0;
  // Row `row`'s supervisor state (0 <= row < batch); null without a supervisor.
  virtual const SupervisorState* supervisor_state(int64_t row) const = 0;

  // The position of `key` in the manifest's inputs (`output` false) or outputs; throws
  // UnknownKeyError naming the key, the nearest listed one and the list. One rule for both
  // runtimes' input(key) / output(key).
  size_t index_of(const std::string& key, bool output) const;

  // The flight recorder (BindOptions::record); null when the binding does not record.
  const FlightRecorder* recorder() const noexcept { return recorder_.get(); }
  // The recorder, or InvalidArgumentError saying how to bind one (for dump and snapshot).
  const FlightRecorder& require_recorder() const;

  const Manifest& manifest;
  const std::string& package_path;
  const int64_t batch;
  std::atomic<bool> busy{false};

 protected:
  // `concurrent_use`: the message for a second thread using the binding (a string literal).
  BindingCore(const Manifest& manifest, const std::string& package_path, int64_t batch,
              const char* concurrent_use);
  // Throws InvalidArgumentError unless a reset has something to forget: a recurrent package's
  // state, or the envelope's previous outputs (as Session::reset).
  void require_resettable() const;
  const char* concurrent_use() const noexcept { return concurrent_use_; }
  // The end of a runtime's bind: with options.record > 0, the ring over the bound buffers' host
  // memory (each stays in place for the binding's life). `runtime`: "lite" or "full";
  // `supervisor`: the one the binding runs (null: none). `policy` outlives the binding (it holds
  // it). Throws InvalidArgumentError for a negative record.
  void start_recording(const BindOptions& options, const PolicyCore& policy, const char* runtime,
                       const Supervisor* supervisor, std::vector<RecordedBuffer> inputs,
                       std::vector<RecordedBuffer> outputs);

  // The runtime's steps, called under the busy guard. step: the model on the bound inputs, the
  // outputs written, the envelope's guard and the supervisor, the carry. reset_rows: the carry's
  // reset of `rows` (null: every row), the envelope's and the supervisor's. envelope_counts:
  // null without the envelope and the supervisor.
  virtual void step() = 0;
  virtual void reset_rows(const std::vector<bool>* rows) = 0;
  virtual const Interventions* envelope_counts() const = 0;
  // Whether every buffer still has the memory it was bound with, which the recorder reads (the
  // full runtime's tensors can be resized or re-pointed; step() then refuses to run).
  virtual bool buffers_in_place() const noexcept { return true; }

 private:
  // run() with the recorder: the step timed and recorded, also when it throws.
  void recorded_step();

  const char* concurrent_use_;
  std::unique_ptr<FlightRecorder> recorder_;
  const PolicyCore* recorded_policy_ = nullptr;  // whose weights version the recorder reads
  Interventions none_;
};

}  // namespace tdaot::detail
