// robot_service: a fixed-rate control loop around a tdaot package, the way a robot service
// runs a policy, on the lite runtime (tdaot/lite.h: no libtorch in the process). It binds the
// policy once at the control batch (tdaot::lite::Binding: inputs and outputs owned by the
// binding), then each tick writes fresh "sensor" values into the bound inputs in place, runs the
// binding (no heap allocation), reads the actions from the bound outputs in place, and sleeps
// until the next tick. A recurrent package's binding is a bound session: it carries the state
// from tick to tick itself, so the loop writes only the other inputs.
//
// A package with a deployment contract (tdaot/contract.h) is bound with the safety envelope on
// (held outputs on a NaN, max_delta rate limits; a robot should not run without it), the loop
// period is the contract's control_dt unless --rate is given, and the contract and the
// envelope's intervention counts are printed. When the contract declares its observation as
// terms (joint_pos_rel, projected_gravity, last_action, ...), the service builds it from the
// robot's state with tdaot/terms.h, the library tdaot-rehearse uses in MuJoCo, and commands PD
// torques from the contract's gains (stiffness, damping) instead of raw targets.
//
//   robot_service PACKAGE [--rate HZ] [--steps N] [--batch B] [--joints FILE] [--sha256 HEX]
//                 [--public-key PUB.pem]... [--record N --record-out PATH]
//
// --joints FILE lists the robot's joint names, one a line, in the service's order: checked
// against the contract's first output signal with Contract::order (any name missing or extra
// refuses to start), and the commands are sent in the robot's order.
// --sha256 pins the artifact the service was certified with: any other file is refused before
// it is loaded. --public-key (repeatable) trusts that Ed25519 public key: a package without a
// valid signature by one of the trusted keys is refused before it is loaded (tdaot sign).
//
// --record N keeps the last N ticks in the binding's flight recorder (BindOptions::record: every
// input and output, timings, interventions, supervisor states; docs/flight-recorder.md), written
// to --record-out PATH at exit and whenever the service gets SIGUSR1: the handler opens the file
// and calls Binding::dump_fd, which is async-signal-safe (write(2) only), so a running robot can
// be asked for its last seconds without stopping.
//
// Prints the model that serves the batch, the policy's compute time per tick (p50, p99, max),
// how late the loop woke up, and the missed deadlines (ticks whose compute ended after the next
// tick was due). The batch must be one a lite model of the package serves (tdaot-lite inspect
// lists them; tdaot.build's default builds one for batch 1).
// Exit codes: 0 success, 1 a tdaot error, 2 bad usage.
#include <tdaot/contract.h>
#include <tdaot/lite.h>
#include <tdaot/service/stats.h>
#include <tdaot/service/terms.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string package;
  std::optional<double> rate_hz;  // default: the contract's control_dt, else 1000 Hz
  int64_t steps = 1000;
  int64_t batch = 1;
  std::string joints_file;
  tdaot::lite::PolicyOptions options;
  int64_t record = 0;      // the flight recorder's ticks; 0: none
  std::string record_out;  // where it is dumped (at exit, on SIGUSR1)
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "robot_service: " << problem
            << "\nusage: robot_service PACKAGE [--rate HZ] [--steps N] [--batch B] "
               "[--joints FILE] [--sha256 HEX] [--public-key PUB.pem]... [--record N --record-out PATH]\n";
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto text = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    const auto value = [&]() -> double {
      const std::string given = text();
      char* end = nullptr;
      const double number = std::strtod(given.c_str(), &end);
      if (*end != '\0' || !(number > 0)) usage(arg + " needs a positive number");
      return number;
    };
    if (arg == "--rate") {
      args.rate_hz = value();
    } else if (arg == "--steps") {
      args.steps = static_cast<int64_t>(value());
    } else if (arg == "--batch") {
      args.batch = static_cast<int64_t>(value());
    } else if (arg == "--joints") {
      args.joints_file = text();
    } else if (arg == "--sha256") {
      args.options.expected_sha256 = text();
    } else if (arg == "--public-key") {
      args.options.trusted_keys.push_back(text());
    } else if (arg == "--record") {
      args.record = static_cast<int64_t>(value());
    } else if (arg == "--record-out") {
      args.record_out = text();
    } else if (args.package.empty() && arg.rfind("--", 0) != 0) {
      args.package = arg;
    } else {
      usage("unexpected argument '" + arg + "'");
    }
  }
  if (args.package.empty()) usage("a package path is required");
  if ((args.record > 0) != !args.record_out.empty()) usage("--record N and --record-out PATH go together");
  return args;
}

// Dumping the flight log from a signal handler (docs/flight-recorder.md): only async-signal-safe
// calls, open(2), Binding::dump_fd (write(2) only) and close(2), on what was set before the
// handler was installed. A dump while a tick runs leaves that tick out (its slot is not whole).
const tdaot::lite::Binding* g_recorded = nullptr;
const char* g_record_out = nullptr;
volatile std::sig_atomic_t g_signal_dumps = 0;

void dump_on_signal(int) {
  const int fd = ::open(g_record_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (g_recorded->dump_fd(fd) == 0) g_signal_dumps = g_signal_dumps + 1;
  ::close(fd);
}

void dump_on_sigusr1(const tdaot::lite::Binding& binding, const std::string& path) {
  g_recorded = &binding;
  g_record_out = path.c_str();
  struct sigaction action {};
  action.sa_handler = dump_on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGUSR1, &action, nullptr) != 0) {
    throw tdaot::Error(std::string("cannot install the SIGUSR1 handler: ") + std::strerror(errno));
  }
}

// The joint names of a --joints file: one a line; blank lines and '#' comments skipped.
std::vector<std::string> read_joints(const std::string& path) {
  std::ifstream file(path);
  if (!file) usage("cannot read the joints file '" + path + "'");
  std::vector<std::string> names;
  for (std::string line; std::getline(file, line);) {
    line = line.substr(0, line.find('#'));
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    names.push_back(line.substr(first, line.find_last_not_of(" \t\r") - first + 1));
  }
  return names;
}

// Nearest-rank percentiles (tdaot/stats.h, as tdaot-run bench reports them).
void print_stats(const char* name, std::vector<double> micros) {
  const tdaot::stats::Summary summary = tdaot::stats::summarize(std::move(micros));
  std::cout << "  " << std::left << std::setw(9) << name << std::right << std::fixed
            << std::setprecision(1) << "p50 " << summary.p50 << " us  p99 " << summary.p99
            << " us  max " << summary.max << " us\n";
}

// Whether the contract declares an input as observation terms (tdaot/terms.h computes it).
bool has_terms(const std::optional<tdaot::Contract>& contract) {
  if (!contract) return false;
  for (const auto& [key, signal] : contract->inputs) {
    if (!signal.terms.empty()) return true;
  }
  return false;
}

double read(const void* data, tdaot::DType dtype, size_t i) {
  return dtype == tdaot::DType::Float32 ? static_cast<const float*>(data)[i] : static_cast<const double*>(data)[i];
}

// One tick of the policy: the lite binding, with the safety envelope on for a package with a
// contract. `sensors` are the float32 inputs the loop writes (a recurrent package's state and
// is_init are carried by the binding); `action` is the first output. With observation terms,
// the inputs come from a RobotState through tdaot::terms::Observations instead, and the command
// is the joint torque of the contract's PD gains.
class Controller {
 public:
  Controller(const tdaot::lite::Policy& policy, int64_t batch, int64_t record)
      : binding_(policy.bind(batch, options(policy, record))) {
    const tdaot::Manifest& manifest = policy.manifest();
    if (has_terms(policy.contract()) && batch == 1) {
      joints_.emplace(tdaot::terms::joint_output(*policy.contract(), /*require_gains=*/false));
      observations_.emplace(manifest, *policy.contract(), *joints_);
      for (const auto& input : observations_->inputs()) term_inputs_.push_back(binding_.input_data(input.key, input.dtype));
      const size_t n = joints_->size();
      robot_.joint_pos = joints_->rest;
      robot_.joint_vel.assign(n, 0.0);
      targets_ = joints_->rest;
      raw_.assign(n, 0.0);
      tau_.assign(n, 0.0);
      joint_dtype_ = manifest.outputs[*manifest.output_index(joints_->key)].dtype;
      return;
    }
    for (const auto& spec : manifest.inputs) {
      bool carried = false;
      if (manifest.recurrent) {
        carried = spec.key == manifest.recurrent->is_init;
        for (const auto& pair : manifest.recurrent->state) carried = carried || pair.input == spec.key;
      }
      if (carried || spec.dtype != tdaot::DType::Float32) continue;
      int64_t count = 1;
      for (int64_t d : binding_.input_shape(spec.key)) count *= d;
      sensors_.push_back({binding_.input<float>(spec.key), count});
    }
    const tdaot::TensorSpec& first = manifest.outputs.front();
    if (first.dtype == tdaot::DType::Float32) {
      action_ = binding_.output<float>(first.key);
      int64_t count = 1;
      for (int64_t d : binding_.output_shape(first.key)) count *= d;
      action_size_ = count;
    }
  }

  // The envelope on for a package with a contract; the flight recorder on with --record.
  static tdaot::lite::BindOptions options(const tdaot::lite::Policy& policy, int64_t record) {
    tdaot::lite::BindOptions options;
    options.envelope = policy.contract().has_value();
    options.record = record;
    return options;
  }

  const tdaot::lite::Binding& binding() const { return binding_; }
  // The observation terms' library in use: the contract's joint output, else nullptr.
  const tdaot::terms::JointOutput* joints() const { return joints_ ? &*joints_ : nullptr; }
  size_t observations() const { return observations_ ? observations_->size() : 0; }

  // Stands in for reading the sensors, in place: with terms, a robot whose joints reached the
  // previous targets, swaying slowly about them, base upright; else every float32 input follows
  // a slow sine.
  void read_sensors(int64_t step) {
    const double sway = 0.01 * std::sin(0.01 * static_cast<double>(step));
    if (observations_) {
      robot_.time = static_cast<double>(step) * 0.02;
      for (size_t i = 0; i < targets_.size(); ++i) {
        robot_.joint_vel[i] = (targets_[i] + sway - robot_.joint_pos[i]) / 0.02;
        robot_.joint_pos[i] = targets_[i] + sway;
      }
      observations_->compute(robot_, raw_.data());
      for (size_t i = 0; i < term_inputs_.size(); ++i) observations_->write(i, term_inputs_[i]);
      return;
    }
    for (const auto& [data, count] : sensors_) std::fill(data, data + count, static_cast<float>(sway * 100.0));
  }

  // Runs the policy; with terms, the new targets, the raw action fed back and the PD torques.
  void tick() {
    binding_.run();
    if (!observations_) return;
    const void* out = binding_.output_data(joints_->key, joint_dtype_);
    for (size_t i = 0; i < targets_.size(); ++i) {
      targets_[i] = read(out, joint_dtype_, i);
      raw_[i] = joints_->raw_from_target(i, targets_[i]);
    }
    if (!observations_->carried_action().empty()) {  // the package's own raw action: exact
      const void* raw = binding_.output_data(observations_->carried_action(), observations_->carried_dtype());
      for (size_t i = 0; i < raw_.size(); ++i) raw_[i] = read(raw, observations_->carried_dtype(), i);
    }
    // The gains as the contract's supervisor says this tick (a soft start's ramp, a damp
    // fallback's stiffness 0); plain gains without one. Reading the state allocates nothing.
    if (binding_.supervised()) {
      const tdaot::SupervisorState& supervised = binding_.supervisor();
      joints_->pd_torques(targets_.data(), robot_.joint_pos.data(), robot_.joint_vel.data(), tau_.data(),
                          supervised.gain_scale, supervised.damping_scale);
    } else {
      joints_->pd_torques(targets_.data(), robot_.joint_pos.data(), robot_.joint_vel.data(), tau_.data());
    }
  }

  // Stands in for commanding the actuators: element `index` of the first output (with terms:
  // joint `index`'s PD torque), in place.
  double send_actuators(int64_t index) const {
    if (observations_) return tau_.at(static_cast<size_t>(index));
    return action_ != nullptr && index < action_size_ ? action_[index] : 0.0;
  }

 private:
  tdaot::lite::Binding binding_;
  std::vector<std::pair<float*, int64_t>> sensors_;
  const float* action_ = nullptr;
  int64_t action_size_ = 0;
  // The observation-terms path (tdaot/terms.h).
  std::optional<tdaot::terms::JointOutput> joints_;
  std::optional<tdaot::terms::Observations> observations_;
  std::vector<void*> term_inputs_;
  tdaot::terms::RobotState robot_;
  tdaot::DType joint_dtype_ = tdaot::DType::Float32;
  std::vector<double> targets_, raw_, tau_;
};

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    const tdaot::lite::Policy policy(args.package, args.options);
    std::cout << "loaded " << args.package << " (sha256 " << policy.sha256() << ")\n";
    const tdaot::Manifest& manifest = policy.manifest();
    const std::optional<tdaot::Contract>& contract = policy.contract();
    if (contract) std::cout << "contract\n" << contract->describe();
    // The command the service sends first: the policy's element 0, or with --joints the
    // service's first joint wherever the policy has it.
    std::string command_name = manifest.outputs.front().key + "[0]";
    int64_t command_index = 0;
    if (!args.joints_file.empty()) {
      if (!contract || contract->outputs.empty()) {
        usage("--joints needs a package whose contract names its outputs' elements");
      }
      const std::string& key = contract->outputs.begin()->first;
      const std::vector<std::string> joints = read_joints(args.joints_file);
      const std::vector<int64_t> order = contract->order(key, joints);  // refuses a mismatch
      std::cout << "joints checked: the " << joints.size() << " names of " << args.joints_file
                << " are the policy's '" << key << "' (service joint i = policy element order[i])\n";
      command_name = key + " " + joints.front();
      command_index = order.front();
    }
    Controller controller(policy, args.batch, args.record);
    if (args.record > 0) {
      dump_on_sigusr1(controller.binding(), args.record_out);
      // Flushed: a supervisor process may signal once it reads this line.
      std::cout << "flight recorder: the last " << args.record << " ticks, written to " << args.record_out
                << " at exit and on SIGUSR1 (kill -USR1 " << getpid() << ")" << std::endl;
    }
    std::cout << "lite bound run on model " << controller.binding().model() << " (allocation-free)"
              << (contract ? ", the contract's safety envelope guards every tick" : "") << "\n";
    if (const tdaot::terms::JointOutput* joints = controller.joints()) {
      std::cout << "observation terms: " << controller.observations() << " elements from the robot's state "
                << "(tdaot/terms.h); commands: PD torques of the " << joints->size() << " joints of '"
                << joints->key << "'\n";
    }

    const double rate_hz = args.rate_hz.value_or(contract ? 1.0 / contract->control_dt : 1000.0);
    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / rate_hz));
    std::vector<double> compute_us;
    std::vector<double> wake_late_us;
    compute_us.reserve(args.steps);
    wake_late_us.reserve(args.steps);
    int64_t missed = 0;
    double command = 0.0;
    auto tick = Clock::now();
    for (int64_t step = 0; step < args.steps; ++step) {
      const auto start = Clock::now();
      wake_late_us.push_back(std::chrono::duration<double, std::micro>(start - tick).count());
      controller.read_sensors(step);
      controller.tick();
      command = controller.send_actuators(command_index);
      const auto end = Clock::now();
      compute_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
      tick += period;
      if (end > tick) {
        // Late: count every tick that passed and resume on the grid, never in a burst.
        while (tick < end) {
          tick += period;
          ++missed;
        }
      }
      std::this_thread::sleep_until(tick);
    }

    std::cout << "robot_service: " << args.package << "\n  " << args.steps << " ticks at "
              << rate_hz << " Hz (period "
              << std::chrono::duration<double, std::micro>(period).count() << " us"
              << (contract && !args.rate_hz ? ", the contract's control_dt" : "") << "), batch "
              << args.batch
              << (manifest.recurrent ? ", recurrent session (bound)" : "")
              << "\n";
    print_stats("compute", compute_us);
    print_stats("wake-up", wake_late_us);
    std::cout << "  missed deadlines " << missed << " of " << args.steps << "\n";
    if (contract) {
      const tdaot::Interventions& done = controller.binding().interventions();
      std::cout << "  interventions: nonfinite " << done.nonfinite << ", rate_limited "
                << done.rate_limited;
      if (controller.binding().supervised()) {
        std::cout << "; supervisor " << tdaot::supervisor_mode_name(controller.binding().supervisor().mode)
                  << ", blended " << done.blended << ", clipped " << done.clipped << ", fallback "
                  << done.fallback;
      }
      std::cout << "\n";
    }
    std::cout << "  last command " << command_name << " = " << std::setprecision(4) << command
              << "\n";
    if (args.record > 0) {
      std::signal(SIGUSR1, SIG_IGN);  // no dump from the handler while this one writes
      controller.binding().dump(args.record_out);
      std::cout << "  flight log: the last " << std::min(args.record, args.steps) << " ticks written to "
                << args.record_out << " (" << g_signal_dumps << " dumps on SIGUSR1 before)\n";
    }
    return 0;
  } catch (const tdaot::Error& e) {
    std::cerr << "robot_service: " << e.what() << "\n";
    return 1;
  }
}
