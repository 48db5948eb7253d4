// The robot deployment contract a package carries (the manifest's optional "contract",
// tdaot.Contract in Python): the control period, and for some inputs and outputs of per-sample
// shape [n] the name of each element and how raw values map to what the other side sees:
//
//   value = clip(raw * scale + offset, low, high)
//
// For an input, raw is what the caller passes and value what the policy sees; for an output,
// raw is what the policy computes and value what the caller gets. The affine map and the clip
// are compiled into the package, so every run path applies them; max_delta (the most an output
// element may move per step) and the finiteness guard are applied by a tdaot::Session.
//
// A service checks its own element order against the policy's with order(): a service that
// disagrees with the artifact is refused (ContractError) instead of driving the wrong joint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tdaot {

// A per-element parameter of a Signal: absent, one value for every element, or one per element.
struct SignalValues {
  std::vector<double> values;  // empty: absent
  bool per_element = false;    // given as a list of n values rather than one number

  bool present() const noexcept { return !values.empty(); }
  // The value of element i (of a present parameter).
  double operator[](size_t i) const { return per_element ? values[i] : values[0]; }
};

// One manifest key of per-sample shape [n], its n elements named.
struct Signal {
  std::vector<std::string> names;  // n unique names, in the policy's order
  SignalValues scale{{1.0}, false};
  SignalValues offset{{0.0}, false};
  SignalValues low;        // absent: no lower clip
  SignalValues high;       // absent: no upper clip
  SignalValues max_delta;  // absent: no rate limit; outputs only in effect (Session)

  // offset clipped to [low, high] for element i: what an output holds before the first step.
  double rest(size_t i) const;
};

struct Contract {
  double control_dt = 0.0;                      // seconds per control step, > 0
  std::map<std::string, Signal> inputs;         // by manifest input key
  std::map<std::string, Signal> outputs;        // by manifest output key
  std::map<std::string, std::string> metadata;  // free-form ("robot": "go2", ...)

  // The signal of `key`: an input's, else an output's; nullptr when the contract has none.
  const Signal* signal(const std::string& key) const;

  // For a service's own element names of `key`: result[i] is the policy's index of names[i].
  // So output[:, result] is the policy's output in the service's order, and
  // input[:, result] = service_values puts the service's values in the policy's order.
  // Throws ContractError when the contract has no signal `key`, or when `names` is not a
  // permutation of the policy's names (naming the first missing and the first extra name).
  std::vector<int64_t> order(const std::string& key, const std::vector<std::string>& names) const;

  // The contract as indented text lines, for inspect tools and services.
  std::string describe() const;
};

// Contract::order on one signal's names; `key` is for messages.
std::vector<int64_t> order_names(const std::string& key, const std::vector<std::string>& policy,
                                 const std::vector<std::string>& names);

}  // namespace tdaot
