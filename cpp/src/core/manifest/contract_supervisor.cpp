// The rules of a contract's Supervisor (tdaot/contract.h): checked by the manifest parser
// (manifest_contract.cpp, field "contract.supervisor.<name>") and by a bind-time override
// (Contract::check_supervisor, a ContractError), one set of rules for both.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "core/manifest/contract_internal.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace {

constexpr double kPi = 3.14159265358979323846;

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

const std::vector<std::string>& supervisor_fallbacks() {
  static const std::vector<std::string> names{"hold", "damp"};
  return names;
}

namespace detail {

const std::string* supervised_output(const Contract& contract, const Supervisor& supervisor) {
  if (!supervisor.output.empty()) {
    auto it = contract.outputs.find(supervisor.output);
    return it == contract.outputs.end() ? nullptr : &it->first;
  }
  return contract.outputs.empty() ? nullptr : &contract.outputs.begin()->first;
}

std::optional<TermSlot> find_joint_term(const Contract& contract, const std::string& output,
                                        const std::string& name) {
  for (const auto& [key, signal] : contract.inputs) {
    int64_t at = 0;
    for (const Term& term : signal.terms) {
      const std::string* joints = contract.joint_output(term);
      if (term.name == name && joints != nullptr && *joints == output) {
        return TermSlot{key, at + (term.history - 1) * term.size, term.size};
      }
      at += term.size * term.history;
    }
  }
  return std::nullopt;
}

std::optional<TermSlot> find_term(const Contract& contract, const std::string& name) {
  for (const auto& [key, signal] : contract.inputs) {
    int64_t at = 0;
    for (const Term& term : signal.terms) {
      if (term.name == name) return TermSlot{key, at + (term.history - 1) * term.size, term.size};
      at += term.size * term.history;
    }
  }
  return std::nullopt;
}

std::optional<SupervisorProblem> supervisor_problem(const Contract& contract,
                                                    const Supervisor& s) {
  const std::string* output = supervised_output(contract, s);
  if (output == nullptr) {
    std::string known;
    for (const auto& entry : contract.outputs) known += (known.empty() ? "" : ", ") + entry.first;
    if (s.output.empty()) {
      return SupervisorProblem{"output", "supervises a joint output signal, but the contract has "
                                         "no output signal"};
    }
    return SupervisorProblem{"output", "'" + s.output + "' is not one of the contract's output "
                                       "signals (it has: " + (known.empty() ? "none" : known) + ")"};
  }
  const Signal& signal = contract.outputs.at(*output);
  const size_t n = signal.names.size();
  const std::pair<const char*, const SignalValues*> lists[] = {
      {"blend_max_velocity", &s.blend_max_velocity},
      {"low", &s.low},
      {"high", &s.high},
      {"max_velocity", &s.max_velocity},
      {"max_torque", &s.max_torque}};
  for (const auto& [name, values] : lists) {
    if (!values->present()) continue;
    if (values->per_element && values->values.size() != n) {
      return SupervisorProblem{name, "has " + std::to_string(values->values.size()) +
                                         " values, expected " + std::to_string(n) +
                                         " (one per joint of '" + *output + "') or one number"};
    }
    if (!values->per_element && values->values.size() != 1) {
      return SupervisorProblem{name, "has " + std::to_string(values->values.size()) +
                                         " values as one number; give per_element"};
    }
    for (size_t i = 0; i < values->values.size(); ++i) {
      if (!std::isfinite(values->values[i])) {
        return SupervisorProblem{name, "expected finite numbers, got " +
                                           number_text(values->values[i])};
      }
    }
  }
  for (const auto& [name, values] : {lists[0], lists[3], lists[4]}) {
    for (size_t i = 0; values->present() && i < n; ++i) {
      if (!((*values)[i] > 0)) {
        return SupervisorProblem{name, std::string(name) + " " + number_text((*values)[i]) +
                                           " for '" + signal.names[i] + "' is not > 0"};
      }
    }
  }
  if (!std::isfinite(s.blend_seconds) || s.blend_seconds < 0) {
    return SupervisorProblem{"blend_seconds", "expected seconds >= 0 (0: no soft start), got " +
                                                  number_text(s.blend_seconds)};
  }
  if (!std::isfinite(s.start_gain_fraction) || s.start_gain_fraction < 0 ||
      s.start_gain_fraction > 1) {
    return SupervisorProblem{"start_gain_fraction", "expected a fraction in [0, 1], got " +
                                                        number_text(s.start_gain_fraction)};
  }
  if (!std::isfinite(s.margin) || s.margin < 0) {
    return SupervisorProblem{"margin", "expected radians >= 0, got " + number_text(s.margin)};
  }
  for (size_t i = 0; s.low.present() && s.high.present() && i < n; ++i) {
    if (s.low[i] + s.margin > s.high[i] - s.margin) {
      return SupervisorProblem{"low", "low " + number_text(s.low[i]) + " + margin " +
                                          number_text(s.margin) + " > high " +
                                          number_text(s.high[i]) + " - margin for '" +
                                          signal.names[i] + "'"};
    }
  }
  if (!std::isfinite(s.max_tilt) || s.max_tilt < 0 || s.max_tilt > kPi) {
    return SupervisorProblem{"max_tilt", "expected radians in (0, pi] (0: unchecked), got " +
                                             number_text(s.max_tilt)};
  }
  if (s.max_rate_limited_steps < 0) {
    return SupervisorProblem{"max_rate_limited_steps",
                             "expected steps >= 1 (0: unchecked), got " +
                                 std::to_string(s.max_rate_limited_steps)};
  }
  const auto& fallbacks = supervisor_fallbacks();
  if (std::find(fallbacks.begin(), fallbacks.end(), s.fallback) == fallbacks.end()) {
    return SupervisorProblem{"fallback",
                             "unknown fallback '" + s.fallback + "' (known: hold damp)"};
  }
  const bool positions = find_joint_term(contract, *output, "joint_pos_rel").has_value();
  if (s.blend_seconds > 0 && !positions) {
    return SupervisorProblem{
        "blend_seconds", "a soft start (blend_seconds " + number_text(s.blend_seconds) +
                             ") starts from the measured joint positions, but no input signal "
                             "has a joint_pos_rel term of '" + *output + "'"};
  }
  if (s.fallback == "damp" && !positions) {
    return SupervisorProblem{"fallback", "fallback 'damp' targets the measured joint positions, "
                                         "but no input signal has a joint_pos_rel term of '" +
                                             *output + "'"};
  }
  if (s.fallback == "damp" && !signal.damping.present()) {
    return SupervisorProblem{"fallback", "fallback 'damp' applies the damping of '" + *output +
                                             "', but the signal has no damping gains"};
  }
  if (s.max_velocity.present() && !find_joint_term(contract, *output, "joint_vel_rel")) {
    return SupervisorProblem{"max_velocity", "reads the measured joint velocities, but no input "
                                             "signal has a joint_vel_rel term of '" + *output + "'"};
  }
  if (s.max_torque.present() && !positions) {
    return SupervisorProblem{"max_torque", "bounds each target's distance from the measured joint "
                                           "position, but no input signal has a joint_pos_rel term "
                                           "of '" + *output + "'"};
  }
  if (s.max_torque.present() && !signal.stiffness.present()) {
    return SupervisorProblem{"max_torque", "bounds the torque of the stiffness of '" + *output +
                                               "', but the signal has no stiffness gains"};
  }
  if (s.max_tilt > 0 && !find_term(contract, "projected_gravity")) {
    return SupervisorProblem{"max_tilt", "reads the base tilt from a projected_gravity term, but "
                                         "no input signal has one"};
  }
  if (s.max_rate_limited_steps > 0 && !signal.max_delta.present()) {
    return SupervisorProblem{"max_rate_limited_steps",
                             "counts steps the envelope rate limits, but '" + *output +
                                 "' has no max_delta"};
  }
  return std::nullopt;
}

}  // namespace detail

void Contract::check_supervisor(const Supervisor& supervisor) const {
  const auto problem = detail::supervisor_problem(*this, supervisor);
  if (problem) {
    throw ContractError("supervisor", "contract supervisor: field '" + problem->field + "': " +
                                          problem->message);
  }
}

}  // namespace tdaot
