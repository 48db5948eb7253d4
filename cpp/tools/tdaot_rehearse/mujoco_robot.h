// tdaot-rehearse's MuJoCo adapter: an MJCF robot whose joints and torque motors are matched to a
// contract's joint output, read into a tdaot::terms::RobotState and driven by joint torques.
// The base is the MJCF's first free joint; a robot without one has a fixed base (base terms from
// the first body; no height or falls).
#pragma once

#include <mujoco/mujoco.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/service/terms.h"

namespace tdaot::rehearse {

class MujocoRobot {
 public:
  // Loads `mjcf` (at `keyframe` when not empty). Throws UsageError when it does not load or has
  // no such keyframe.
  MujocoRobot(const std::string& mjcf, const std::string& keyframe);

  // Matches each joint of `joints` to a hinge or slide joint of the MJCF driven by exactly one
  // torque <motor>, and every actuator to one of them. Throws UsageError naming the joint or
  // actuator at fault.
  void match(const terms::JointOutput& joints);

  // The state the terms are computed from (joints in the contract's order), at `command`.
  const terms::RobotState& read(const std::array<double, 3>& command);
  // Applies one torque per contract joint and advances one physics step.
  void step(const double* tau);
  // The torque the simulator applies to contract joint i for commanded torques `tau` (after the
  // actuators' and joints' force ranges): MuJoCo's actuator force on the joint, computed for
  // the current state without advancing it (into `applied`, one per joint).
  void applied_torques(const double* tau, double* applied);
  // The actuator torque on contract joint i in the last physics step.
  double last_torque(size_t i) const { return data_->qfrc_actuator[joints_[i].dof]; }
  // Puts the contract joints at `q` (at rest) and moves the base vertically so that its lowest
  // collision geometry stays where it was (a crouch keeps the feet on the ground).
  void pose(const std::vector<double>& q);
  // Adds `velocity` (m/s, world frame) to the base's linear velocity: a push. UsageError for a
  // fixed base.
  void push(const std::array<double, 3>& velocity);
  // Contract joint i's range in the MJCF; (-inf, inf) when it is not limited.
  std::array<double, 2> joint_range(size_t i) const;
  double joint_velocity(size_t i) const { return data_->qvel[joints_[i].dof]; }

  double timestep() const { return model_->opt.timestep; }
  double time() const { return data_->time; }
  bool floating_base() const { return base_qpos_ >= 0; }
  std::string base_name() const;
  // The lowest point of the collision geometry of every body but the world's (z, m).
  double lowest_point() const;
  // The base's position and orientation (w, x, y, z) in the world.
  std::array<double, 3> base_position() const;
  std::array<double, 4> base_orientation() const;
  double joint_position(size_t i) const { return data_->qpos[joints_[i].qpos]; }
  // The qpos addresses neither the free base joint nor a contract joint holds (passive joints),
  // in address order (after match): with the base and joint positions, the whole qpos.
  std::vector<int> other_qpos() const;
  double qpos(int address) const { return data_->qpos[address]; }
  const std::string& path() const { return path_; }

 private:
  struct ModelDeleter {
    void operator()(mjModel* m) const { mj_deleteModel(m); }
  };
  struct DataDeleter {
    void operator()(mjData* d) const { mj_deleteData(d); }
  };
  struct Joint {
    int id = -1;
    int qpos = 0;
    int dof = 0;
    int ctrl = 0;
    double gear = 1.0;  // force per unit control (gear * gain)
  };

  std::string path_;
  std::unique_ptr<mjModel, ModelDeleter> model_;
  std::unique_ptr<mjData, DataDeleter> data_;
  std::vector<Joint> joints_;
  int base_qpos_ = -1;  // the free joint's qpos address; -1: a fixed base
  int base_dof_ = -1;
  int base_body_ = -1;
  terms::RobotState state_;
};

}  // namespace tdaot::rehearse
