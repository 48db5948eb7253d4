// robot_service: a fixed-rate control loop around a tdaot package, the way a robot service
// runs a policy. It binds the policy once at the control batch (tdaot::Binding, tdaot/binding.h:
// inputs and outputs owned by the binding), then each tick writes fresh "sensor" values into
// the bound inputs in place, runs the binding, reads the actions from the bound outputs in
// place, and sleeps until the next tick. A recurrent package's binding is a bound session: it
// carries the state from tick to tick itself, so the loop writes only the other inputs.
//
//   robot_service PACKAGE [--rate HZ] [--steps N] [--batch B] [--sha256 HEX] [--op-lib LIB]
//
// --sha256 pins the artifact the service was certified with: any other file is refused before
// it is loaded. --op-lib loads a library registering custom operators the package calls.
//
// Prints the model that serves the batch and whether its bound run is allocation-free (no heap
// allocation per tick; the package's batch-specialised model, e.g. tdaot.build's "b1"), the
// policy's compute time per tick (p50, p99, max), how late the loop woke up, and the missed
// deadlines (ticks whose compute ended after the next tick was due).
// Exit codes: 0 success, 1 a tdaot error, 2 bad usage.
#include <ATen/ATen.h>
#include <tdaot/binding.h>
#include <tdaot/policy.h>
#include <tdaot/stats.h>

#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string package;
  double rate_hz = 1000.0;
  int64_t steps = 1000;
  int64_t batch = 1;
  tdaot::PolicyOptions options;  // defaults: one intra-op thread, a warm-up run at load
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "robot_service: " << problem
            << "\nusage: robot_service PACKAGE [--rate HZ] [--steps N] [--batch B] [--sha256 HEX] "
               "[--op-lib LIB]\n";
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
    } else if (arg == "--sha256") {
      args.options.expected_sha256 = text();
    } else if (arg == "--op-lib") {
      args.options.op_libraries.push_back(text());
    } else if (args.package.empty() && arg.rfind("--", 0) != 0) {
      args.package = arg;
    } else {
      usage("unexpected argument '" + arg + "'");
    }
  }
  if (args.package.empty()) usage("a package path is required");
  return args;
}

// Nearest-rank percentiles (tdaot/stats.h, as tdaot-run bench reports them).
void print_stats(const char* name, std::vector<double> micros) {
  const tdaot::stats::Summary summary = tdaot::stats::summarize(std::move(micros));
  std::cout << "  " << std::left << std::setw(9) << name << std::right << std::fixed
            << std::setprecision(1) << "p50 " << summary.p50 << " us  p99 " << summary.p99
            << " us  max " << summary.max << " us\n";
}

// The bound inputs the service writes each tick: every input but a recurrent package's state
// and is_init, which the bound session carries itself.
std::vector<at::Tensor> sensor_inputs(const tdaot::Binding& binding,
                                      const tdaot::Manifest& manifest) {
  std::vector<at::Tensor> sensors;
  for (const auto& spec : manifest.inputs) {
    bool carried = false;
    if (manifest.recurrent) {
      carried = spec.key == manifest.recurrent->is_init;
      for (const auto& pair : manifest.recurrent->state) {
        carried = carried || pair.input == spec.key;
      }
    }
    if (!carried) sensors.push_back(binding.input(spec.key));
  }
  return sensors;
}

// Stands in for reading the sensors: floating inputs follow a slow sine, written in place
// (float32 on the CPU straight into the bound memory).
void read_sensors(const std::vector<at::Tensor>& sensors, int64_t step) {
  const double value = std::sin(0.01 * step);
  for (const at::Tensor& sensor : sensors) {
    if (sensor.is_cpu() && sensor.scalar_type() == at::kFloat && sensor.is_contiguous()) {
      float* data = sensor.mutable_data_ptr<float>();
      std::fill(data, data + sensor.numel(), static_cast<float>(value));
    } else if (at::isFloatingType(sensor.scalar_type())) {
      sensor.fill_(value);
    }
  }
}

// Stands in for commanding the actuators: reads the first element of the first output in
// place (float32 on the CPU); returns it.
double send_actuators(const at::Tensor& action) {
  if (action.is_cpu() && action.scalar_type() == at::kFloat && action.numel() > 0) {
    return action.const_data_ptr<float>()[0];
  }
  return 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    // The warm-up run at load (a default) keeps tick 0 from being the slow one.
    const tdaot::Policy policy(args.package, args.options);
    std::cout << "loaded " << args.package << " (sha256 " << policy.sha256() << ")\n";
    const tdaot::Manifest& manifest = policy.manifest();
    // Bound once: inputs, outputs and (recurrent) state for the control batch.
    tdaot::Binding binding = policy.bind(args.batch);
    const std::vector<at::Tensor> sensors = sensor_inputs(binding, manifest);
    const at::Tensor action = binding.output(manifest.outputs.front().key);
    std::cout << "bound run on model " << binding.model()
              << (binding.allocation_free()
                      ? " (allocation-free)"
                      : " (not allocation-free: AOTInductor's runner allocates its outputs)")
              << "\n";

    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / args.rate_hz));
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
      read_sensors(sensors, step);
      binding.run();
      command = send_actuators(action);
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
              << args.rate_hz << " Hz (period "
              << std::chrono::duration<double, std::micro>(period).count() << " us), batch "
              << args.batch << (manifest.recurrent ? ", recurrent session (bound)" : "") << "\n";
    print_stats("compute", compute_us);
    print_stats("wake-up", wake_late_us);
    std::cout << "  missed deadlines " << missed << " of " << args.steps << "\n"
              << "  last command " << manifest.outputs.front().key << "[0] = "
              << std::setprecision(4) << command << "\n";
    return 0;
  } catch (const tdaot::Error& e) {
    std::cerr << "robot_service: " << e.what() << "\n";
    return 1;
  }
}
