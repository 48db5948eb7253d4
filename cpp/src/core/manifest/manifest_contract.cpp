// The manifest's optional "contract" (tdaot/contract.h): parsed with field-level errors
// ("contract.outputs.action.low") and written back. Unknown fields inside the contract are
// refused rather than dropped: a misspelt "max_delta" must not silently switch a limit off.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include "core/manifest/contract_fields.h"
#include "core/manifest/contract_internal.h"
#include "core/manifest/manifest_schema.h"

namespace tdaot::detail {
namespace {

constexpr std::array<std::string_view, 5> kContractFields{"control_dt", "inputs", "outputs",
                                                          "metadata", "supervisor"};
constexpr std::array<std::string_view, 10> kSignalFields{
    "names", "scale",     "offset",  "low",           "high", "max_delta",
    "terms", "stiffness", "damping", "history_layout"};
// The history layouts a signal of terms may state: each term's steps together, oldest first.
constexpr std::string_view kTermMajor = "term-major";
constexpr std::array<std::string_view, 7> kTermFields{"name", "scale", "offset", "low",
                                                      "high", "history", "output"};

// The parameters a term takes (all required), by term name.
std::vector<std::string> term_params(const std::string& name) {
  if (name == "gait_phase") return {"period"};
  return {};
}

std::string list_text(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names) text.append(text.empty() ? "" : " ").append(name);
  return text;
}

// low <= high for each element (`names` names them in messages).
void check_clip(const Parser& p, const std::string& path, const SignalValues& low,
                const SignalValues& high, const std::vector<std::string>& names,
                const std::string& prefix = "") {
  if (!low.present() || !high.present()) return;
  for (size_t i = 0; i < names.size(); ++i) {
    if (low[i] > high[i]) {
      p.fail(Parser::join(path, "low"), prefix + "low " + json(low[i]).dump() + " > high " +
                                            json(high[i]).dump() + " for '" + names[i] + "'");
    }
  }
}

// One value per element, from a value per element of each part; one number when all agree.
SignalValues collapse(std::vector<double> values) {
  SignalValues result;
  const bool same = std::all_of(values.begin(), values.end(),
                                [&](double v) { return v == values.front(); });
  result.per_element = !same;
  if (same) values.resize(1);
  result.values = std::move(values);
  return result;
}

Term parse_term(const Parser& p, const json& value, const std::string& field,
                const std::map<std::string, Signal>& outputs) {
  const json& object = p.object(value, field);
  Term term;
  term.name = p.text(p.member(object, field, "name"), Parser::join(field, "name"));
  const auto& vocabulary = term_vocabulary();
  if (std::find(vocabulary.begin(), vocabulary.end(), term.name) == vocabulary.end()) {
    p.fail(Parser::join(field, "name"),
           "unknown term '" + term.name + "' (known: " + list_text(vocabulary) + ")");
  }
  const std::string prefix = "term '" + term.name + "': ";
  const std::vector<std::string> params = term_params(term.name);
  for (const auto& [name, item] : object.items()) {
    if (std::find(kTermFields.begin(), kTermFields.end(), name) != kTermFields.end()) continue;
    if (std::find(params.begin(), params.end(), name) != params.end()) continue;
    std::vector<std::string> known(kTermFields.begin(), kTermFields.end());
    known.insert(known.end(), params.begin(), params.end());
    p.fail(Parser::join(field, name.c_str()),
           prefix + "unknown term field (known: " + list_text(known) + ")");
  }
  for (const std::string& name : params) {
    auto it = object.find(name);
    if (it == object.end() || it->is_null()) {
      p.fail(Parser::join(field, name.c_str()), prefix + "missing (seconds per gait cycle)");
    }
    const double number_value = number(p, *it, Parser::join(field, name.c_str()));
    if (!(number_value > 0)) {
      p.fail(Parser::join(field, name.c_str()),
             prefix + name + " " + json(number_value).dump() + " is not > 0");
    }
    term.params.emplace(name, number_value);
  }
  auto history = object.find("history");
  if (history != object.end() && !history->is_null()) {
    const std::string history_field = Parser::join(field, "history");
    term.history = p.integer(*history, history_field, std::numeric_limits<int64_t>::min());
    if (term.history < 1) {
      p.fail(history_field, prefix + "history " + std::to_string(term.history) +
                                " is not >= 1 (the steps kept, newest included)");
    }
  }
  auto output = object.find("output");
  const bool joint = is_joint_term(term.name);
  if (output != object.end() && !output->is_null()) {
    const std::string output_field = Parser::join(field, "output");
    term.output = p.text(*output, output_field);
    if (!joint) {
      p.fail(output_field, prefix + "takes no output (only joint_pos_rel, joint_vel_rel and "
                                    "last_action follow a joint output signal)");
    }
  }
  std::vector<std::string> joints;
  if (joint) {
    std::string known;
    for (const auto& entry : outputs) known += (known.empty() ? "" : ", ") + entry.first;
    if (outputs.empty()) {
      p.fail(Parser::join(field, "name"),
             prefix + "has one element per joint of the contract's joint output signal, but "
                      "the contract has no output signal");
    }
    if (!term.output.empty() && outputs.count(term.output) == 0) {
      p.fail(Parser::join(field, "output"), prefix + "'" + term.output +
                                                "' is not one of the contract's output signals "
                                                "(it has: " + known + ")");
    }
    joints = outputs.at(term.output.empty() ? outputs.begin()->first : term.output).names;
  }
  const std::vector<std::string> elements = term_elements(term.name, joints);
  term.size = static_cast<int64_t>(elements.size());
  const size_t size = elements.size();
  term.scale = values(p, object, field, "scale", size, term.scale, prefix, "element");
  term.offset = values(p, object, field, "offset", size, term.offset, prefix, "element");
  term.low = values(p, object, field, "low", size, {}, prefix, "element");
  term.high = values(p, object, field, "high", size, {}, prefix, "element");
  check_clip(p, field, term.low, term.high, elements, prefix);
  return term;
}

// A signal's `terms`: each parsed, their steps adding up to the key's n elements; the signal's
// names and per-element map and clip derived from them.
void parse_terms(const Parser& p, const json& terms, const std::string& path, const TensorSpec& spec,
                 const std::map<std::string, Signal>& outputs, Signal& signal) {
  const std::string terms_field = Parser::join(path, "terms");
  const json& list = p.array(terms, terms_field);
  if (list.empty()) p.fail(terms_field, "empty; a signal of terms has at least one");
  int64_t total = 0;
  std::string sizes;
  std::vector<double> scale, offset, low, high;
  bool clips_low = false, clips_high = false;
  std::unordered_set<std::string> seen;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = Parser::index(terms_field, i);
    Term term = parse_term(p, list[i], field, outputs);
    if (!seen.insert(term.name + "\x1f" + term.output).second) {
      p.fail(Parser::join(field, "name"), "term '" + term.name + "' appears twice");
    }
    const std::vector<std::string> elements = term_elements(
        term.name, is_joint_term(term.name)
                       ? outputs.at(term.output.empty() ? outputs.begin()->first : term.output).names
                       : std::vector<std::string>{});
    for (int64_t step = term.history - 1; step >= 0; --step) {
      const std::string suffix = step == 0 ? "" : "@-" + std::to_string(step);
      for (size_t e = 0; e < elements.size(); ++e) {
        signal.names.push_back(term.name + "." + elements[e] + suffix);
        scale.push_back(term.scale[e]);
        offset.push_back(term.offset[e]);
        low.push_back(term.low.present() ? term.low[e] : -kInf);
        high.push_back(term.high.present() ? term.high[e] : kInf);
      }
    }
    clips_low = clips_low || term.low.present();
    clips_high = clips_high || term.high.present();
    total += term.size * term.history;
    sizes += (sizes.empty() ? "" : " + ") + term.name + " " + std::to_string(term.size) +
             (term.history > 1 ? "x" + std::to_string(term.history) : "");
    signal.terms.push_back(std::move(term));
  }
  if (total != spec.shape[0]) {
    p.fail(terms_field, "the terms have " + std::to_string(total) + " elements (" + sizes +
                            "), but '" + spec.key + "' has " + std::to_string(spec.shape[0]));
  }
  signal.scale = collapse(std::move(scale));
  signal.offset = collapse(std::move(offset));
  if (clips_low) signal.low = collapse(std::move(low));
  if (clips_high) signal.high = collapse(std::move(high));
}

// Gains of an output signal: absent, one number or one per joint, each finite and >= 0.
SignalValues gains(const Parser& p, const json& object, const std::string& path, const char* name,
                   const Signal& signal) {
  SignalValues result = values(p, object, path, name, signal.names.size(), {}, "", "joint");
  for (size_t i = 0; result.present() && i < signal.names.size(); ++i) {
    if (result[i] < 0) {
      p.fail(Parser::join(path, name), std::string(name) + " " + json(result[i]).dump() +
                                           " for '" + signal.names[i] + "' is negative");
    }
  }
  return result;
}

Signal parse_signal(const Parser& p, const json& value, const std::string& path,
                    const TensorSpec& spec, const std::map<std::string, Signal>* outputs) {
  const json& object = p.object(value, path);
  refuse_unknown(p, object, path, kSignalFields);
  if (!is_floating(spec.dtype)) {
    p.fail(path, "'" + spec.key + "' is " + dtype_name(spec.dtype) +
                     "; a signal scales and clips floating-point values");
  }
  if (spec.shape.size() != 1) {
    p.fail(path, "'" + spec.key + "' has per-sample shape " + format_shape(spec.shape) +
                     "; a signal describes a one-dimensional [n] key");
  }
  const bool is_input = outputs != nullptr;
  for (const char* gain : {"stiffness", "damping"}) {
    auto it = object.find(gain);
    if (is_input && it != object.end() && !it->is_null()) {
      p.fail(Parser::join(path, gain), "gains belong to an output signal of joint targets; '" +
                                           spec.key + "' is an input");
    }
  }
  Signal signal;
  auto layout = object.find("history_layout");
  if (layout != object.end() && !layout->is_null()) {
    const std::string field = Parser::join(path, "history_layout");
    signal.history_layout = p.string(*layout, field);
    if (signal.history_layout != kTermMajor) {
      p.fail(field, "unknown history layout '" + signal.history_layout + "' (known: " +
                        std::string(kTermMajor) + ": each term's steps together, oldest first)");
    }
  }
  auto terms = object.find("terms");
  if (terms != object.end() && !terms->is_null()) {
    if (!is_input) {
      p.fail(Parser::join(path, "terms"), "terms describe an input's observations; '" +
                                              spec.key + "' is an output");
    }
    for (const char* field : {"names", "scale", "offset", "low", "high", "max_delta"}) {
      auto it = object.find(field);
      if (it != object.end() && !it->is_null()) {
        p.fail(Parser::join(path, field), "a signal of terms derives its names, and each term has "
                                          "its own scale, offset, low and high; give terms or " +
                                              std::string(field) + ", not both");
      }
    }
    parse_terms(p, *terms, path, spec, *outputs, signal);
    return signal;
  }
  const size_t n = static_cast<size_t>(spec.shape[0]);
  const std::string names_field = Parser::join(path, "names");
  const json& names = p.array(p.member(object, path, "names"), names_field);
  if (names.size() != n) {
    p.fail(names_field, "has " + std::to_string(names.size()) + " names, but '" + spec.key +
                            "' has " + std::to_string(n) + " elements");
  }
  std::unordered_set<std::string> seen;
  for (size_t i = 0; i < n; ++i) {
    signal.names.push_back(p.text(names[i], Parser::index(names_field, i)));
    if (!seen.insert(signal.names.back()).second) {
      p.fail(Parser::index(names_field, i), "name '" + signal.names.back() + "' appears twice");
    }
  }
  signal.scale = values(p, object, path, "scale", n, signal.scale);
  signal.offset = values(p, object, path, "offset", n, signal.offset);
  signal.low = values(p, object, path, "low", n, {});
  signal.high = values(p, object, path, "high", n, {});
  signal.max_delta = values(p, object, path, "max_delta", n, {});
  check_clip(p, path, signal.low, signal.high, signal.names);
  for (size_t i = 0; i < n; ++i) {
    if (signal.max_delta.present() && !(signal.max_delta[i] > 0)) {
      p.fail(Parser::join(path, "max_delta"), "max_delta " + json(signal.max_delta[i]).dump() +
                                                  " for '" + signal.names[i] + "' is not > 0");
    }
  }
  if (!is_input) {
    signal.stiffness = gains(p, object, path, "stiffness", signal);
    signal.damping = gains(p, object, path, "damping", signal);
  }
  return signal;
}

// The signals of section `name`; `outputs` (for the inputs' terms) is null for the outputs.
std::map<std::string, Signal> parse_signals(const Parser& p, const json& contract,
                                            const char* name, const std::vector<TensorSpec>& specs,
                                            const std::map<std::string, Signal>* outputs) {
  auto it = contract.find(name);
  if (it == contract.end() || it->is_null()) return {};
  const std::string path = Parser::join("contract", name);
  std::map<std::string, Signal> signals;
  for (const auto& [key, value] : p.object(*it, path).items()) {
    const std::string field = Parser::join(path, key.c_str());
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&key = key](const TensorSpec& s) { return s.key == key; });
    if (spec == specs.end()) p.fail(field, "'" + key + "' is not one of the manifest's " + name);
    signals.emplace(key, parse_signal(p, value, field, *spec, outputs));
  }
  return signals;
}

// A term as the manifest holds it: its parameters beside its fields ("period": 0.8).
nlohmann::ordered_json term_to_json(const Term& term) {
  nlohmann::ordered_json entry;
  entry["name"] = term.name;
  entry["scale"] = values_to_json(term.scale);
  entry["offset"] = values_to_json(term.offset);
  if (term.low.present()) entry["low"] = values_to_json(term.low);
  if (term.high.present()) entry["high"] = values_to_json(term.high);
  entry["history"] = term.history;
  if (!term.output.empty()) entry["output"] = term.output;
  for (const auto& [name, value] : term.params) entry[name] = value;
  return entry;
}

}  // namespace

double number(const Parser& p, const json& value, const std::string& field) {
  if (!value.is_number()) p.fail(field, "expected a number, got " + value.dump());
  const double result = value.get<double>();
  if (!std::isfinite(result)) p.fail(field, "expected a finite number, got " + value.dump());
  return result;
}

SignalValues values(const Parser& p, const json& signal, const std::string& path,
                    const char* name, size_t n, SignalValues fallback,
                    const std::string& prefix, const char* per) {
  auto it = signal.find(name);
  if (it == signal.end() || it->is_null()) return fallback;
  const std::string field = Parser::join(path, name);
  SignalValues result;
  if (!it->is_array()) {
    result.values.push_back(number(p, *it, field));
    return result;
  }
  if (it->size() != n) {
    p.fail(field, prefix + "has " + std::to_string(it->size()) + " values, expected " +
                      std::to_string(n) + " (one per " + per + ") or one number");
  }
  result.per_element = true;
  for (size_t i = 0; i < n; ++i) result.values.push_back(number(p, (*it)[i], Parser::index(field, i)));
  return result;
}

nlohmann::ordered_json values_to_json(const SignalValues& values) {
  if (values.per_element) return values.values;
  return values.values[0];
}

std::optional<Contract> parse_contract(const Parser& p, const json& root, const Manifest& m) {
  auto it = root.find("contract");
  if (it == root.end() || it->is_null()) return std::nullopt;
  const json& object = p.object(*it, "contract");
  refuse_unknown(p, object, "contract", kContractFields);
  Contract contract;
  contract.control_dt = number(p, p.member(object, "contract", "control_dt"), "contract.control_dt");
  if (!(contract.control_dt > 0)) {
    p.fail("contract.control_dt", "expected seconds per step > 0, got " +
                                      json(contract.control_dt).dump());
  }
  // The outputs first: a joint term of an input has the joint output signal's names.
  contract.outputs = parse_signals(p, object, "outputs", m.outputs, nullptr);
  contract.inputs = parse_signals(p, object, "inputs", m.inputs, &contract.outputs);
  auto metadata = object.find("metadata");
  if (metadata != object.end() && !metadata->is_null()) {
    for (const auto& [name, value] : p.object(*metadata, "contract.metadata").items()) {
      contract.metadata.emplace(name,
                                p.string(value, Parser::join("contract.metadata", name.c_str())));
    }
  }
  auto supervisor = object.find("supervisor");
  if (supervisor != object.end() && !supervisor->is_null()) {
    contract.supervisor = parse_supervisor(p, *supervisor, contract);
  }
  return contract;
}

nlohmann::ordered_json contract_to_json(const Contract& contract) {
  nlohmann::ordered_json out;
  out["control_dt"] = contract.control_dt;
  for (const auto& [section, signals] :
       {std::pair{"inputs", &contract.inputs}, std::pair{"outputs", &contract.outputs}}) {
    nlohmann::ordered_json list = nlohmann::ordered_json::object();
    for (const auto& [key, signal] : *signals) {
      nlohmann::ordered_json entry;
      if (!signal.terms.empty()) {
        nlohmann::ordered_json terms = nlohmann::ordered_json::array();
        for (const Term& term : signal.terms) terms.push_back(term_to_json(term));
        entry["terms"] = terms;
        entry["history_layout"] = signal.history_layout;
        list[key] = entry;
        continue;
      }
      entry["names"] = signal.names;
      entry["scale"] = values_to_json(signal.scale);
      entry["offset"] = values_to_json(signal.offset);
      if (signal.low.present()) entry["low"] = values_to_json(signal.low);
      if (signal.high.present()) entry["high"] = values_to_json(signal.high);
      if (signal.max_delta.present()) entry["max_delta"] = values_to_json(signal.max_delta);
      if (signal.stiffness.present()) entry["stiffness"] = values_to_json(signal.stiffness);
      if (signal.damping.present()) entry["damping"] = values_to_json(signal.damping);
      list[key] = entry;
    }
    out[section] = list;
  }
  out["metadata"] = contract.metadata;
  if (contract.supervisor) out["supervisor"] = supervisor_to_json(*contract.supervisor);
  return out;
}

}  // namespace tdaot::detail
