// tdaot-rehearse's trajectory file: one CSV row per control step (README.md, "Output").
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tdaot/envelope.h"
#include "tdaot/supervisor.h"
#include "tdaot/service/terms.h"
#include "tdaot_rehearse/mujoco_robot.h"

namespace tdaot::rehearse {

class Trajectory {
 public:
  // Opens `path` and writes the header. Throws UsageError when it cannot be written.
  // Writes, after the interventions, a column qpos.<address> for each qpos coordinate the base
  // and joint columns do not hold (`robot`'s other_qpos), so a row gives the whole qpos.
  Trajectory(const std::string& path, const terms::JointOutput& joints, const terms::Observations& observations,
             const MujocoRobot& robot);
  // One row: the state before the policy step at `t` (joint velocities included), what the
  // policy saw, its raw and mapped action, the torque the simulator applies to each joint for
  // those targets (`applied`), the interventions so far, and the supervisor's state (null:
  // none; its mode's name, "none", and the gain scale). Throws tdaot::Error when the write
  // fails.
  void write(double t, const MujocoRobot& robot, const terms::Observations& observations,
             const std::vector<double>& raw, const std::vector<double>& targets,
             const std::vector<double>& applied, const Interventions& seen, const SupervisorState* supervisor);
  // Flushes; throws tdaot::Error when that fails.
  void close();

 private:
  std::string path_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file_{nullptr, &std::fclose};
  std::vector<char> row_;
  std::vector<int> others_;
};

}  // namespace tdaot::rehearse
