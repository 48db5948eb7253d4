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
//
// An input signal may be a concatenation of observation terms (Term: what each element is, in
// the vocabulary of docs/contract.md, with its own map, clip and history), and an output signal
// of joint targets may carry PD gains (stiffness, damping) for a service or rehearsal to apply.
// The manifest parser checks both and derives the signal's names and per-element map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
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

// One observation term of an input Signal (docs/contract.md, "Observation terms"): a physical
// quantity of the vocabulary (base_lin_vel, base_ang_vel, projected_gravity, velocity_commands,
// joint_pos_rel, joint_vel_rel, last_action, gait_phase), its own map and clip, and its history.
// One step of the term has `size` elements; with history K the signal holds the last K steps,
// oldest first. value = clip(raw * scale + offset, low, high) per element, as for a Signal;
// scale, offset, low and high are one number or `size` numbers (the same for every step).
struct Term {
  std::string name;
  SignalValues scale{{1.0}, false};
  SignalValues offset{{0.0}, false};
  SignalValues low;   // absent: no lower clip
  SignalValues high;  // absent: no upper clip
  int64_t history = 1;                   // steps kept, >= 1 (newest last)
  std::map<std::string, double> params;  // the term's parameters (gait_phase: "period", seconds)
  std::string output;  // joint terms: the joint output signal's key; empty: the first (by key)
  int64_t size = 0;    // elements of one step, derived when the contract is parsed
};

// One manifest key of per-sample shape [n], its n elements named.
//
// An input Signal may instead be a concatenation of `terms` (in order; each term's steps oldest
// first). Then `names` are derived ("base_ang_vel.x", "joint_pos_rel.left_knee_joint", and for
// older steps of a term with history K "joint_pos_rel.left_knee_joint@-1" .. "@-(K-1)"), and
// scale, offset, low and high hold each element's value from its term (low/high: -inf/+inf for
// the elements of terms without one; absent when no term clips).
struct Signal {
  std::vector<std::string> names;  // n unique names, in the policy's order
  SignalValues scale{{1.0}, false};
  SignalValues offset{{0.0}, false};
  SignalValues low;        // absent: no lower clip
  SignalValues high;       // absent: no upper clip
  SignalValues max_delta;  // absent: no rate limit; outputs only in effect (Session)
  std::vector<Term> terms;  // inputs only; empty: a plain signal of `names`
  // PD gains of an output signal of joint targets (one number or one per joint; absent: none).
  // Carried for a service or the rehearsal to apply; the runner does not.
  SignalValues stiffness;
  SignalValues damping;
  // How a signal of terms lays out history (docs/contract.md): "term-major", the only layout,
  // each term's steps together, oldest first, term after term (Isaac Lab's and unitree_rl_lab's
  // deploy code). Stated so that a frame-major file is refused by name rather than misread.
  std::string history_layout = "term-major";

  // offset clipped to [low, high] for element i: what an output holds before the first step.
  double rest(size_t i) const;
};

// The supervisor of a joint output signal (docs/contract.md, "Supervisor"): what the runner does
// to the joint targets between the policy and the motors, on every way to run (Session, both
// Bindings), allocation-free. Run by tdaot/supervisor.h's rules:
// - soft start: for blend_seconds after activation or a reset, the targets move from the
//   measured joint positions (the input's joint_pos_rel term + the signal's offset) to the
//   policy's, each at most blend_max_velocity rad/s; the stiffness and damping scale ramps from
//   start_gain_fraction to 1;
// - limits: every target clipped to [low + margin, high - margin], and while running or blending
//   within max_torque / stiffness of the measured position (the PD's spring torque at full gains);
// - out of domain: a measured joint velocity (joint_vel_rel) over max_velocity, a base tilt
//   (from projected_gravity) over max_tilt, a non-finite input or output of the row, or
//   max_rate_limited_steps consecutive rate-limited steps switch the row to `fallback` ("hold":
//   the last safe targets; "damp": the measured positions, stiffness scale 0) until reset().
struct Supervisor {
  std::string output;             // the joint output signal's key; empty: the first output signal
  double blend_seconds = 0.0;     // soft start length, >= 0; 0: none
  SignalValues blend_max_velocity;  // rad/s per joint during the soft start; absent: no cap
  double start_gain_fraction = 1.0;  // the gain scale at activation, in [0, 1]
  SignalValues low;               // joint range per joint (rad); absent: no lower limit
  SignalValues high;              // absent: no upper limit
  double margin = 0.0;            // kept inside [low, high], >= 0
  SignalValues max_velocity;      // measured |dq| cap per joint, rad/s, > 0; absent: unchecked
  SignalValues max_torque;        // spring torque cap per joint, N m, > 0; absent: no cap
  double max_tilt = 0.0;          // base tilt cap (rad, in (0, pi]); 0: unchecked
  int64_t max_rate_limited_steps = 0;  // consecutive rate-limited steps, >= 1; 0: unchecked
  std::string fallback = "hold";  // "hold" or "damp"
};

// The fallbacks a Supervisor may name, in the order of docs/contract.md.
const std::vector<std::string>& supervisor_fallbacks();

struct Contract {
  double control_dt = 0.0;                      // seconds per control step, > 0
  std::map<std::string, Signal> inputs;         // by manifest input key
  std::map<std::string, Signal> outputs;        // by manifest output key
  std::map<std::string, std::string> metadata;  // free-form ("robot": "go2", ...)
  std::optional<Supervisor> supervisor;         // absent: targets go out as the policy gives them

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

  // The key of the joint output signal a joint term (joint_pos_rel, joint_vel_rel, last_action)
  // refers to: term.output when given, else the first output signal by key; nullptr when the
  // contract has no output signal (the parser refuses such a term).
  const std::string* joint_output(const Term& term) const;

  // Checks `supervisor` against this contract (the parser's rules, also a bind-time override's):
  // throws ContractError "contract supervisor: field 'low': ..." naming the field and value.
  void check_supervisor(const Supervisor& supervisor) const;
};

// The observation-term vocabulary, in the order of docs/contract.md.
const std::vector<std::string>& term_vocabulary();

// The element names of one step of term `name` ("x", "sin", or the joint names `joints` for
// joint terms); empty for an unknown name.
std::vector<std::string> term_elements(const std::string& name,
                                       const std::vector<std::string>& joints);

// Whether term `name` has one element per joint of the joint output signal.
bool is_joint_term(const std::string& name);

}  // namespace tdaot
