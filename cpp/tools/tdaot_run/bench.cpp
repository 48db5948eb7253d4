// tdaot-run bench PKG: times run_positional on fixed random inputs from one or more caller
// threads and prints p50, p99, p99.9, max and calls/s.
#include <chrono>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "common.h"
#include "tdaot/stats.h"

namespace tdaot::tool {
namespace {

struct BenchOptions {
  std::string package;
  int64_t batch = -1;  // unset: the package's smallest batch
  int iters = 1000;
  int warmup = 100;
  int threads = 1;
  int runners = 1;
  int callers = 1;
  bool json = false;
  LoadFlags load;
};

ExitCode bench(const BenchOptions& options) {
  PolicyOptions load = options.load.policy_options();
  load.intra_op_threads = options.threads;
  load.num_runners = options.runners;
  load.warmup_runs = 0;  // the bench does its own, timed separately
  const Policy policy(options.package, load);
  const int64_t batch = batch_size(options.batch, policy.manifest());
  const auto inputs = make_inputs(policy.manifest(), batch, /*random=*/true, /*seed=*/0);
  for (int i = 0; i < options.warmup; ++i) policy.run_positional(inputs);

  // Each caller thread times its own calls; percentiles are over all of them.
  using Clock = std::chrono::steady_clock;
  std::vector<std::vector<double>> per_caller(options.callers, std::vector<double>(options.iters));
  const auto start = Clock::now();
  std::vector<std::thread> callers;
  for (auto& micros : per_caller) {
    callers.emplace_back([&policy, &inputs, &micros] {
      for (double& sample : micros) {
        const auto t0 = Clock::now();
        policy.run_positional(inputs);
        sample = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
      }
    });
  }
  for (auto& caller : callers) caller.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> micros;
  for (const auto& samples : per_caller) {
    micros.insert(micros.end(), samples.begin(), samples.end());
  }
  const stats::Summary latency = stats::summarize(std::move(micros));
  const double calls_per_s = static_cast<double>(latency.count) / seconds;

  if (options.json) {
    nlohmann::ordered_json out = {{"package", options.package},
                                  {"batch", batch},
                                  {"iters", options.iters},
                                  {"warmup", options.warmup},
                                  {"threads", options.threads},
                                  {"runners", options.runners},
                                  {"callers", options.callers},
                                  {"p50_us", latency.p50},
                                  {"p99_us", latency.p99},
                                  {"p999_us", latency.p999},
                                  {"max_us", latency.max},
                                  {"calls_per_s", calls_per_s}};
    std::cout << out.dump(2) << "\n";
    return kSuccess;
  }
  std::cout << options.package << ": batch " << batch << ", " << options.threads
            << " intra-op thread(s), " << options.runners << " runner(s), " << options.callers
            << " caller(s) x " << options.iters << " iters after " << options.warmup << " warmup\n"
            << "  " << stats::format_us(latency) << "\n"
            << std::fixed << std::setprecision(0) << "  " << calls_per_s << " calls/s\n";
  return kSuccess;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command =
      add_command(app, "bench", "time run_positional on fixed inputs", options->package);
  add_batch(command, options->batch);
  add_load_options(command, options->load);
  const auto at_least = [](int min) { return CLI::Range(min, std::numeric_limits<int>::max()); };
  command->add_option("--iters", options->iters, "timed calls")
      ->check(at_least(1))
      ->capture_default_str();
  command->add_option("--warmup", options->warmup, "untimed calls first")
      ->check(at_least(0))
      ->capture_default_str();
  command
      ->add_option("--threads", options->threads,
                   "intra-op threads for ATen ops (PolicyOptions::intra_op_threads)")
      ->check(at_least(1))
      ->capture_default_str();
  command
      ->add_option("--runners", options->runners,
                   "model instances for concurrent calls (PolicyOptions::num_runners)")
      ->check(at_least(1))
      ->capture_default_str();
  command->add_option("--callers", options->callers, "threads calling run concurrently")
      ->check(at_least(1))
      ->capture_default_str();
  command->add_flag("--json", options->json, "print the results as JSON");
  return {command, [options] { return bench(*options); }};
}

}  // namespace tdaot::tool
