// What both runtimes' Binding share (binding_core.h, tdaot/binding_base.h).
#include "core/run/binding_core.h"

#include <cerrno>
#include <tuple>
#include <utility>

#include "core/key_hints.h"
#include "core/manifest/contract_fields.h"
#include "core/run/busy_guard.h"
#include "core/run/policy_core.h"
#include "core/run/supervisor.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace detail {

BindingCore::BindingCore(const Manifest& manifest_, const std::string& package_path_,
                         int64_t batch_, const char* concurrent_use)
    : manifest(manifest_), package_path(package_path_), batch(batch_), concurrent_use_(concurrent_use) {}

void BindingCore::require_resettable() const {
  if (!manifest.recurrent && envelope_counts() == nullptr) {
    throw InvalidArgumentError("package '" + package_path +
                               "' is not recurrent (its manifest has no 'recurrent' section) and "
                               "the binding has no envelope and no supervisor: a binding of it has "
                               "no state to reset");
  }
}

size_t BindingCore::index_of(const std::string& key, bool output) const {
  const std::vector<TensorSpec>& specs = output ? manifest.outputs : manifest.inputs;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].key == key) return i;
  }
  // Refused: only now the keys are gathered, so a found key allocates nothing.
  std::vector<std::string> keys;
  for (const TensorSpec& spec : specs) keys.push_back(spec.key);
  const std::string kind = output ? "output" : "input";
  std::string listed;
  for (const std::string& k : keys) listed += (listed.empty() ? "'" : ", '") + k + "'";
  const std::string nearest = closest_key(key, keys);
  throw UnknownKeyError(key, "unknown " + kind + " key '" + key + "'" +
                                 (nearest.empty() ? "" : " (did you mean '" + nearest + "'?)") +
                                 "; the binding's " + kind + "s: " + listed);
}

void BindingCore::start_recording(const BindOptions& options, const PolicyCore& policy,
                                  const char* runtime, const Supervisor* supervisor,
                                  std::vector<RecordedBuffer> inputs,
                                  std::vector<RecordedBuffer> outputs) {
  if (options.record < 0) {
    throw InvalidArgumentError("BindOptions::record is " + std::to_string(options.record) +
                               ": the number of steps the flight recorder keeps, 0 for none");
  }
  if (options.record == 0) return;
  FlightInfo info;
  info.package_path = package_path;
  info.sha256 = policy.sha256;
  info.manifest_json = policy.manifest_json;
  info.runtime = runtime;
  info.model = model_name();
  info.batch = batch;
  info.capacity = options.record;
  info.envelope = options.envelope;
  info.supervised = supervisor != nullptr;
  if (supervisor != nullptr) info.supervisor_json = supervisor_to_json(*supervisor).dump();
  std::tie(info.weights_sha256, info.weights_generation) = policy.live_weights();
  recorder_ = std::make_unique<FlightRecorder>(std::move(info), std::move(inputs), std::move(outputs));
  recorded_policy_ = &policy;
}

const FlightRecorder& BindingCore::require_recorder() const {
  if (!recorder_) {
    throw InvalidArgumentError("this binding of package '" + package_path +
                               "' does not record: bind it with BindOptions::record = N (Python: "
                               "bind(batch, record=N)) to keep its last N steps");
  }
  return *recorder_;
}

void BindingCore::run() {
  BusyGuard guard(busy, concurrent_use_);
  if (recorder_) return recorded_step();
  step();
}

void BindingCore::recorded_step() {
  FlightRecorder& recorder = *recorder_;
  const Interventions before = interventions();  // a copy: the flags compare the counts
  const int64_t start = recorder.now_ns();
  const bool in_place = buffers_in_place();  // else the step throws, recorded without buffers
  // The weights are those of generation version / 2 when no change was being made live while
  // the step ran: the version even and the same after it.
  const uint64_t weights = recorded_policy_->weights_version();
  recorder.begin(start, weights / 2, in_place);
  // Closes the slot: the flags from the counts' change, each row's supervisor state.
  const auto finish = [&](uint32_t flags) noexcept {
    const int64_t duration = recorder.now_ns() - start;
    const Interventions& after = interventions();
    if (after.nonfinite > before.nonfinite) flags |= FlightRecorder::kNonfinite;
    if (after.rate_limited > before.rate_limited) flags |= FlightRecorder::kRateLimited;
    if (weights % 2 != 0 || recorded_policy_->weights_version() != weights) {
      flags |= FlightRecorder::kWeightsChanging;
    }
    for (int64_t row = 0; row < batch; ++row) {
      if (const SupervisorState* state = supervisor_state(row)) recorder.supervisor(row, *state);
    }
    recorder.end(duration, flags, after, in_place);
  };
  try {
    step();
  } catch (...) {
    finish(FlightRecorder::kThrew);  // the step that failed is in the log too
    throw;
  }
  finish(0);
}

void BindingCore::reset() {
  require_resettable();
  BusyGuard guard(busy, concurrent_use_);
  reset_rows(nullptr);
  if (recorder_) recorder_->mark_reset(nullptr);
}

void BindingCore::reset(const std::vector<bool>& rows) {
  require_resettable();
  BusyGuard guard(busy, concurrent_use_);
  if (static_cast<int64_t>(rows.size()) != batch) {
    throw ShapeError("", "the reset mask has " + std::to_string(rows.size()) +
                             " values, but the binding has " + std::to_string(batch) +
                             " rows (one bool per row)");
  }
  reset_rows(&rows);
  if (recorder_) recorder_->mark_reset(&rows);
}

const Interventions& BindingCore::interventions() const {
  const Interventions* counts = envelope_counts();
  return counts != nullptr ? *counts : none_;
}

const SupervisorState& BindingCore::supervisor(int64_t row) const {
  const bool inside = row >= 0 && row < batch;
  return supervisor_row(supervisor_state(inside ? row : 0), row, batch, package_path, "binding");
}

}  // namespace detail

BindingBase::BindingBase(std::unique_ptr<detail::BindingCore> core, const char* type_name)
    : core_(std::move(core)), type_name_(type_name) {}
BindingBase::~BindingBase() = default;
BindingBase::BindingBase(BindingBase&&) noexcept = default;
BindingBase& BindingBase::operator=(BindingBase&&) noexcept = default;

detail::BindingCore& BindingBase::core() const {
  if (!core_) {
    throw InvalidArgumentError(std::string("this ") + type_name_ +
                               " was moved from; use the Binding it was moved to");
  }
  return *core_;
}

int64_t BindingBase::batch() const { return core().batch; }
const std::string& BindingBase::model() const { return core().model_name(); }
void BindingBase::run() { core().run(); }
void BindingBase::reset() { core().reset(); }
void BindingBase::reset(const std::vector<bool>& rows) { core().reset(rows); }
const Interventions& BindingBase::interventions() const { return core().interventions(); }
bool BindingBase::supervised() const { return core().supervisor_state(0) != nullptr; }
const SupervisorState& BindingBase::supervisor(int64_t row) const { return core().supervisor(row); }

int64_t BindingBase::recording() const {
  const detail::FlightRecorder* recorder = core().recorder();
  return recorder != nullptr ? recorder->capacity() : 0;
}
void BindingBase::dump(const std::string& path) const { core().require_recorder().dump(path); }
std::string BindingBase::snapshot() const { return core().require_recorder().snapshot(); }
int BindingBase::dump_fd(int fd) const noexcept {
  const detail::FlightRecorder* recorder = core_ ? core_->recorder() : nullptr;
  return recorder != nullptr ? recorder->dump_fd(fd) : EINVAL;
}

}  // namespace tdaot
