// The manifest's optional "contract" (tdaot/contract.h): parsed with field-level errors
// ("contract.outputs.action.low") and written back. Unknown fields inside the contract are
// refused rather than dropped: a misspelt "max_delta" must not silently switch a limit off.
#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>
#include <utility>

#include "core/manifest/manifest_schema.h"

namespace tdaot::detail {
namespace {

constexpr std::array<std::string_view, 4> kContractFields{"control_dt", "inputs", "outputs",
                                                          "metadata"};
constexpr std::array<std::string_view, 6> kSignalFields{"names", "scale", "offset",
                                                        "low",   "high",  "max_delta"};

template <size_t N>
void refuse_unknown(const Parser& p, const json& object, const std::string& path,
                    const std::array<std::string_view, N>& known) {
  for (const auto& [name, value] : object.items()) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string list;
      for (const auto& field : known) list.append(list.empty() ? "" : " ").append(field);
      p.fail(Parser::join(path, name.c_str()), "unknown contract field (known: " + list + ")");
    }
  }
}

double number(const Parser& p, const json& value, const std::string& field) {
  if (!value.is_number()) p.fail(field, "expected a number, got " + value.dump());
  const double result = value.get<double>();
  if (!std::isfinite(result)) p.fail(field, "expected a finite number, got " + value.dump());
  return result;
}

// A number, or a list of one number per element; absent or null: `fallback`.
SignalValues values(const Parser& p, const json& signal, const std::string& path,
                    const char* name, size_t n, SignalValues fallback) {
  auto it = signal.find(name);
  if (it == signal.end() || it->is_null()) return fallback;
  const std::string field = Parser::join(path, name);
  SignalValues result;
  if (!it->is_array()) {
    result.values.push_back(number(p, *it, field));
    return result;
  }
  if (it->size() != n) {
    p.fail(field, "has " + std::to_string(it->size()) + " values, expected " + std::to_string(n) +
                      " (one per name) or one number");
  }
  result.per_element = true;
  for (size_t i = 0; i < n; ++i) result.values.push_back(number(p, (*it)[i], Parser::index(field, i)));
  return result;
}

Signal parse_signal(const Parser& p, const json& value, const std::string& path,
                    const TensorSpec& spec) {
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
  const size_t n = static_cast<size_t>(spec.shape[0]);
  Signal signal;
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
  for (size_t i = 0; i < n; ++i) {
    if (signal.low.present() && signal.high.present() && signal.low[i] > signal.high[i]) {
      p.fail(Parser::join(path, "low"), "low " + json(signal.low[i]).dump() + " > high " +
                                            json(signal.high[i]).dump() + " for '" +
                                            signal.names[i] + "'");
    }
    if (signal.max_delta.present() && !(signal.max_delta[i] > 0)) {
      p.fail(Parser::join(path, "max_delta"), "max_delta " + json(signal.max_delta[i]).dump() +
                                                  " for '" + signal.names[i] + "' is not > 0");
    }
  }
  return signal;
}

std::map<std::string, Signal> parse_signals(const Parser& p, const json& contract,
                                            const char* name,
                                            const std::vector<TensorSpec>& specs) {
  auto it = contract.find(name);
  if (it == contract.end() || it->is_null()) return {};
  const std::string path = Parser::join("contract", name);
  std::map<std::string, Signal> signals;
  for (const auto& [key, value] : p.object(*it, path).items()) {
    const std::string field = Parser::join(path, key.c_str());
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&](const TensorSpec& s) { return s.key == key; });
    if (spec == specs.end()) p.fail(field, "'" + key + "' is not one of the manifest's " + name);
    signals.emplace(key, parse_signal(p, value, field, *spec));
  }
  return signals;
}

nlohmann::ordered_json values_to_json(const SignalValues& values) {
  if (values.per_element) return values.values;
  return values.values[0];
}

}  // namespace

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
  contract.inputs = parse_signals(p, object, "inputs", m.inputs);
  contract.outputs = parse_signals(p, object, "outputs", m.outputs);
  auto metadata = object.find("metadata");
  if (metadata != object.end() && !metadata->is_null()) {
    for (const auto& [name, value] : p.object(*metadata, "contract.metadata").items()) {
      contract.metadata.emplace(name,
                                p.string(value, Parser::join("contract.metadata", name.c_str())));
    }
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
      entry["names"] = signal.names;
      entry["scale"] = values_to_json(signal.scale);
      entry["offset"] = values_to_json(signal.offset);
      if (signal.low.present()) entry["low"] = values_to_json(signal.low);
      if (signal.high.present()) entry["high"] = values_to_json(signal.high);
      if (signal.max_delta.present()) entry["max_delta"] = values_to_json(signal.max_delta);
      list[key] = entry;
    }
    out[section] = list;
  }
  out["metadata"] = contract.metadata;
  return out;
}

}  // namespace tdaot::detail
