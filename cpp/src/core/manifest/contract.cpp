// tdaot::Contract: name order checks and the text form. Parsing and writing it are part of the
// manifest (manifest_contract.cpp).
#include "tdaot/contract.h"

#include <algorithm>
#include <sstream>
#include <unordered_map>

#include "core/manifest/contract_internal.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace {

std::string quoted(const std::string& text) { return "'" + text + "'"; }

// "0.25", or "[0, 0.9, -1.8, ...]" (the first few of a per-element list).
std::string values_text(const SignalValues& values) {
  std::ostringstream out;
  if (!values.per_element) {
    out << values.values[0];
    return out.str();
  }
  constexpr size_t kShown = 4;
  out << "[";
  for (size_t i = 0; i < values.values.size() && i < kShown; ++i) {
    out << (i ? ", " : "") << values.values[i];
  }
  out << (values.values.size() > kShown ? ", ...]" : "]");
  return out.str();
}

// One term: "base_ang_vel [3] scale 0.25, low -5", with history and parameters when present.
void describe_term(std::ostringstream& out, const Term& term) {
  out << "    term " << term.name << " [" << term.size;
  if (term.history > 1) out << " x " << term.history << " steps";
  out << "]";
  if (!term.output.empty()) out << " of " << term.output;
  for (const auto& [name, value] : term.params) out << ", " << name << " " << value;
  out << ": scale " << values_text(term.scale) << ", offset " << values_text(term.offset);
  if (term.low.present()) out << ", low " << values_text(term.low);
  if (term.high.present()) out << ", high " << values_text(term.high);
  out << "\n";
}

void describe_signals(std::ostringstream& out, const char* title,
                      const std::map<std::string, Signal>& signals) {
  for (const auto& [key, signal] : signals) {
    if (!signal.terms.empty()) {
      out << "  " << title << " " << key << " [" << signal.names.size() << "]: "
          << signal.terms.size() << " terms\n";
      for (const Term& term : signal.terms) describe_term(out, term);
      continue;
    }
    out << "  " << title << " " << key << " [" << signal.names.size() << "]: ";
    for (size_t i = 0; i < signal.names.size(); ++i) {
      if (i == 6) {
        out << ", ...";
        break;
      }
      out << (i ? ", " : "") << signal.names[i];
    }
    out << "\n    scale " << values_text(signal.scale) << ", offset " << values_text(signal.offset);
    const std::pair<const char*, const SignalValues*> optional[] = {
        {"low", &signal.low}, {"high", &signal.high}, {"max_delta", &signal.max_delta}};
    for (const auto& [name, values] : optional) {
      if (values->present()) out << ", " << name << " " << values_text(*values);
    }
    out << "\n";
    if (signal.stiffness.present() || signal.damping.present()) {
      out << "    gains";
      if (signal.stiffness.present()) out << " stiffness " << values_text(signal.stiffness);
      if (signal.stiffness.present() && signal.damping.present()) out << ",";
      if (signal.damping.present()) out << " damping " << values_text(signal.damping);
      out << "\n";
    }
  }
}

}  // namespace

const std::vector<std::string>& term_vocabulary() {
  static const std::vector<std::string> names{
      "base_lin_vel",  "base_ang_vel",  "projected_gravity", "velocity_commands",
      "joint_pos_rel", "joint_vel_rel", "last_action",       "gait_phase"};
  return names;
}

bool is_joint_term(const std::string& name) {
  return name == "joint_pos_rel" || name == "joint_vel_rel" || name == "last_action";
}

std::vector<std::string> term_elements(const std::string& name,
                                       const std::vector<std::string>& joints) {
  if (name == "base_lin_vel" || name == "base_ang_vel" || name == "projected_gravity") {
    return {"x", "y", "z"};
  }
  if (name == "velocity_commands") return {"lin_vel_x", "lin_vel_y", "ang_vel_z"};
  if (name == "gait_phase") return {"sin", "cos"};
  if (is_joint_term(name)) return joints;
  return {};
}

const std::string* Contract::joint_output(const Term& term) const {
  if (!term.output.empty()) {
    auto it = outputs.find(term.output);
    return it == outputs.end() ? nullptr : &it->first;
  }
  return outputs.empty() ? nullptr : &outputs.begin()->first;
}

double Signal::rest(size_t i) const {
  double value = offset[i];
  if (low.present()) value = std::max(value, low[i]);
  if (high.present()) value = std::min(value, high[i]);
  return value;
}

const Signal* Contract::signal(const std::string& key) const {
  for (const auto* signals : {&inputs, &outputs}) {
    auto it = signals->find(key);
    if (it != signals->end()) return &it->second;
  }
  return nullptr;
}

std::vector<int64_t> Contract::order(const std::string& key,
                                     const std::vector<std::string>& names) const {
  const Signal* found = signal(key);
  if (found == nullptr) {
    std::string known;
    for (const auto* signals : {&inputs, &outputs}) {
      for (const auto& entry : *signals) known += (known.empty() ? "" : ", ") + entry.first;
    }
    throw ContractError(key, "the contract has no signal " + quoted(key) + " (it has: " +
                                 (known.empty() ? "none" : known) + ")");
  }
  return order_names(key, found->names, names);
}

std::vector<int64_t> order_names(const std::string& key, const std::vector<std::string>& policy,
                                 const std::vector<std::string>& names) {
  std::unordered_map<std::string, int64_t> index;
  for (size_t i = 0; i < policy.size(); ++i) index.emplace(policy[i], static_cast<int64_t>(i));
  std::vector<int64_t> result;
  std::vector<bool> seen(policy.size(), false);
  std::string extra;
  for (const std::string& name : names) {
    auto it = index.find(name);
    if (it == index.end()) {
      if (extra.empty()) extra = name;
      continue;
    }
    if (seen[it->second]) {
      throw ContractError(key, "the names given for " + quoted(key) + " list " + quoted(name) +
                                   " twice");
    }
    seen[it->second] = true;
    result.push_back(it->second);
  }
  const auto missing = std::find(seen.begin(), seen.end(), false);
  if (missing == seen.end() && extra.empty()) return result;
  std::string problem;
  if (missing != seen.end()) {
    problem = "missing " + quoted(policy[static_cast<size_t>(missing - seen.begin())]);
  }
  if (!extra.empty()) problem += (problem.empty() ? "" : ", ") + ("extra " + quoted(extra));
  throw ContractError(key, "the names given for " + quoted(key) + " (" +
                               std::to_string(names.size()) + ") are not the policy's (" +
                               std::to_string(policy.size()) + "): " + problem +
                               " (the first of each)");
}

std::string Contract::describe() const {
  std::ostringstream out;
  out << "  control_dt " << control_dt << " s (" << 1.0 / control_dt << " Hz)\n";
  describe_signals(out, "input", inputs);
  describe_signals(out, "output", outputs);
  for (const auto& [name, value] : metadata) out << "  " << name << ": " << value << "\n";
  if (supervisor) {
    const Supervisor& s = *supervisor;
    std::string parts;
    auto add = [&](const std::string& part) { parts += (parts.empty() ? "" : ", ") + part; };
    auto number = [](double value) {
      std::ostringstream text;
      text << value;
      return text.str();
    };
    if (!s.output.empty()) add("output " + s.output);
    if (s.blend_seconds > 0) {
      add("soft start " + number(s.blend_seconds) + " s from gain " + number(s.start_gain_fraction));
      if (s.blend_max_velocity.present()) add("blend_max_velocity " + values_text(s.blend_max_velocity) + " rad/s");
    }
    if (s.low.present()) add("low " + values_text(s.low));
    if (s.high.present()) add("high " + values_text(s.high));
    if (s.margin > 0) add("margin " + number(s.margin));
    if (s.max_velocity.present()) add("max_velocity " + values_text(s.max_velocity) + " rad/s");
    if (s.max_torque.present()) add("max_torque " + values_text(s.max_torque) + " N m");
    if (s.max_tilt > 0) add("max_tilt " + number(s.max_tilt) + " rad");
    if (s.max_rate_limited_steps > 0) add("max_rate_limited_steps " + std::to_string(s.max_rate_limited_steps));
    add("fallback " + s.fallback);
    out << "  supervisor " << parts << "\n";
  }
  return out.str();
}

}  // namespace tdaot
