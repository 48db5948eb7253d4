// tdaot-run bench PKG: times run_positional on fixed random inputs from one or more caller
// threads and prints p50, p99, p99.9, max and calls/s, and the model that served the batch.
//
// --bind times Binding::run() instead (tdaot/binding.h): the inputs are bound once for the
// batch and filled once with the same random values (a recurrent package's state and is_init
// are left to the bound session), and the timing loop allocates nothing itself: its samples
// are reserved before it and nothing else is built inside it. A Binding is for one thread, so
// --bind times one binding from one caller: --callers or --runners above 1 is a usage error.
// It prints the model that served the binding and whether its run is allocation-free.
//
// Allocations per call: when a malloc-family counter exporting tdaot_alloc_count() is preloaded
// (benchmarks/cpp/alloc_counter.c: LD_PRELOAD=libtdaot-alloc-counter.so tdaot-run bench ...),
// bench also reports every malloc-family call of the process over the timed calls, per call
// (without --bind that includes the caller threads' start, a few in all).
#include <dlfcn.h>

#include <chrono>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "common/alloc_window.h"
#include "tdaot/service/stats.h"

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
  bool bind = false;
  bool json = false;
  LoadFlags load;
};

using Clock = std::chrono::steady_clock;

// What was timed, for the report.
struct Timing {
  std::vector<double> micros;  // one sample per timed call
  double seconds = 0;          // wall time of all timed calls
  std::string model;           // the model that served the batch
  bool bound = false;          // Binding::run() (--bind) rather than run_positional
  bool allocation_free = false;
  double allocations_per_call = -1;  // -1: no counter preloaded
};

// run_positional from options.callers threads; each caller times its own calls.
Timing time_positional(const Policy& policy, const BenchOptions& options, int64_t batch) {
  const auto inputs = make_inputs(policy.manifest(), batch, /*random=*/true, /*seed=*/0);
  for (int i = 0; i < options.warmup; ++i) policy.run_positional(inputs);
  std::vector<std::vector<double>> per_caller(options.callers, std::vector<double>(options.iters));
  std::vector<std::thread> callers;
  callers.reserve(per_caller.size());
  const AllocWindow allocations;
  const auto start = Clock::now();
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
  Timing timing;
  timing.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  timing.allocations_per_call =
      allocations.done(static_cast<int64_t>(options.callers) * options.iters);
  for (const auto& samples : per_caller) {
    timing.micros.insert(timing.micros.end(), samples.begin(), samples.end());
  }
  const ModelSpec* model = policy.manifest().model_for(batch);
  if (model != nullptr) timing.model = model->name;
  return timing;
}

// Whether input `key` is carried by a bound session (recurrent state or is_init).
bool session_input(const Manifest& manifest, const std::string& key) {
  if (!manifest.recurrent) return false;
  if (key == manifest.recurrent->is_init) return true;
  for (const auto& pair : manifest.recurrent->state) {
    if (pair.input == key) return true;
  }
  return false;
}

// Binding::run() on one binding from this thread; the loop allocates nothing itself.
Timing time_bound(const Policy& policy, const BenchOptions& options, int64_t batch) {
  Binding binding = policy.bind(batch);
  const Manifest& manifest = policy.manifest();
  const auto values = make_inputs(manifest, batch, /*random=*/true, /*seed=*/0);
  for (size_t i = 0; i < values.size(); ++i) {
    if (!session_input(manifest, manifest.inputs[i].key)) binding.inputs()[i].copy_(values[i]);
  }
  for (int i = 0; i < options.warmup; ++i) binding.run();
  Timing timing;
  timing.bound = true;
  timing.model = binding.model();
  timing.allocation_free = binding.allocation_free();
  timing.micros.resize(options.iters);  // every sample's slot, before the loop
  const AllocWindow allocations;
  const auto start = Clock::now();
  for (double& sample : timing.micros) {
    const auto t0 = Clock::now();
    binding.run();
    sample = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  timing.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  timing.allocations_per_call = allocations.done(options.iters);
  return timing;
}

// "bound run on model b1 (allocation-free)" or "run_positional on model model".
std::string served_by(const Timing& timing) {
  std::string text = std::string(timing.bound ? "bound run" : "run_positional") + " on model " +
                     (timing.model.empty() ? "?" : timing.model);
  if (timing.bound) {
    text += timing.allocation_free
                ? " (allocation-free)"
                : " (not allocation-free: AOTInductor's runner allocates its outputs per call)";
  }
  return text;
}

ExitCode bench(const BenchOptions& options) {
  if (options.bind && (options.callers > 1 || options.runners > 1)) {
    throw UsageError(
        "--bind times one tdaot::Binding from one thread (a Binding is for one thread); "
        "--callers and --runners must be 1 with --bind");
  }
  PolicyOptions load = options.load.policy_options();
  load.intra_op_threads = options.threads;
  load.num_runners = options.runners;
  load.warmup_runs = 0;  // the bench does its own, timed separately
  const Policy policy(options.package, load);
  const int64_t batch = batch_size(options.batch, policy.manifest());
  Timing timing = options.bind ? time_bound(policy, options, batch)
                               : time_positional(policy, options, batch);
  const double seconds = timing.seconds;
  const stats::Summary latency = stats::summarize(std::move(timing.micros));
  const double calls_per_s = static_cast<double>(latency.count) / seconds;

  if (options.json) {
    nlohmann::ordered_json out = {{"package", options.package},
                                  {"batch", batch},
                                  {"iters", options.iters},
                                  {"warmup", options.warmup},
                                  {"threads", options.threads},
                                  {"runners", options.runners},
                                  {"callers", options.callers},
                                  {"bind", timing.bound},
                                  {"model", timing.model}};
    if (timing.bound) out["allocation_free"] = timing.allocation_free;
    out["p50_us"] = latency.p50;
    out["p99_us"] = latency.p99;
    out["p999_us"] = latency.p999;
    out["max_us"] = latency.max;
    out["calls_per_s"] = calls_per_s;
    if (timing.allocations_per_call >= 0) out["allocations_per_call"] = timing.allocations_per_call;
    std::cout << out.dump(2) << "\n";
    return kSuccess;
  }
  std::cout << options.package << ": batch " << batch << ", " << options.threads
            << " intra-op thread(s), " << options.runners << " runner(s), " << options.callers
            << " caller(s) x " << options.iters << " iters after " << options.warmup << " warmup\n"
            << "  " << served_by(timing) << "\n"
            << "  " << stats::format_us(latency) << "\n"
            << std::fixed << std::setprecision(0) << "  " << calls_per_s << " calls/s\n";
  if (timing.allocations_per_call >= 0) {
    std::cout << std::setprecision(2) << "  " << timing.allocations_per_call
              << " allocations per call (malloc-family, whole process; preloaded counter)\n";
  }
  return kSuccess;
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* command =
      add_command(app, "bench", "time run_positional (or a bound run: --bind) on fixed inputs",
                  options->package);
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
  command->add_flag("--bind", options->bind,
                    "time Binding::run() on inputs bound once (tdaot/binding.h) instead of "
                    "run_positional; one caller, one runner");
  command->add_flag("--json", options->json, "print the results as JSON");
  return {command, [options] { return bench(*options); }};
}

}  // namespace tdaot::tool
