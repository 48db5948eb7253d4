// tdaot-rehearse: a package with a contract (observation terms, joint names, PD gains, control
// period) closed loop in MuJoCo through the lite runtime (or, with --runtime torch, the full
// runtime: this executable then runs tdaot-rehearse-torch from its own folder, the same program
// linked to tdaot::runtime instead of tdaot::lite), before it meets the robot:
//
//   tdaot-rehearse PKG --mjcf scene.xml [--seconds 60] [--command 0.5,0,0] [--runtime lite|torch]
//                  [--trajectory out.csv] [--keyframe NAME] [--no-envelope] [--no-supervisor]
//                  [--scenario crouch-start|push|nan] [--crouch RAD] [--push-speed M/S]
//                  [--push-time S] [--json] [--record LOG [--record-steps N]]
//
// --record LOG writes the rehearsal's flight log (docs/flight-recorder.md: every control step's
// inputs and outputs, interventions and supervisor state, the same file a robot service dumps)
// at the end; its ring holds every control step of the rehearsal, or the last N with
// --record-steps N.
//
// Prints what it matched and a summary (simulated seconds, distance, mean forward speed, lowest
// base height, falls, interventions, real-time factor). Exit codes: 0 ran; 2 the package, its
// contract or the MJCF cannot be rehearsed (no contract, no observation terms, no gains, a joint
// missing or extra, a control period that is not a whole number of physics steps) or a bad
// option; 1 the package could not be read or run.
#include <CLI/CLI.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot_rehearse/rehearsal.h"
#include "tdaot_rehearse/runner.h"

namespace {

std::array<double, 3> parse_command(const std::string& text) {
  std::array<double, 3> command{0.0, 0.0, 0.0};
  std::stringstream in(text);
  std::string part;
  size_t n = 0;
  while (std::getline(in, part, ',')) {
    if (n == 3) throw tdaot::rehearse::UsageError("--command: expected vx,vy,yaw_rate, got '" + text + "'");
    try {
      size_t used = 0;
      command[n] = std::stod(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      throw tdaot::rehearse::UsageError("--command: '" + part + "' is not a number (expected vx,vy,yaw_rate)");
    }
    ++n;
  }
  if (n != 3) throw tdaot::rehearse::UsageError("--command: expected vx,vy,yaw_rate, got '" + text + "'");
  return command;
}

// The executable of `runtime` beside this one: tdaot-rehearse (lite) or tdaot-rehearse-torch.
std::string sibling(const std::string& runtime) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw tdaot::rehearse::UsageError("--runtime " + runtime + ": cannot find this executable's folder");
  std::string path(self, static_cast<size_t>(n));
  path = path.substr(0, path.rfind('/') + 1) + (runtime == "torch" ? "tdaot-rehearse-torch" : "tdaot-rehearse");
  if (access(path.c_str(), X_OK) != 0) {
    throw tdaot::rehearse::UsageError("--runtime " + runtime + ": " + path +
                                      " is not built (the C++ build makes it beside tdaot-rehearse)");
  }
  return path;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tdaot-rehearse: a package with a contract, closed loop in MuJoCo"};
  tdaot::rehearse::Options options;
  std::string command = "0,0,0";
  bool no_envelope = false, no_supervisor = false, as_json = false;
  app.add_option("package", options.package, "the .pt2 package")->required();
  app.add_option("--mjcf", options.mjcf, "the robot's MJCF (scene) file")->required();
  app.add_option("--seconds", options.seconds, "simulated seconds")->capture_default_str();
  app.add_option("--command", command, "velocity_commands: vx,vy,yaw_rate")->capture_default_str();
  app.add_option("--runtime", options.runtime, "the runtime that runs the policy")
      ->check(CLI::IsMember({"lite", "torch"}))
      ->capture_default_str();
  app.add_option("--trajectory", options.trajectory, "CSV file: one row per policy step");
  app.add_option("--keyframe", options.keyframe, "start from this MJCF keyframe");
  app.add_option("--fall-fraction", options.fall_fraction,
                 "a fall: the base below this fraction of its starting height (or tilted > 60 deg)")
      ->capture_default_str();
  app.add_flag("--no-envelope", no_envelope, "run without the safety envelope");
  app.add_flag("--no-supervisor", no_supervisor, "run without the contract's supervisor of the joint targets");
  app.add_option("--scenario", options.scenario, "what happens to the robot: crouch-start, push or nan")
      ->check(CLI::IsMember({"crouch-start", "push", "nan"}));
  app.add_option("--crouch", options.crouch, "crouch-start: radians deeper into each default angle")
      ->capture_default_str();
  app.add_option("--push-speed", options.push_speed, "push: the base's sideways speed added, m/s")
      ->capture_default_str();
  app.add_option("--push-time", options.push_time, "push: when, in simulated seconds")->capture_default_str();
  app.add_flag("--json", as_json, "print the summary as one JSON line too");
  auto* record = app.add_option("--record", options.record, "the flight log to write at the end (every step)");
  app.add_option("--record-steps", options.record_steps, "--record: keep only the last N control steps")
      ->check(CLI::PositiveNumber)
      ->needs(record);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    options.command = parse_command(command);
    options.envelope = !no_envelope;
    options.supervisor = !no_supervisor;
    if (options.runtime != tdaot::rehearse::kRuntime) {  // the other runtime's executable, same arguments
      const std::string path = sibling(options.runtime);
      std::vector<char*> args(argv, argv + argc);
      args[0] = const_cast<char*>(path.c_str());
      args.push_back(nullptr);
      execv(path.c_str(), args.data());
      throw tdaot::rehearse::UsageError("--runtime " + options.runtime + ": cannot run " + path + ": " +
                                        std::strerror(errno));
    }
    const tdaot::rehearse::Summary summary = tdaot::rehearse::run(options, std::cout);
    std::cout << tdaot::rehearse::format_summary(summary);
    if (as_json) std::cout << tdaot::rehearse::summary_json(summary) << "\n";
    return 0;
  } catch (const tdaot::rehearse::UsageError& e) {
    std::cerr << "tdaot-rehearse: " << e.what() << "\n";
    return 2;
  } catch (const tdaot::ContractError& e) {
    // A contract that cannot drive this robot (no observation terms, no gains: tdaot/terms.h).
    std::cerr << "tdaot-rehearse: " << e.what() << "\n";
    return 2;
  } catch (const tdaot::ManifestError& e) {
    // A hand-edited contract the parser refuses: the package cannot be rehearsed as it is.
    std::cerr << "tdaot-rehearse: " << e.what() << "\n";
    return 2;
  } catch (const tdaot::Error& e) {
    std::cerr << "tdaot-rehearse: " << e.what() << "\n";
    return 1;
  }
}
