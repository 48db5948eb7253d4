// tdaot-rehearse's MuJoCo adapter (mujoco_robot.h): matching, reading the state, driving torques.
#include "tdaot_rehearse/mujoco_robot.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tdaot_rehearse/rehearsal.h"

namespace tdaot::rehearse {
namespace {

const char* name_of(const mjModel* m, int type, int id) {
  const char* name = mj_id2name(m, type, id);
  return name ? name : "(unnamed)";
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : ", '") + name + "'";
  return out.empty() ? "none" : out;
}

}  // namespace

MujocoRobot::MujocoRobot(const std::string& mjcf, const std::string& keyframe) : path_(mjcf) {
  char error[1024] = "";
  model_.reset(mj_loadXML(mjcf.c_str(), nullptr, error, sizeof error));
  if (!model_) throw UsageError("cannot load the MJCF '" + mjcf + "': " + error);
  data_.reset(mj_makeData(model_.get()));
  if (!data_) throw UsageError("MuJoCo could not allocate the data of '" + mjcf + "'");
  const mjModel* m = model_.get();
  if (!keyframe.empty()) {
    const int key = mj_name2id(m, mjOBJ_KEY, keyframe.c_str());
    if (key < 0) throw UsageError("the MJCF has no keyframe '" + keyframe + "'");
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

void MujocoRobot::match(const terms::JointOutput& joints) {
  const mjModel* m = model_.get();
  // Every contract joint is a one-degree-of-freedom joint of the MJCF...
  for (const std::string& name : joints.names) {
    Joint joint;
    joint.id = mj_name2id(m, mjOBJ_JOINT, name.c_str());
    if (joint.id < 0) {
      throw UsageError("contract joint '" + name + "' (output '" + joints.key + "') is not a joint of the MJCF '" +
                       path_ + "'");
    }
    const int type = m->jnt_type[joint.id];
    if (type != mjJNT_HINGE && type != mjJNT_SLIDE) {
      throw UsageError("contract joint '" + name + "' is a " + (type == mjJNT_FREE ? "free" : "ball") +
                       " joint in the MJCF; a joint target drives a hinge or slide joint");
    }
    joint.qpos = m->jnt_qposadr[joint.id];
    joint.dof = m->jnt_dofadr[joint.id];
    joints_.push_back(joint);
  }
  // ... driven by exactly one torque motor, and every actuator drives a contract joint.
  std::vector<int> motors(joints_.size(), -1);
  for (int a = 0; a < m->nactuator; ++a) {
    const int trn = m->actuator_trntype[a];
    const int target = m->actuator_trnid[2 * a];
    size_t index = joints_.size();
    for (size_t i = 0; trn == mjTRN_JOINT && i < joints_.size(); ++i) {
      if (joints_[i].id == target) index = i;
    }
    if (index == joints_.size()) {
      const std::string what = trn == mjTRN_JOINT ? std::string("joint '") + name_of(m, mjOBJ_JOINT, target) + "'"
                                                  : std::string("a non-joint transmission");
      throw UsageError("MJCF actuator '" + std::string(name_of(m, mjOBJ_ACTUATOR, a)) + "' drives " + what +
                       ", which is not one of the contract's joints (output '" + joints.key +
                       "': " + join(joints.names) + ")");
    }
    if (motors[index] >= 0) {
      throw UsageError("MJCF joint '" + joints.names[index] + "' has two actuators ('" +
                       name_of(m, mjOBJ_ACTUATOR, motors[index]) + "', '" + name_of(m, mjOBJ_ACTUATOR, a) + "')");
    }
    if (m->actuator_biastype[a] != mjBIAS_NONE || m->actuator_dyntype[a] != mjDYN_NONE ||
        m->actuator_gaintype[a] != mjGAIN_FIXED || m->actuator_ctrlnum[a] != 1 || m->actuator_outnum[a] != 1) {
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
      throw UsageError("contract joint '" + joints.names[i] + "' has no actuator in the MJCF '" + path_ +
                       "' (a <motor joint=\"" + joints.names[i] + "\"/>)");
    }
  }
  state_.joint_pos.assign(joints_.size(), 0.0);
  state_.joint_vel.assign(joints_.size(), 0.0);
}

const terms::RobotState& MujocoRobot::read(const std::array<double, 3>& command) {
  const mjModel* m = model_.get();
  const mjData* d = data_.get();
  state_.time = d->time;
  state_.command = command;
  state_.base_quat = base_orientation();
  if (base_dof_ >= 0) {
    std::memcpy(state_.base_lin_vel.data(), d->qvel + base_dof_, 3 * sizeof(double));      // world
    std::memcpy(state_.base_ang_vel.data(), d->qvel + base_dof_ + 3, 3 * sizeof(double));  // local already
  } else if (base_body_ > 0) {
    double velocity[6];  // [angular, linear], in the body's frame
    mj_objectVelocity(m, d, mjOBJ_BODY, base_body_, velocity, 1);
    std::memcpy(state_.base_ang_vel.data(), velocity, 3 * sizeof(double));
    // The terms rotate base_lin_vel from the world: give it in the world.
    double world[3];
    mju_rotVecQuat(world, velocity + 3, d->xquat + 4 * base_body_);
    std::memcpy(state_.base_lin_vel.data(), world, 3 * sizeof(double));
  }
  for (size_t i = 0; i < joints_.size(); ++i) {
    state_.joint_pos[i] = d->qpos[joints_[i].qpos];
    state_.joint_vel[i] = d->qvel[joints_[i].dof];
  }
  return state_;
}

void MujocoRobot::step(const double* tau) {
  for (size_t i = 0; i < joints_.size(); ++i) data_->ctrl[joints_[i].ctrl] = tau[i] / joints_[i].gear;
  mj_step(model_.get(), data_.get());
}

void MujocoRobot::applied_torques(const double* tau, double* applied) {
  for (size_t i = 0; i < joints_.size(); ++i) data_->ctrl[joints_[i].ctrl] = tau[i] / joints_[i].gear;
  mj_forward(model_.get(), data_.get());
  for (size_t i = 0; i < joints_.size(); ++i) applied[i] = data_->qfrc_actuator[joints_[i].dof];
}

double MujocoRobot::lowest_point() const {
  const mjModel* m = model_.get();
  const mjData* d = data_.get();
  double lowest = std::numeric_limits<double>::infinity();
  for (int g = 0; g < m->ngeom; ++g) {
    if (m->geom_bodyid[g] == 0 || (m->geom_contype[g] == 0 && m->geom_conaffinity[g] == 0)) continue;
    // The geometry's box (geom_aabb: centre and half sizes in its frame), its lowest corner.
    const double* box = m->geom_aabb + 6 * g;
    const double* rotation = d->geom_xmat + 9 * g;
    double centre = d->geom_xpos[3 * g + 2];
    double reach = 0.0;
    for (int k = 0; k < 3; ++k) {
      centre += rotation[6 + k] * box[k];
      reach += std::abs(rotation[6 + k]) * box[3 + k];
    }
    lowest = std::min(lowest, centre - reach);
  }
  return lowest;
}

void MujocoRobot::pose(const std::vector<double>& q) {
  const mjModel* m = model_.get();
  mj_forward(m, data_.get());
  const double before = lowest_point();
  for (size_t i = 0; i < joints_.size(); ++i) {
    data_->qpos[joints_[i].qpos] = q[i];
    data_->qvel[joints_[i].dof] = 0.0;
  }
  mj_forward(m, data_.get());
  if (base_qpos_ >= 0 && std::isfinite(before)) {
    data_->qpos[base_qpos_ + 2] += before - lowest_point();
    mj_forward(m, data_.get());
  }
}

void MujocoRobot::push(const std::array<double, 3>& velocity) {
  if (base_dof_ < 0) throw UsageError("a push moves the base, but the MJCF's robot has no free joint");
  for (int k = 0; k < 3; ++k) data_->qvel[base_dof_ + k] += velocity[static_cast<size_t>(k)];
}

std::array<double, 2> MujocoRobot::joint_range(size_t i) const {
  const int j = joints_[i].id;
  if (!model_->jnt_limited[j]) {
    return {-std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()};
  }
  return {model_->jnt_range[2 * j], model_->jnt_range[2 * j + 1]};
}

std::vector<int> MujocoRobot::other_qpos() const {
  std::vector<bool> held(static_cast<size_t>(model_->nq), false);
  if (base_qpos_ >= 0) std::fill(held.begin() + base_qpos_, held.begin() + base_qpos_ + 7, true);
  for (const Joint& joint : joints_) held[static_cast<size_t>(joint.qpos)] = true;
  std::vector<int> others;
  for (int a = 0; a < model_->nq; ++a) {
    if (!held[static_cast<size_t>(a)]) others.push_back(a);
  }
  return others;
}

std::string MujocoRobot::base_name() const {
  return base_qpos_ >= 0 ? std::string("free joint of body '") + name_of(model_.get(), mjOBJ_BODY, base_body_) + "'"
                         : std::string("fixed");
}

std::array<double, 3> MujocoRobot::base_position() const {
  const double* p = base_qpos_ >= 0 ? data_->qpos + base_qpos_ : (base_body_ > 0 ? data_->xpos + 3 * base_body_ : nullptr);
  return p ? std::array<double, 3>{p[0], p[1], p[2]} : std::array<double, 3>{0.0, 0.0, 0.0};
}

std::array<double, 4> MujocoRobot::base_orientation() const {
  const double* q = base_qpos_ >= 0 ? data_->qpos + base_qpos_ + 3 : (base_body_ > 0 ? data_->xquat + 4 * base_body_ : nullptr);
  return q ? std::array<double, 4>{q[0], q[1], q[2], q[3]} : std::array<double, 4>{1.0, 0.0, 0.0, 0.0};
}

}  // namespace tdaot::rehearse
