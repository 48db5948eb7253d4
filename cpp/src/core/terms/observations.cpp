// tdaot/terms.h: the inputs a contract declares as observation terms, planned from the manifest
// (which slots the package carries itself) and computed each control step from a RobotState.
// Torch-free, simulator-free.
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "tdaot/errors.h"
#include "tdaot/service/terms.h"

namespace tdaot::terms {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : ", '") + name + "'";
  return out.empty() ? "none" : out;
}

bool is_state(const Manifest& manifest, const std::string& key) {
  if (!manifest.recurrent) return false;
  const auto& state = manifest.recurrent->state;
  return key == manifest.recurrent->is_init ||
         std::any_of(state.begin(), state.end(), [&](const StatePair& p) { return p.input == key; });
}

// The next-step output of the recurrent state whose input is `prefix` or `prefix@...`.
const std::string* carried_state(const Manifest& manifest, const std::string& prefix) {
  if (!manifest.recurrent) return nullptr;
  for (const StatePair& pair : manifest.recurrent->state) {
    if (pair.input == prefix || pair.input.rfind(prefix + "@", 0) == 0) return &pair.output;
  }
  return nullptr;
}

}  // namespace

Observations::Observations(const Manifest& manifest, const Contract& contract, const JointOutput& joints)
    : joint_offset_(joints.offset) {
  for (const TensorSpec& spec : manifest.inputs) {
    if (is_state(manifest, spec.key)) continue;  // the runner carries it
    auto signal = contract.inputs.find(spec.key);
    if (signal == contract.inputs.end() || signal->second.terms.empty()) {
      throw ContractError(spec.key, "input '" + spec.key + "' is " +
                                        (signal == contract.inputs.end() ? "not in the contract"
                                                                         : "a contract signal without observation terms") +
                                        ": only inputs declared as observation terms (tdaot.Signal(terms=[...])) "
                                        "are computed from the robot's state");
    }
    if (spec.dtype != DType::Float32 && spec.dtype != DType::Float64) {
      throw ContractError(spec.key, "input '" + spec.key + "' is " + dtype_name(spec.dtype) +
                                        "; observation terms fill float32 or float64 inputs");
    }
    ObservationInput input;
    input.key = spec.key;
    input.dtype = spec.dtype;
    input.names = signal->second.names;
    size_t at = 0;
    for (const Term& term : signal->second.terms) {
      TermSlot slot;
      slot.term = &term;
      slot.first = at;
      slot.history = std::max<int64_t>(1, term.history);
      slot.size = static_cast<size_t>(term.size);
      const size_t expected = term_elements(term.name, joints.names).size();
      if (expected == 0) {
        throw ContractError(spec.key, "contract input '" + spec.key + "': term '" + term.name +
                                          "' is not one computed from a robot's state (" +
                                          join(term_vocabulary()) + ")");
      }
      if (slot.size != expected) {
        throw ContractError(spec.key, "contract input '" + spec.key + "': term '" + term.name + "' has " +
                                          std::to_string(slot.size) + " elements per step; " +
                                          std::to_string(expected) + " are computed" +
                                          (is_joint_term(term.name) ? " (one per joint)" : ""));
      }
      if (term.name == "gait_phase") {
        auto period = term.params.find("period");
        if (period == term.params.end() || !(period->second > 0.0)) {
          throw ContractError(spec.key, "contract input '" + spec.key +
                                            "': term 'gait_phase' needs a period > 0 (seconds)");
        }
        slot.period = period->second;
      }
      slot.window.assign(slot.size * static_cast<size_t>(slot.history), 0.0);
      // A package built with the carried terms (the default) has them as recurrent state: the
      // caller then writes only the newest step of a history term and no last_action.
      const std::string* last = carried_state(manifest, "tdaot.last_action." + spec.key + "." + term.name);
      const std::string* history = carried_state(manifest, "tdaot.history." + spec.key + "." + term.name);
      const size_t older = slot.window.size() - slot.size;
      for (size_t i = 0; i < slot.window.size(); ++i) input.written.push_back(!(last || (history && i < older)));
      if (last && carried_action_.empty()) {
        const std::string* output = contract.joint_output(term);
        if (output && *output == joints.key) {
          carried_action_ = *last;
          carried_dtype_ = spec.dtype;  // the state has its observation's dtype
        }
      }
      at += slot.window.size();
      input.terms.push_back(std::move(slot));
    }
    if (spec.shape.size() != 1 || static_cast<size_t>(spec.shape[0]) != at || input.names.size() != at) {
      throw ContractError(spec.key, "input '" + spec.key + "': its terms hold " + std::to_string(at) +
                                        " elements, the package's input " +
                                        std::to_string(spec.shape.size() == 1 ? spec.shape[0] : -1));
    }
    input.values.assign(at, 0.0);
    inputs_.push_back(std::move(input));
  }
  if (inputs_.empty()) {
    throw ContractError("", "no input is declared as observation terms in the contract "
                            "(tdaot.Signal(terms=[...])), so none can be computed from the robot's state");
  }
}

size_t Observations::size() const noexcept {
  size_t n = 0;
  for (const ObservationInput& input : inputs_) n += input.values.size();
  return n;
}

void Observations::compute(const RobotState& state, const double* raw_action) {
  const std::array<double, 3> down{0.0, 0.0, -1.0};
  for (ObservationInput& input : inputs_) {
    for (TermSlot& slot : input.terms) {
      const std::string& name = slot.term->name;
      // Older steps move up one (oldest first); the newest is written in place.
      if (slot.history > 1 && slot.filled) {
        std::copy(slot.window.begin() + static_cast<long>(slot.size), slot.window.end(), slot.window.begin());
      }
      double* newest = slot.window.data() + slot.window.size() - slot.size;
      std::array<double, 3> three{};
      if (name == "base_lin_vel") {
        three = world_to_base(state.base_quat, state.base_lin_vel);
      } else if (name == "base_ang_vel") {
        three = state.base_ang_vel;
      } else if (name == "projected_gravity") {
        three = world_to_base(state.base_quat, down);
      } else if (name == "velocity_commands") {
        three = state.command;
      }
      if (name == "joint_pos_rel" || name == "joint_vel_rel" || name == "last_action") {
        for (size_t i = 0; i < joint_offset_.size(); ++i) {
          newest[i] = name == "joint_pos_rel"   ? state.joint_pos[i] - joint_offset_[i]
                      : name == "joint_vel_rel" ? state.joint_vel[i]
                                                : raw_action[i];
        }
      } else if (name == "gait_phase") {
        const double phase = std::fmod(state.time, slot.period) / slot.period;
        newest[0] = std::sin(2.0 * kPi * phase);
        newest[1] = std::cos(2.0 * kPi * phase);
      } else {
        std::copy(three.begin(), three.end(), newest);
      }
      if (!slot.filled) {  // after the start or a reset: every older step is the first value
        for (int64_t k = 0; k + 1 < slot.history; ++k) {
          std::copy(newest, newest + slot.size, slot.window.data() + k * static_cast<int64_t>(slot.size));
        }
        slot.filled = true;
      }
      std::copy(slot.window.begin(), slot.window.end(), input.values.begin() + static_cast<long>(slot.first));
    }
  }
}

void Observations::write(size_t i, void* data) const {
  const ObservationInput& input = inputs_.at(i);
  if (input.dtype == DType::Float32) {
    float* out = static_cast<float*>(data);
    for (size_t k = 0; k < input.values.size(); ++k) {
      if (input.written[k]) out[k] = static_cast<float>(input.values[k]);
    }
  } else {
    double* out = static_cast<double*>(data);
    for (size_t k = 0; k < input.values.size(); ++k) {
      if (input.written[k]) out[k] = input.values[k];
    }
  }
}

void Observations::reset() {
  for (ObservationInput& input : inputs_) {
    for (TermSlot& slot : input.terms) slot.filled = false;
  }
}

}  // namespace tdaot::terms
