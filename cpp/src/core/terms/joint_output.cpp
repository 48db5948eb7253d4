// tdaot/terms.h: the joint output a contract's joint terms drive, its PD torques, and the
// rotation of world-frame vectors into the base frame. Torch-free, simulator-free.
#include <algorithm>
#include <string>

#include "tdaot/errors.h"
#include "tdaot/service/terms.h"

namespace tdaot::terms {

void JointOutput::pd_torques(const double* target, const double* q, const double* dq, double* tau) const {
  for (size_t i = 0; i < names.size(); ++i) tau[i] = stiffness[i] * (target[i] - q[i]) - damping[i] * dq[i];
}

void JointOutput::pd_torques(const double* target, const double* q, const double* dq, double* tau,
                             double gain_scale, double damping_scale) const {
  for (size_t i = 0; i < names.size(); ++i) {
    tau[i] = gain_scale * stiffness[i] * (target[i] - q[i]) - damping_scale * damping[i] * dq[i];
  }
}

JointOutput joint_output(const Contract& contract, bool require_gains) {
  // The one output the joint terms name...
  std::string key;
  for (const auto& [input, signal] : contract.inputs) {
    for (const Term& term : signal.terms) {
      if (!is_joint_term(term.name)) continue;
      const std::string* output = contract.joint_output(term);
      if (!output) {
        throw ContractError(input, "contract input '" + input + "': term '" + term.name +
                                       "' names no output signal of the contract");
      }
      if (!key.empty() && *output != key) {
        throw ContractError(input, "contract input '" + input + "': term '" + term.name + "' refers to output '" +
                                       *output + "' and another term to '" + key +
                                       "': one joint output drives the joints");
      }
      key = *output;
    }
  }
  // ... else the first with gains, else the first.
  for (const auto& [output, signal] : contract.outputs) {
    if (key.empty() && (signal.stiffness.present() || signal.damping.present())) key = output;
  }
  if (key.empty()) {
    if (contract.outputs.empty()) {
      throw ContractError("", "the contract has no output signal: the joint targets' names and PD gains "
                              "(stiffness, damping) are needed");
    }
    key = contract.outputs.begin()->first;
  }
  const Signal& signal = contract.outputs.at(key);
  if (require_gains && (!signal.stiffness.present() || !signal.damping.present())) {
    throw ContractError(key, "contract output '" + key + "' carries no PD gains (" +
                                 (signal.stiffness.present() ? "damping" : "stiffness") +
                                 " missing): the PD torques tau = stiffness * (target - q) - damping * dq "
                                 "need them; give the Signal stiffness= and damping=");
  }
  JointOutput joints;
  joints.key = key;
  joints.names = signal.names;
  for (size_t i = 0; i < signal.names.size(); ++i) {
    joints.offset.push_back(signal.offset[i]);
    joints.scale.push_back(signal.scale[i]);
    joints.rest.push_back(signal.rest(i));
    joints.stiffness.push_back(signal.stiffness.present() ? signal.stiffness[i] : 0.0);
    joints.damping.push_back(signal.damping.present() ? signal.damping[i] : 0.0);
  }
  return joints;
}

std::array<double, 3> world_to_base(const std::array<double, 4>& quat, const std::array<double, 3>& v) {
  // v rotated by the conjugate quaternion (w, -x, -y, -z): v + 2 u x (w v + u x v), u = -(x, y, z).
  const double w = quat[0], x = -quat[1], y = -quat[2], z = -quat[3];
  if (x == 0.0 && y == 0.0 && z == 0.0) return v;
  const double t0 = w * v[0] + y * v[2] - z * v[1];
  const double t1 = w * v[1] + z * v[0] - x * v[2];
  const double t2 = w * v[2] + x * v[1] - y * v[0];
  return {v[0] + 2.0 * (y * t2 - z * t1), v[1] + 2.0 * (z * t0 - x * t2), v[2] + 2.0 * (x * t1 - y * t0)};
}

}  // namespace tdaot::terms
