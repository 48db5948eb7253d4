// tdaot-rehearse: a package with a contract (observation terms, joint names, PD gains, control
// period) closed loop in MuJoCo through the lite runtime, before it meets the robot:
//
//   tdaot-rehearse PKG --mjcf scene.xml [--seconds 60] [--command 0.5,0,0] [--runtime lite]
//                  [--trajectory out.csv] [--keyframe NAME] [--no-envelope] [--json]
//
// Prints what it matched and a summary (simulated seconds, distance, mean forward speed, lowest
// base height, falls, interventions, real-time factor). Exit codes: 0 ran; 2 the package, its
// contract or the MJCF cannot be rehearsed (no contract, no observation terms, no gains, a joint
// missing or extra, a control period that is not a whole number of physics steps) or a bad
// option; 1 the package could not be read or run.
#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot_rehearse/rehearsal.h"

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

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tdaot-rehearse: a package with a contract, closed loop in MuJoCo (lite runtime)"};
  tdaot::rehearse::Options options;
  std::string command = "0,0,0";
  bool no_envelope = false, as_json = false;
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
  app.add_flag("--no-envelope", no_envelope, "run without the lite runtime's safety envelope");
  app.add_flag("--json", as_json, "print the summary as one JSON line too");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    options.command = parse_command(command);
    options.envelope = !no_envelope;
    const tdaot::rehearse::Summary summary = tdaot::rehearse::run(options, std::cout);
    std::cout << tdaot::rehearse::format_summary(summary);
    if (as_json) std::cout << tdaot::rehearse::summary_json(summary) << "\n";
    return 0;
  } catch (const tdaot::rehearse::UsageError& e) {
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
