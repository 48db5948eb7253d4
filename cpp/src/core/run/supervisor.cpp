// The supervisor of a package's joint targets over raw CPU buffers (supervisor.h).
#include "core/run/supervisor.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/manifest/contract_internal.h"
#include "core/run/buffer_envelope.h"
#include "tdaot/errors.h"

namespace tdaot {

const char* supervisor_mode_name(SupervisorMode mode) noexcept {
  switch (mode) {
    case SupervisorMode::running: return "running";
    case SupervisorMode::blending: return "blending";
    case SupervisorMode::held: return "held";
    case SupervisorMode::damped: return "damped";
  }
  return "running";
}

namespace detail {

std::optional<Supervisor> chosen_supervisor(const Manifest& manifest, const std::string& path,
                                            const SupervisorOptions& options) {
  if (!options.enabled) return std::nullopt;
  if (!options.config) {
    return manifest.contract ? manifest.contract->supervisor : std::nullopt;
  }
  if (!manifest.contract) {
    throw ContractError("supervisor", "a supervisor was given for package '" + path +
                                          "', which has no contract: it supervises the joint "
                                          "targets a contract names (tdaot.Contract)");
  }
  manifest.contract->check_supervisor(*options.config);
  return options.config;
}

const SupervisorState& supervisor_row(const SupervisorState* state, int64_t row, int64_t batch,
                                      const std::string& path, const char* owner) {
  if (state == nullptr) {
    throw InvalidArgumentError(std::string("this ") + owner + " of package '" + path +
                               "' has no supervisor: its contract has none (tdaot.Supervisor), "
                               "or it was left out (SupervisorOptions::enabled)");
  }
  if (row < 0 || row >= batch) {
    throw InvalidArgumentError("supervisor row " + std::to_string(row) + " is outside the " +
                               owner + "'s batch of " + std::to_string(batch) + " rows");
  }
  return state[0];
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

TargetSupervisor::TargetSupervisor(const Manifest& manifest, const Supervisor& config,
                                   int64_t batch)
    : batch_(batch) {
  const Contract& contract = *manifest.contract;
  const std::string& key = *supervised_output(contract, config);
  const Signal& signal = contract.outputs.at(key);
  joints_ = static_cast<int64_t>(signal.names.size());
  output_ = *manifest.output_index(key);
  output_dtype_ = manifest.outputs[output_].dtype;
  for (const TensorSpec& spec : manifest.inputs) {
    input_dtypes_.push_back(spec.dtype);
    input_row_.push_back(numel(spec.shape));
  }
  for (const TensorSpec& spec : manifest.outputs) output_row_.push_back(numel(spec.shape));
  auto locate = [&](const std::optional<TermSlot>& term) {
    Slot slot;
    if (!term) return slot;
    slot.input = *manifest.input_index(term->input);
    slot.first = term->first;
    slot.row = input_row_[slot.input];
    slot.dtype = input_dtypes_[slot.input];
    slot.present = true;
    return slot;
  };
  positions_ = locate(find_joint_term(contract, key, "joint_pos_rel"));
  if (config.max_velocity.present()) velocities_ = locate(find_joint_term(contract, key, "joint_vel_rel"));
  if (config.max_tilt > 0) gravity_ = locate(find_term(contract, "projected_gravity"));
  const double dt = contract.control_dt;
  for (int64_t j = 0; j < joints_; ++j) {
    const auto i = static_cast<size_t>(j);
    offset_.push_back(signal.offset[i]);
    low_.push_back(config.low.present() ? config.low[i] + config.margin : -kInf);
    high_.push_back(config.high.present() ? config.high[i] - config.margin : kInf);
    blend_step_.push_back(config.blend_max_velocity.present() ? config.blend_max_velocity[i] * dt : kInf);
    max_velocity_.push_back(config.max_velocity.present() ? config.max_velocity[i] : kInf);
    max_error_.push_back(config.max_torque.present() ? config.max_torque[i] / signal.stiffness[i] : kInf);
    rest_.push_back(std::clamp(signal.rest(i), low_.back(), high_.back()));
  }
  blend_steps_ = static_cast<int64_t>(std::ceil(config.blend_seconds / dt - 1e-9));
  start_gain_ = config.start_gain_fraction;
  max_tilt_ = config.max_tilt;
  max_limited_ = config.max_rate_limited_steps;
  damp_ = config.fallback == "damp";
  const auto cells = static_cast<size_t>(batch * joints_);
  states_.resize(static_cast<size_t>(batch));
  nonfinite_.assign(static_cast<size_t>(batch), 0);
  limited_run_.assign(static_cast<size_t>(batch), 0);
  start_.assign(cells, 0.0);
  last_.assign(cells, 0.0);
  safe_.assign(cells, 0.0);
  reset();
}

void TargetSupervisor::forget_row(int64_t row) {
  SupervisorState& state = states_[static_cast<size_t>(row)];
  const bool soft = blend_steps_ > 0;
  state.mode = soft ? SupervisorMode::blending : SupervisorMode::running;
  state.blend = soft ? 0.0 : 1.0;
  state.gain_scale = soft ? start_gain_ : 1.0;
  state.damping_scale = state.gain_scale;
  state.steps = 0;
  limited_run_[static_cast<size_t>(row)] = 0;
  for (int64_t j = 0; j < joints_; ++j) {
    const auto at = static_cast<size_t>(row * joints_ + j);
    safe_[at] = last_[at] = start_[at] = rest_[static_cast<size_t>(j)];
  }
}

void TargetSupervisor::reset() {
  for (int64_t row = 0; row < batch_; ++row) forget_row(row);
}

void TargetSupervisor::reset(const std::vector<bool>& mask) {
  for (int64_t row = 0; row < batch_; ++row) {
    if (mask[static_cast<size_t>(row)]) forget_row(row);
  }
}

void TargetSupervisor::observe(const std::vector<const void*>& inputs,
                               const std::vector<void*>& outputs) {
  for (int64_t row = 0; row < batch_; ++row) {
    bool finite = true;
    for (size_t i = 0; i < inputs.size() && finite; ++i) {
      const int64_t width = input_row_[i];
      const auto* bytes = static_cast<const uint8_t*>(inputs[i]);
      finite = elements_finite(bytes + static_cast<size_t>(row * width) * element_size(input_dtypes_[i]),
                               input_dtypes_[i], width);
    }
    if (finite) {  // the targets; other outputs are the envelope's to check
      const int64_t width = output_row_[output_];
      const auto* bytes = static_cast<const uint8_t*>(outputs[output_]);
      finite = elements_finite(bytes + static_cast<size_t>(row * width) * element_size(output_dtype_),
                               output_dtype_, width);
    }
    nonfinite_[static_cast<size_t>(row)] = finite ? 0 : 1;
  }
}

double TargetSupervisor::measured(const std::vector<const void*>& inputs, const Slot& slot,
                                  int64_t row, int64_t j) const {
  return load_element(inputs[slot.input], slot.dtype, row * slot.row + slot.first + j);
}

double TargetSupervisor::clip(int64_t j, double value) const {
  return std::clamp(value, low_[static_cast<size_t>(j)], high_[static_cast<size_t>(j)]);
}

bool TargetSupervisor::out_of_domain(const std::vector<const void*>& inputs, int64_t row,
                                     bool limited) {
  if (nonfinite_[static_cast<size_t>(row)]) return true;
  if (velocities_.present) {
    for (int64_t j = 0; j < joints_; ++j) {
      // A NaN compares false: out of domain too.
      if (!(std::abs(measured(inputs, velocities_, row, j)) <= max_velocity_[static_cast<size_t>(j)])) {
        return true;
      }
    }
  }
  if (gravity_.present) {
    const double x = measured(inputs, gravity_, row, 0);
    const double y = measured(inputs, gravity_, row, 1);
    const double z = measured(inputs, gravity_, row, 2);
    const double norm = std::sqrt(x * x + y * y + z * z);
    const double tilt = norm > 0 ? std::acos(std::clamp(-z / norm, -1.0, 1.0)) : kInf;
    if (!(tilt <= max_tilt_)) return true;
  }
  if (max_limited_ > 0) {
    int64_t& run = limited_run_[static_cast<size_t>(row)];
    run = limited ? run + 1 : 0;
    if (run >= max_limited_) return true;
  }
  return false;
}

void TargetSupervisor::apply(const std::vector<const void*>& inputs,
                             const std::vector<void*>& outputs,
                             const std::vector<uint8_t>* limited_rows) {
  void* targets = outputs[output_];
  bool blended = false, clipped = false, fallback = false;
  for (int64_t row = 0; row < batch_; ++row) {
    SupervisorState& state = states_[static_cast<size_t>(row)];
    const int64_t base = row * joints_;
    const bool limited = limited_rows != nullptr && (*limited_rows)[static_cast<size_t>(row)] != 0;
    const bool active = state.mode == SupervisorMode::running || state.mode == SupervisorMode::blending;
    if (active && out_of_domain(inputs, row, limited)) {
      state.mode = damp_ ? SupervisorMode::damped : SupervisorMode::held;
    }
    ++state.steps;
    if (state.mode == SupervisorMode::held || state.mode == SupervisorMode::damped) {
      const bool damp = state.mode == SupervisorMode::damped;
      for (int64_t j = 0; j < joints_; ++j) {
        const auto at = static_cast<size_t>(base + j);
        double target = safe_[at];
        if (damp) {
          const double q = measured(inputs, positions_, row, j) + offset_[static_cast<size_t>(j)];
          if (std::isfinite(q)) {
            target = clip(j, q);
            if (target != q) clipped = true;
          }
        }
        last_[at] = target;
        store_element(targets, output_dtype_, base + j, target);
      }
      state.gain_scale = damp ? 0.0 : 1.0;
      state.damping_scale = 1.0;
      state.blend = 1.0;
      fallback = true;
      continue;
    }
    double alpha = 1.0;
    bool reached = true;
    if (state.mode == SupervisorMode::blending) {
      blended = true;
      if (state.steps == 1) {  // the first step since activation or the reset: from here
        for (int64_t j = 0; j < joints_; ++j) {
          const auto at = static_cast<size_t>(base + j);
          start_[at] = last_[at] = measured(inputs, positions_, row, j) + offset_[static_cast<size_t>(j)];
        }
      }
      alpha = std::min(1.0, static_cast<double>(state.steps) / static_cast<double>(blend_steps_));
    }
    for (int64_t j = 0; j < joints_; ++j) {
      const auto at = static_cast<size_t>(base + j);
      const double policy = load_element(targets, output_dtype_, base + j);
      double target = policy;
      if (state.mode == SupervisorMode::blending) {
        const double desired = start_[at] + alpha * (policy - start_[at]);
        const double step = blend_step_[static_cast<size_t>(j)];
        target = std::clamp(desired, last_[at] - step, last_[at] + step);
        if (target != policy) reached = false;
      }
      double bounded = target;
      const double error = max_error_[static_cast<size_t>(j)];
      if (error < kInf) {  // the spring torque kp (target - q) at most max_torque
        const double q = measured(inputs, positions_, row, j) + offset_[static_cast<size_t>(j)];
        if (std::isfinite(q)) bounded = std::clamp(bounded, q - error, q + error);
      }
      bounded = clip(j, bounded);
      if (bounded != target) clipped = true;
      safe_[at] = last_[at] = bounded;
      store_element(targets, output_dtype_, base + j, bounded);
    }
    if (state.mode == SupervisorMode::blending) {
      state.blend = alpha;
      state.gain_scale = state.damping_scale = start_gain_ + (1.0 - start_gain_) * alpha;
      if (alpha >= 1.0 && reached) state.mode = SupervisorMode::running;
    } else {
      state.blend = state.gain_scale = state.damping_scale = 1.0;
    }
  }
  if (blended) ++counts_.blended;
  if (clipped) ++counts_.clipped;
  if (fallback) ++counts_.fallback;
}

void TargetSupervisor::add_counts(Interventions& counts) const noexcept {
  counts.blended += counts_.blended;
  counts.clipped += counts_.clipped;
  counts.fallback += counts_.fallback;
}

}  // namespace detail
}  // namespace tdaot
