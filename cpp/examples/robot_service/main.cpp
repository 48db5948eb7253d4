// robot_service: a fixed-rate control loop around a tdaot package, the way a robot service
// runs a policy. Each tick it writes fresh "sensor" values into preallocated inputs, runs the
// policy (through a Session when the package is recurrent), and sleeps until the next tick.
//
//   robot_service PACKAGE [--rate HZ] [--steps N] [--batch B] [--sha256 HEX] [--op-lib LIB]
//
// --sha256 pins the artifact the service was certified with: any other file is refused before
// it is loaded. --op-lib loads a library registering custom operators the package calls.
//
// Prints the policy's compute time per tick (p50, p99, max), how late the loop woke up, and
// the missed deadlines (ticks whose compute ended after the next tick was due).
// Exit codes: 0 success, 1 a tdaot error, 2 bad usage.
#include <ATen/ATen.h>
#include <tdaot/policy.h>
#include <tdaot/session.h>
#include <tdaot/stats.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
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

// Zero tensors [batch, *shape] for `specs`: the service's input buffers, allocated once.
std::vector<at::Tensor> input_buffers(const std::vector<tdaot::TensorSpec>& specs, int64_t batch,
                                      const std::string& device) {
  std::vector<at::Tensor> buffers;
  for (const auto& spec : specs) {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    buffers.push_back(at::zeros(shape, at::TensorOptions().dtype(spec.dtype).device(device)));
  }
  return buffers;
}

// Stands in for reading the sensors: floating inputs follow a slow sine.
void read_sensors(std::vector<at::Tensor>& buffers, int64_t step) {
  for (at::Tensor& buffer : buffers) {
    if (at::isFloatingType(buffer.scalar_type())) buffer.fill_(std::sin(0.01 * step));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    // The warm-up run at load (a default) keeps tick 0 from being the slow one.
    const tdaot::Policy policy(args.package, args.options);
    std::cout << "loaded " << args.package << " (sha256 " << policy.sha256() << ")\n";
    const tdaot::Manifest& manifest = policy.manifest();
    std::optional<tdaot::Session> session;
    if (manifest.recurrent) session.emplace(policy, args.batch);
    std::vector<at::Tensor> inputs =
        input_buffers(session ? session->inputs() : manifest.inputs, args.batch, manifest.device);

    const auto period = std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(1.0 / args.rate_hz));
    std::vector<double> compute_us;
    std::vector<double> wake_late_us;
    compute_us.reserve(args.steps);
    wake_late_us.reserve(args.steps);
    int64_t missed = 0;
    auto tick = Clock::now();
    for (int64_t step = 0; step < args.steps; ++step) {
      const auto start = Clock::now();
      wake_late_us.push_back(std::chrono::duration<double, std::micro>(start - tick).count());
      read_sensors(inputs, step);
      const std::vector<at::Tensor> outputs =
          session ? session->step_positional(inputs) : policy.run_positional(inputs);
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
              << args.batch << (session ? ", recurrent session" : "") << "\n";
    print_stats("compute", compute_us);
    print_stats("wake-up", wake_late_us);
    std::cout << "  missed deadlines " << missed << " of " << args.steps << "\n";
    return 0;
  } catch (const tdaot::Error& e) {
    std::cerr << "robot_service: " << e.what() << "\n";
    return 1;
  }
}
