// tdaot-rehearse's trajectory file (trajectory.h).
#include "tdaot_rehearse/trajectory.h"

#include <cstring>

#include "tdaot/errors.h"
#include "tdaot_rehearse/rehearsal.h"

namespace tdaot::rehearse {

Trajectory::Trajectory(const std::string& path, const terms::JointOutput& joints,
                       const terms::Observations& observations, const MujocoRobot& robot)
    : path_(path), others_(robot.other_qpos()) {
  file_.reset(std::fopen(path.c_str(), "w"));
  if (!file_) throw UsageError("cannot write the trajectory file '" + path + "'");
  std::string header = "time,base_x,base_y,base_z,base_qw,base_qx,base_qy,base_qz";
  for (const std::string& joint : joints.names) header += ",q." + joint;
  for (const terms::ObservationInput& input : observations.inputs()) {
    for (const std::string& name : input.names) header += ",obs." + input.key + "." + name;
  }
  for (const std::string& joint : joints.names) header += ",raw." + joint;
  for (const std::string& joint : joints.names) header += ",target." + joint;
  for (const std::string& joint : joints.names) header += ",dq." + joint;
  for (const std::string& joint : joints.names) header += ",tau." + joint;
  header += ",nonfinite,rate_limited,supervisor,gain_scale";
  for (int address : others_) header += ",qpos." + std::to_string(address);
  header += "\n";
  std::fputs(header.c_str(), file_.get());
}

void Trajectory::write(double t, const MujocoRobot& robot, const terms::Observations& observations,
                       const std::vector<double>& raw, const std::vector<double>& targets,
                       const std::vector<double>& applied, const Interventions& seen,
                       const SupervisorState* supervisor) {
  row_.clear();
  char number[32];
  auto put = [&](double value) {
    const int n = std::snprintf(number, sizeof number, row_.empty() ? "%.9g" : ",%.9g", value);
    row_.insert(row_.end(), number, number + n);
  };
  put(t);
  for (double value : robot.base_position()) put(value);
  for (double value : robot.base_orientation()) put(value);
  for (size_t i = 0; i < targets.size(); ++i) put(robot.joint_position(i));
  for (const terms::ObservationInput& input : observations.inputs()) {
    for (double value : input.values) put(value);
  }
  for (double value : raw) put(value);
  for (double value : targets) put(value);
  for (size_t i = 0; i < targets.size(); ++i) put(robot.joint_velocity(i));
  for (double value : applied) put(value);
  put(static_cast<double>(seen.nonfinite));
  put(static_cast<double>(seen.rate_limited));
  const char* mode = supervisor != nullptr ? supervisor_mode_name(supervisor->mode) : "none";
  row_.push_back(',');
  row_.insert(row_.end(), mode, mode + std::strlen(mode));
  put(supervisor != nullptr ? supervisor->gain_scale : 1.0);
  for (int address : others_) put(robot.qpos(address));
  row_.push_back('\n');
  if (std::fwrite(row_.data(), 1, row_.size(), file_.get()) != row_.size()) {
    throw Error("cannot write the trajectory '" + path_ + "'");
  }
}

void Trajectory::close() {
  if (file_ && std::fflush(file_.get()) != 0) throw Error("cannot write the trajectory '" + path_ + "'");
  file_.reset();
}

}  // namespace tdaot::rehearse
