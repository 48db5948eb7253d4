// tdaot-rehearse's loop (rehearsal.h): the contract's joints matched to the MJCF's, each
// observation term computed from mjData, PD torques every physics step, the policy every
// control_dt through tdaot::lite::Binding.
#include "tdaot_rehearse/rehearsal.h"

#include <mujoco/mujoco.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/lite.h"

namespace tdaot::rehearse {
namespace {

using Clock = std::chrono::steady_clock;

struct ModelDeleter {
  void operator()(mjModel* m) const { mj_deleteModel(m); }
};
struct DataDeleter {
  void operator()(mjData* d) const { mj_deleteData(d); }
};

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : ", '") + name + "'";
  return out.empty() ? "none" : out;
}

const char* name_of(const mjModel* m, int type, int id) {
  const char* name = mj_id2name(m, type, id);
  return name ? name : "(unnamed)";
}

// One contract joint in the MJCF: its qpos/qvel address and its motor.
struct Joint {
  std::string name;
  int id = -1;
  int qpos = 0;
  int dof = 0;
  int ctrl = 0;         // the motor's control index
  double gear = 1.0;    // force per unit control (gear * gain)
  double stiffness = 0.0;
  double damping = 0.0;
  double offset = 0.0;  // the joint output signal's offset (joint_pos_rel is q - offset)
  double scale = 1.0;   // the joint output signal's scale (raw = (target - offset) / scale)
};

// One observation term's place in its signal and the steps it keeps.
struct TermSlot {
  const Term* term = nullptr;
  size_t first = 0;            // index of its first element in the signal
  size_t size = 0;             // elements of one step
  int64_t history = 1;         // steps
  double period = 0.0;         // gait_phase
  std::vector<double> window;  // history * size, oldest first
  bool filled = false;         // the window holds a first value (after bind)
};

struct ObservationInput {
  std::string key;
  DType dtype = DType::Float32;
  void* data = nullptr;
  std::vector<std::string> names;
  std::vector<TermSlot> terms;
  std::vector<double> values;  // this step's raw values, in the signal's order
  // Whether the rehearsal writes each element: not the slots the package carries itself (a
  // last_action term, the older steps of a history term: docs/contract.md).
  std::vector<bool> written;
};

class Rehearsal {
 public:
  Rehearsal(const Options& options, std::ostream& log) : options_(options), log_(log) {}

  Summary run();

 private:
  void load_package();
  void load_robot();
  void match_joints();
  void plan_inputs();
  void compute_terms(double t);
  void step_policy(double t);
  void write_row(double t);

  const Options& options_;
  std::ostream& log_;
  std::optional<lite::Policy> policy_;
  std::optional<lite::Binding> binding_;
  const Contract* contract_ = nullptr;
  std::string joint_key_;
  const Signal* joint_signal_ = nullptr;
  DType action_dtype_ = DType::Float32;
  std::unique_ptr<mjModel, ModelDeleter> model_;
  std::unique_ptr<mjData, DataDeleter> data_;
  std::vector<Joint> joints_;
  int base_qpos_ = -1;  // the free joint's qpos address; -1: a fixed base
  int base_dof_ = -1;
  int base_body_ = -1;
  std::vector<ObservationInput> inputs_;
  std::vector<double> targets_;     // joint targets (the mapped action), held between policy steps
  std::vector<double> raw_action_;  // the raw action of the last policy step (last_action)
  std::string carried_action_;      // the package's next-step output of the raw action, if it carries one
  DType carried_dtype_ = DType::Float32;
  std::FILE* trajectory_ = nullptr;
  std::vector<char> row_;
};

// --- the package --------------------------------------------------------------------------------
void Rehearsal::load_package() {
  if (options_.runtime != "lite") {
    throw UsageError("--runtime " + options_.runtime +
                     ": this tdaot-rehearse runs the lite runtime only (--runtime lite)");
  }
  policy_.emplace(options_.package);
  const std::optional<Contract>& contract = policy_->contract();
  if (!contract) {
    throw UsageError("package '" + options_.package +
                     "' has no contract: tdaot-rehearse needs one whose input signal is made of "
                     "observation terms and whose joint output carries PD gains (tdaot.Contract, "
                     "docs/contract.md)");
  }
  contract_ = &*contract;

  // The joint output: the one joint terms name, else the first output signal with gains.
  for (const auto& [key, signal] : contract_->inputs) {
    for (const Term& term : signal.terms) {
      if (!is_joint_term(term.name)) continue;
      const std::string* output = contract_->joint_output(term);
      if (!output) {
        throw UsageError("contract input '" + key + "': term '" + term.name +
                         "' names no output signal of the contract");
      }
      if (!joint_key_.empty() && *output != joint_key_) {
        throw UsageError("contract input '" + key + "': term '" + term.name + "' refers to output '" +
                         *output + "' and another term to '" + joint_key_ +
                         "': tdaot-rehearse drives one joint output");
      }
      joint_key_ = *output;
    }
  }
  if (joint_key_.empty()) {
    for (const auto& [key, signal] : contract_->outputs) {
      if (signal.stiffness.present() || signal.damping.present()) {
        joint_key_ = key;
        break;
      }
    }
  }
  if (joint_key_.empty()) {
    if (contract_->outputs.empty()) {
      throw UsageError("package '" + options_.package +
                       "': its contract has no output signal: tdaot-rehearse needs the joint "
                       "targets' names and PD gains (stiffness, damping)");
    }
    joint_key_ = contract_->outputs.begin()->first;
  }
  joint_signal_ = &contract_->outputs.at(joint_key_);
  if (!joint_signal_->stiffness.present() || !joint_signal_->damping.present()) {
    throw UsageError("contract output '" + joint_key_ + "' carries no PD gains (" +
                     (joint_signal_->stiffness.present() ? "damping" : "stiffness") +
                     " missing): tdaot-rehearse applies tau = stiffness * (target - q) - damping * "
                     "dq; give the Signal stiffness= and damping=");
  }
  const Manifest& manifest = policy_->manifest();
  const auto out = manifest.output_index(joint_key_);
  if (!out) throw UsageError("contract output '" + joint_key_ + "' is not an output of the package");
  action_dtype_ = manifest.outputs[*out].dtype;
  if (action_dtype_ != DType::Float32 && action_dtype_ != DType::Float64) {
    throw UsageError("output '" + joint_key_ + "' is " + dtype_name(action_dtype_) +
                     "; joint targets must be float32 or float64");
  }
  const std::vector<int64_t> served = policy_->batch_sizes();
  if (std::find(served.begin(), served.end(), 1) == served.end()) {
    throw UsageError("package '" + options_.package +
                     "' has no batch-1 lite model (build it with batch 1, or the default "
                     "tuning, which specialises batch 1)");
  }
  lite::BindOptions bind;
  bind.envelope = options_.envelope;
  binding_.emplace(policy_->bind(1, bind));
}

// --- the robot ----------------------------------------------------------------------------------
void Rehearsal::load_robot() {
  char error[1024] = "";
  model_.reset(mj_loadXML(options_.mjcf.c_str(), nullptr, error, sizeof error));
  if (!model_) throw UsageError("cannot load the MJCF '" + options_.mjcf + "': " + error);
  data_.reset(mj_makeData(model_.get()));
  if (!data_) throw UsageError("MuJoCo could not allocate the data of '" + options_.mjcf + "'");
  const mjModel* m = model_.get();
  if (!options_.keyframe.empty()) {
    const int key = mj_name2id(m, mjOBJ_KEY, options_.keyframe.c_str());
    if (key < 0) throw UsageError("the MJCF has no keyframe '" + options_.keyframe + "'");
    mj_resetDataKeyframe(m, data_.get(), key);
  }
  for (int j = 0; j < m->njnt; ++j) {
    if (m->jnt_type[j] == mjJNT_FREE) {
      base_qpos_ = m->jnt_qposadr[j];
      base_dof_ = m->jnt_dofadr[j];
      base_body_ = m->jnt_bodyid[j];
      break;
    }
  }
  if (base_body_ < 0 && m->nbody > 1) base_body_ = 1;  // a fixed base: the first body
  mj_forward(m, data_.get());
}

void Rehearsal::match_joints() {
  const mjModel* m = model_.get();
  const std::vector<std::string>& names = joint_signal_->names;
  // Every contract joint is a one-degree-of-freedom joint of the MJCF...
  for (size_t i = 0; i < names.size(); ++i) {
    Joint joint;
    joint.name = names[i];
    joint.id = mj_name2id(m, mjOBJ_JOINT, names[i].c_str());
    if (joint.id < 0) {
      throw UsageError("contract joint '" + names[i] + "' (output '" + joint_key_ + "') is not a joint of the MJCF '" +
                       options_.mjcf + "'");
    }
    const int type = m->jnt_type[joint.id];
    if (type != mjJNT_HINGE && type != mjJNT_SLIDE) {
      throw UsageError("contract joint '" + names[i] + "' is a " + (type == mjJNT_FREE ? "free" : "ball") +
                       " joint in the MJCF; a joint target drives a hinge or slide joint");
    }
    joint.qpos = m->jnt_qposadr[joint.id];
    joint.dof = m->jnt_dofadr[joint.id];
    joint.stiffness = joint_signal_->stiffness[i];
    joint.damping = joint_signal_->damping[i];
    joint.offset = joint_signal_->offset[i];
    joint.scale = joint_signal_->scale[i];
    joints_.push_back(joint);
  }
  // ... driven by exactly one torque motor, and every actuator drives a contract joint.
  std::vector<int> motors(joints_.size(), -1);
  for (int a = 0; a < m->nactuator; ++a) {
    const int trn = m->actuator_trntype[a];
    const int target = m->actuator_trnid[2 * a];
    size_t index = joints_.size();
    if (trn == mjTRN_JOINT) {
      for (size_t i = 0; i < joints_.size(); ++i) {
        if (joints_[i].id == target) index = i;
      }
    }
    if (index == joints_.size()) {
      const std::string what = trn == mjTRN_JOINT ? std::string("joint '") + name_of(m, mjOBJ_JOINT, target) + "'"
                                                  : std::string("a non-joint transmission");
      throw UsageError("MJCF actuator '" + std::string(name_of(m, mjOBJ_ACTUATOR, a)) + "' drives " + what +
                       ", which is not one of the contract's joints (output '" + joint_key_ + "': " +
                       join(names) + ")");
    }
    if (motors[index] >= 0) {
      throw UsageError("MJCF joint '" + joints_[index].name + "' has two actuators ('" +
                       name_of(m, mjOBJ_ACTUATOR, motors[index]) + "', '" + name_of(m, mjOBJ_ACTUATOR, a) + "')");
    }
    if (m->actuator_biastype[a] != mjBIAS_NONE || m->actuator_dyntype[a] != mjDYN_NONE ||
        m->actuator_gaintype[a] != mjGAIN_FIXED || m->actuator_ctrlnum[a] != 1 ||
        m->actuator_outnum[a] != 1) {
      throw UsageError("MJCF actuator '" + std::string(name_of(m, mjOBJ_ACTUATOR, a)) +
                       "' is not a torque motor (a <motor>: fixed gain, no bias, no dynamics); "
                       "tdaot-rehearse applies the contract's PD gains itself");
    }
    motors[index] = a;
    Joint& joint = joints_[index];
    joint.ctrl = m->actuator_ctrladr[a];
    joint.gear = m->actuator_gear[6 * m->actuator_outadr[a]] * m->actuator_gainprm[mjNGAIN * a];
    if (joint.gear == 0.0) {
      throw UsageError("MJCF actuator '" + std::string(name_of(m, mjOBJ_ACTUATOR, a)) + "' has gear or gain 0");
    }
  }
  for (size_t i = 0; i < joints_.size(); ++i) {
    if (motors[i] < 0) {
      throw UsageError("contract joint '" + joints_[i].name + "' has no actuator in the MJCF '" +
                       options_.mjcf + "' (a <motor joint=\"" + joints_[i].name + "\"/>)");
    }
  }
}

// --- the observation terms ----------------------------------------------------------------------
void Rehearsal::plan_inputs() {
  const Manifest& manifest = policy_->manifest();
  // The next-step output of the recurrent state whose input is `prefix` or `prefix@...`.
  auto carried_state = [&](const std::string& prefix) -> const std::string* {
    if (!manifest.recurrent) return nullptr;
    for (const StatePair& pair : manifest.recurrent->state) {
      if (pair.input == prefix || pair.input.rfind(prefix + "@", 0) == 0) return &pair.output;
    }
    return nullptr;
  };
  for (const TensorSpec& spec : manifest.inputs) {
    if (manifest.recurrent) {
      if (spec.key == manifest.recurrent->is_init) continue;  // the binding sets it
      const auto& state = manifest.recurrent->state;
      if (std::any_of(state.begin(), state.end(), [&](const StatePair& p) { return p.input == spec.key; })) {
        continue;  // carried by the binding
      }
    }
    auto signal = contract_->inputs.find(spec.key);
    if (signal == contract_->inputs.end() || signal->second.terms.empty()) {
      throw UsageError("input '" + spec.key + "' is " +
                       (signal == contract_->inputs.end() ? "not in the contract"
                                                          : "a contract signal without observation terms") +
                       ": tdaot-rehearse computes only inputs declared as observation terms "
                       "(tdaot.Signal(terms=[...]))");
    }
    if (spec.dtype != DType::Float32 && spec.dtype != DType::Float64) {
      throw UsageError("input '" + spec.key + "' is " + dtype_name(spec.dtype) +
                       "; observation terms fill float32 or float64 inputs");
    }
    ObservationInput input;
    input.key = spec.key;
    input.dtype = spec.dtype;
    input.data = binding_->input_data(spec.key, spec.dtype);
    input.names = signal->second.names;
    size_t at = 0;
    for (const Term& term : signal->second.terms) {
      TermSlot slot;
      slot.term = &term;
      slot.first = at;
      slot.history = std::max<int64_t>(1, term.history);
      slot.size = static_cast<size_t>(term.size);
      const size_t expected = term_elements(term.name, joint_signal_->names).size();
      if (expected == 0) {
        throw UsageError("contract input '" + spec.key + "': term '" + term.name +
                         "' is not one tdaot-rehearse computes (" + join(term_vocabulary()) + ")");
      }
      if (slot.size != expected) {
        throw UsageError("contract input '" + spec.key + "': term '" + term.name + "' has " +
                         std::to_string(slot.size) + " elements per step; tdaot-rehearse computes " +
                         std::to_string(expected) + (is_joint_term(term.name) ? " (one per joint)" : ""));
      }
      if (term.name == "gait_phase") {
        auto period = term.params.find("period");
        if (period == term.params.end() || !(period->second > 0.0)) {
          throw UsageError("contract input '" + spec.key + "': term 'gait_phase' needs a period > 0 (seconds)");
        }
        slot.period = period->second;
      }
      slot.window.assign(slot.size * static_cast<size_t>(slot.history), 0.0);
      // A package built with the carried terms (the default) has them as recurrent state:
      // the caller then writes only the newest step of a history term and no last_action.
      const std::string* carried_la = carried_state("tdaot.last_action." + spec.key + "." + term.name);
      const std::string* carried_history = carried_state("tdaot.history." + spec.key + "." + term.name);
      const size_t older = slot.window.size() - slot.size;
      for (size_t i = 0; i < slot.window.size(); ++i) {
        input.written.push_back(!(carried_la || (carried_history && i < older)));
      }
      if (carried_la && carried_action_.empty()) {
        const std::string* output = contract_->joint_output(term);
        if (output && *output == joint_key_) {
          carried_action_ = *carried_la;
          carried_dtype_ = spec.dtype;  // the state has its observation's dtype
        }
      }
      at += slot.window.size();
      input.terms.push_back(std::move(slot));
    }
    const std::vector<int64_t> shape = binding_->input_shape(spec.key);
    if (shape.size() != 2 || static_cast<size_t>(shape[1]) != at || input.names.size() != at) {
      throw UsageError("input '" + spec.key + "': its terms hold " + std::to_string(at) +
                       " elements, the package's input " + std::to_string(shape.size() == 2 ? shape[1] : -1));
    }
    input.values.assign(at, 0.0);
    inputs_.push_back(std::move(input));
  }
  if (inputs_.empty()) {
    throw UsageError("package '" + options_.package +
                     "': no input is declared as observation terms in its contract "
                     "(tdaot.Signal(terms=[...])), so tdaot-rehearse cannot compute one");
  }
}

// The base frame: rotation of vectors from the world into the base (the conjugate quaternion).
void world_to_base(const double quat[4], const double world[3], double base[3]) {
  double conjugate[4];
  mju_negQuat(conjugate, quat);
  mju_rotVecQuat(base, world, conjugate);
}

void Rehearsal::compute_terms(double t) {
  const mjModel* m = model_.get();
  const mjData* d = data_.get();
  double quat[4] = {1.0, 0.0, 0.0, 0.0};
  if (base_qpos_ >= 0) {
    std::memcpy(quat, d->qpos + base_qpos_ + 3, sizeof quat);
  } else if (base_body_ > 0) {
    std::memcpy(quat, d->xquat + 4 * base_body_, sizeof quat);
  }
  double now[16];
  for (ObservationInput& input : inputs_) {
    for (TermSlot& slot : input.terms) {
      const std::string& name = slot.term->name;
      if (name == "base_ang_vel" || name == "base_lin_vel") {
        if (base_dof_ >= 0) {
          if (name == "base_ang_vel") {
            std::memcpy(now, d->qvel + base_dof_ + 3, 3 * sizeof(double));  // local frame already
          } else {
            world_to_base(quat, d->qvel + base_dof_, now);
          }
        } else if (base_body_ > 0) {
          double velocity[6];  // [angular, linear], in the body's frame
          mj_objectVelocity(m, d, mjOBJ_BODY, base_body_, velocity, 1);
          std::memcpy(now, velocity + (name == "base_ang_vel" ? 0 : 3), 3 * sizeof(double));
        } else {
          std::fill(now, now + 3, 0.0);
        }
      } else if (name == "projected_gravity") {
        const double down[3] = {0.0, 0.0, -1.0};
        world_to_base(quat, down, now);
      } else if (name == "velocity_commands") {
        std::copy(options_.command.begin(), options_.command.end(), now);
      } else if (name == "gait_phase") {
        const double phase = std::fmod(t, slot.period) / slot.period;
        now[0] = std::sin(2.0 * mjPI * phase);
        now[1] = std::cos(2.0 * mjPI * phase);
      }
      double* newest = slot.window.data() + slot.window.size() - slot.size;
      // Older steps move up one (oldest first); joint terms are written straight into place.
      if (slot.history > 1 && slot.filled) {
        std::memmove(slot.window.data(), slot.window.data() + slot.size,
                     (slot.window.size() - slot.size) * sizeof(double));
      }
      if (name == "joint_pos_rel") {
        for (size_t i = 0; i < joints_.size(); ++i) newest[i] = d->qpos[joints_[i].qpos] - joints_[i].offset;
      } else if (name == "joint_vel_rel") {
        for (size_t i = 0; i < joints_.size(); ++i) newest[i] = d->qvel[joints_[i].dof];
      } else if (name == "last_action") {
        std::copy(raw_action_.begin(), raw_action_.end(), newest);
      } else {
        std::copy(now, now + slot.size, newest);
      }
      if (!slot.filled) {  // after a start or reset: every older step is the first value
        for (int64_t k = 0; k + 1 < slot.history; ++k) {
          std::copy(newest, newest + slot.size, slot.window.data() + k * static_cast<int64_t>(slot.size));
        }
        slot.filled = true;
      }
      std::copy(slot.window.begin(), slot.window.end(), input.values.begin() + static_cast<long>(slot.first));
    }
    // The carried slots are the package's: left alone (the values above mirror them, for the
    // trajectory).
    if (input.dtype == DType::Float32) {
      float* out = static_cast<float*>(input.data);
      for (size_t i = 0; i < input.values.size(); ++i) {
        if (input.written[i]) out[i] = static_cast<float>(input.values[i]);
      }
    } else {
      double* out = static_cast<double*>(input.data);
      for (size_t i = 0; i < input.values.size(); ++i) {
        if (input.written[i]) out[i] = input.values[i];
      }
    }
  }
}

void Rehearsal::step_policy(double t) {
  compute_terms(t);
  binding_->run();
  const void* out = binding_->output_data(joint_key_, action_dtype_);
  for (size_t i = 0; i < joints_.size(); ++i) {
    const double target = action_dtype_ == DType::Float32 ? static_cast<const float*>(out)[i]
                                                          : static_cast<const double*>(out)[i];
    targets_[i] = target;
    // The raw action, recovered from the mapped one: exact unless a limit or max_delta held it.
    raw_action_[i] = (target - joints_[i].offset) / joints_[i].scale;
  }
  if (!carried_action_.empty()) {  // the package's own: exact
    const DType dtype = carried_dtype_;
    const void* raw = binding_->output_data(carried_action_, dtype);
    for (size_t i = 0; i < joints_.size(); ++i) {
      raw_action_[i] = dtype == DType::Float32 ? static_cast<const float*>(raw)[i]
                                               : static_cast<const double*>(raw)[i];
    }
  }
}

// --- the trajectory -----------------------------------------------------------------------------
void Rehearsal::write_row(double t) {
  const mjData* d = data_.get();
  row_.clear();
  char number[32];
  auto put = [&](double value) {
    const int n = std::snprintf(number, sizeof number, row_.empty() ? "%.9g" : ",%.9g", value);
    row_.insert(row_.end(), number, number + n);
  };
  put(t);
  const double* base = base_qpos_ >= 0 ? d->qpos + base_qpos_ : (base_body_ > 0 ? d->xpos + 3 * base_body_ : nullptr);
  const double* quat = base_qpos_ >= 0 ? d->qpos + base_qpos_ + 3 : (base_body_ > 0 ? d->xquat + 4 * base_body_ : nullptr);
  for (int i = 0; i < 3; ++i) put(base ? base[i] : 0.0);
  for (int i = 0; i < 4; ++i) put(quat ? quat[i] : (i == 0 ? 1.0 : 0.0));
  for (const Joint& joint : joints_) put(d->qpos[joint.qpos]);
  for (const ObservationInput& input : inputs_) {
    for (double value : input.values) put(value);
  }
  for (double value : raw_action_) put(value);
  for (double value : targets_) put(value);
  const Interventions& seen = binding_->interventions();
  put(static_cast<double>(seen.nonfinite));
  put(static_cast<double>(seen.rate_limited));
  row_.push_back('\n');
  if (std::fwrite(row_.data(), 1, row_.size(), trajectory_) != row_.size()) {
    throw Error("cannot write the trajectory '" + options_.trajectory + "'");
  }
}

// --- the loop -----------------------------------------------------------------------------------
Summary Rehearsal::run() {
  if (!(options_.seconds > 0.0) || !std::isfinite(options_.seconds)) {
    throw UsageError("--seconds must be > 0");
  }
  load_package();
  load_robot();
  match_joints();
  plan_inputs();

  const mjModel* m = model_.get();
  mjData* d = data_.get();
  Summary summary;
  summary.model = binding_->model();
  summary.joints = static_cast<int64_t>(joints_.size());
  for (const ObservationInput& input : inputs_) summary.observations += static_cast<int64_t>(input.values.size());
  summary.timestep = m->opt.timestep;
  const double ratio = contract_->control_dt / m->opt.timestep;
  const double steps = std::round(ratio);
  if (steps < 1.0 || std::abs(ratio - steps) > 1e-9 * std::max(1.0, ratio)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "the contract's control_dt %g s is not a whole number of the MJCF's physics steps "
                  "(timestep %g s: %.6g steps)",
                  contract_->control_dt, m->opt.timestep, ratio);
    throw UsageError(text);
  }
  summary.decimation = static_cast<int64_t>(steps);
  const int64_t control_steps = static_cast<int64_t>(std::ceil(options_.seconds / contract_->control_dt - 1e-9));

  targets_.assign(joints_.size(), 0.0);
  raw_action_.assign(joints_.size(), 0.0);
  for (size_t i = 0; i < joints_.size(); ++i) targets_[i] = joint_signal_->rest(i);

  log_ << "tdaot-rehearse: " << options_.package << " (lite model " << summary.model
       << (options_.envelope ? ", envelope on" : ", envelope off") << ") in " << options_.mjcf << " (MuJoCo "
       << mj_versionString() << ")\n";
  log_ << "  " << joints_.size() << " joints of output '" << joint_key_ << "' matched to their motors; base: "
       << (base_qpos_ >= 0 ? std::string("free joint of body '") + name_of(m, mjOBJ_BODY, base_body_) + "'"
                           : std::string("fixed"))
       << "\n";
  for (const ObservationInput& input : inputs_) {
    log_ << "  input '" << input.key << "' [" << input.values.size() << "]:";
    for (const TermSlot& slot : input.terms) {
      log_ << " " << slot.term->name;
      if (slot.history > 1) log_ << "x" << slot.history;
    }
    log_ << "\n";
  }
  char text[256];
  std::snprintf(text, sizeof text,
                "  physics step %g s, policy every %lld steps (control_dt %g s), command (%g, %g, %g), %g s\n",
                m->opt.timestep, static_cast<long long>(summary.decimation), contract_->control_dt,
                options_.command[0], options_.command[1], options_.command[2], options_.seconds);
  log_ << text;

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(nullptr, &std::fclose);
  if (!options_.trajectory.empty()) {
    file.reset(std::fopen(options_.trajectory.c_str(), "w"));
    if (!file) throw UsageError("cannot write the trajectory file '" + options_.trajectory + "'");
    trajectory_ = file.get();
    std::string header = "time,base_x,base_y,base_z,base_qw,base_qx,base_qy,base_qz";
    for (const Joint& joint : joints_) header += ",q." + joint.name;
    for (const ObservationInput& input : inputs_) {
      for (const std::string& name : input.names) header += ",obs." + input.key + "." + name;
    }
    for (const Joint& joint : joints_) header += ",raw." + joint.name;
    for (const Joint& joint : joints_) header += ",target." + joint.name;
    header += ",nonfinite,rate_limited\n";
    std::fputs(header.c_str(), trajectory_);
  }

  auto base_height = [&] {
    if (base_qpos_ >= 0) return d->qpos[base_qpos_ + 2];
    return base_body_ > 0 ? d->xpos[3 * base_body_ + 2] : 0.0;
  };
  auto base_xy = [&](double xy[2]) {
    const double* p = base_qpos_ >= 0 ? d->qpos + base_qpos_ : (base_body_ > 0 ? d->xpos + 3 * base_body_ : nullptr);
    xy[0] = p ? p[0] : 0.0;
    xy[1] = p ? p[1] : 0.0;
  };
  summary.floating_base = base_qpos_ >= 0;
  summary.start_height = summary.min_height = base_height();
  double start[2];
  base_xy(start);
  // The starting heading: the base's x axis in the world, flattened.
  double heading[2] = {1.0, 0.0};
  if (base_qpos_ >= 0) {
    double axis[3];
    const double x[3] = {1.0, 0.0, 0.0};
    mju_rotVecQuat(axis, x, d->qpos + base_qpos_ + 3);
    const double norm = std::hypot(axis[0], axis[1]);
    if (norm > 1e-9) heading[0] = axis[0] / norm, heading[1] = axis[1] / norm;
  }
  bool fallen = false;
  double policy_us = 0.0, policy_max = 0.0;

  const auto started = Clock::now();
  for (int64_t step = 0; step < control_steps; ++step) {
    const double t = d->time;
    const auto before = Clock::now();
    step_policy(t);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - before).count();
    policy_us += us;
    policy_max = std::max(policy_max, us);
    if (trajectory_) write_row(t);
    for (int64_t k = 0; k < summary.decimation; ++k) {
      for (const Joint& joint : joints_) {
        const double tau = joint.stiffness * (targets_[static_cast<size_t>(&joint - joints_.data())] -
                                              d->qpos[joint.qpos]) -
                           joint.damping * d->qvel[joint.dof];
        d->ctrl[joint.ctrl] = tau / joint.gear;
      }
      mj_step(m, d);
    }
    ++summary.control_steps;
    summary.physics_steps += summary.decimation;
    const double height = base_height();
    summary.min_height = std::min(summary.min_height, height);
    if (summary.floating_base) {
      double up[3];  // gravity in the base frame: z > -0.5 is a tilt of more than 60 degrees
      const double down[3] = {0.0, 0.0, -1.0};
      world_to_base(d->qpos + base_qpos_ + 3, down, up);
      const bool down_now = height < options_.fall_fraction * summary.start_height || up[2] > -0.5;
      if (down_now && !fallen) ++summary.falls;
      fallen = down_now;
    }
  }
  summary.wall_s = std::chrono::duration<double>(Clock::now() - started).count();
  summary.simulated_s = d->time;
  summary.final_height = base_height();
  double end[2];
  base_xy(end);
  summary.distance = std::hypot(end[0] - start[0], end[1] - start[1]);
  summary.forward = (end[0] - start[0]) * heading[0] + (end[1] - start[1]) * heading[1];
  summary.mean_forward_speed = summary.simulated_s > 0 ? summary.forward / summary.simulated_s : 0.0;
  summary.interventions = binding_->interventions();
  summary.policy_us_mean = summary.control_steps ? policy_us / static_cast<double>(summary.control_steps) : 0.0;
  summary.policy_us_max = policy_max;
  summary.real_time_factor = summary.wall_s > 0 ? summary.simulated_s / summary.wall_s : 0.0;
  if (file && std::fflush(file.get()) != 0) throw Error("cannot write the trajectory '" + options_.trajectory + "'");
  return summary;
}

}  // namespace

Summary run(const Options& options, std::ostream& log) {
  Rehearsal rehearsal(options, log);
  return rehearsal.run();
}

std::string format_summary(const Summary& s) {
  char text[1024];
  std::ostringstream out;
  std::snprintf(text, sizeof text, "simulated      %.2f s (%lld physics steps of %g s, %lld policy steps)\n",
                s.simulated_s, static_cast<long long>(s.physics_steps), s.timestep,
                static_cast<long long>(s.control_steps));
  out << text;
  if (s.floating_base) {
    std::snprintf(text, sizeof text,
                  "distance       %.3f m (forward %.3f m), mean forward speed %.3f m/s\n"
                  "base height    min %.3f m, end %.3f m (start %.3f m)\n"
                  "falls          %lld\n",
                  s.distance, s.forward, s.mean_forward_speed, s.min_height, s.final_height, s.start_height,
                  static_cast<long long>(s.falls));
  } else {
    std::snprintf(text, sizeof text, "base           fixed (no free joint): no distance, height or falls\n");
  }
  out << text;
  std::snprintf(text, sizeof text,
                "interventions  %lld non-finite, %lld rate-limited\n"
                "real time      %.3f s wall, %.1fx real time (policy %.1f us per step, max %.1f us)\n",
                static_cast<long long>(s.interventions.nonfinite),
                static_cast<long long>(s.interventions.rate_limited), s.wall_s, s.real_time_factor,
                s.policy_us_mean, s.policy_us_max);
  out << text;
  return out.str();
}

std::string summary_json(const Summary& s) {
  char text[1536];
  std::snprintf(text, sizeof text,
                "{\"simulated_s\": %.9g, \"physics_steps\": %lld, \"control_steps\": %lld, \"decimation\": %lld, "
                "\"timestep\": %.9g, \"floating_base\": %s, \"start_height\": %.9g, \"min_height\": %.9g, "
                "\"final_height\": %.9g, \"distance\": %.9g, \"forward\": %.9g, \"mean_forward_speed\": %.9g, "
                "\"falls\": %lld, \"nonfinite\": %lld, \"rate_limited\": %lld, \"wall_s\": %.9g, "
                "\"real_time_factor\": %.9g, \"policy_us_mean\": %.9g, \"policy_us_max\": %.9g, "
                "\"joints\": %lld, \"observations\": %lld, \"model\": \"%s\"}",
                s.simulated_s, static_cast<long long>(s.physics_steps), static_cast<long long>(s.control_steps),
                static_cast<long long>(s.decimation), s.timestep, s.floating_base ? "true" : "false",
                s.start_height, s.min_height, s.final_height, s.distance, s.forward, s.mean_forward_speed,
                static_cast<long long>(s.falls), static_cast<long long>(s.interventions.nonfinite),
                static_cast<long long>(s.interventions.rate_limited), s.wall_s, s.real_time_factor,
                s.policy_us_mean, s.policy_us_max, static_cast<long long>(s.joints),
                static_cast<long long>(s.observations), s.model.c_str());
  return text;
}

}  // namespace tdaot::rehearse
