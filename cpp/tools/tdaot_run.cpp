// tdaot-run: inspect, smoke-run and benchmark a tdaot package from the command line.
//
//   tdaot-run inspect PKG [--json]
//   tdaot-run run PKG [--batch B] [--random] [--seed S]
//   tdaot-run bench PKG [--batch B] [--iters N] [--warmup W] [--threads T] [--json]
//
// Exit codes: 0 success, 1 a tdaot error (message on stderr), 2 bad usage.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tdaot/policy.h"

namespace {

struct Options {
  std::string package;
  int64_t batch = -1;  // unset: the package's smallest batch
  bool random = false;
  uint64_t seed = 0;
  int iters = 1000;
  int warmup = 100;
  int threads = 1;
  bool json = false;
};

// The requested batch size, else the smallest the package accepts.
int64_t batch_size(const Options& options, const tdaot::Manifest& manifest) {
  return options.batch >= 0 ? options.batch : manifest.batch.min;
}

std::vector<int64_t> batched(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

// One tensor per manifest input: zeros, or seeded random values suited to the dtype.
std::vector<at::Tensor> make_inputs(const tdaot::Manifest& manifest, int64_t batch, bool random,
                                    uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> inputs;
  for (const auto& spec : manifest.inputs) {
    const auto shape = batched(batch, spec.shape);
    const auto options = at::TensorOptions().dtype(spec.dtype);
    at::Tensor tensor;
    if (!random) {
      tensor = at::zeros(shape, options);
    } else if (spec.dtype == at::kBool) {
      tensor = at::randint(0, 2, shape, generator, options);
    } else if (c10::isIntegralType(spec.dtype, /*includeBool=*/false)) {
      tensor = at::randint(0, 10, shape, generator, options);
    } else {
      tensor = at::randn(shape, generator, options);
    }
    inputs.push_back(tensor.to(at::Device(manifest.device)));
  }
  return inputs;
}

// "[0.12, -3.4, ...]": the first `limit` values of a tensor, flattened.
std::string first_values(const at::Tensor& tensor, int64_t limit = 8) {
  const at::Tensor flat = tensor.detach().to(at::kCPU).flatten();
  const int64_t n = std::min<int64_t>(limit, flat.numel());
  const bool integral = c10::isIntegralType(flat.scalar_type(), /*includeBool=*/true);
  const at::Tensor head = flat.slice(0, 0, n).to(integral ? at::kLong : at::kDouble);
  std::ostringstream out;
  out << "[";
  for (int64_t i = 0; i < n; ++i) {
    if (i > 0) out << ", ";
    if (integral) {
      out << head[i].item<int64_t>();
    } else {
      out << head[i].item<double>();
    }
  }
  if (flat.numel() > n) out << ", ...";
  out << "]";
  return out.str();
}

size_t key_width(const std::vector<tdaot::TensorSpec>& specs) {
  size_t width = 0;
  for (const auto& spec : specs) width = std::max(width, spec.key.size());
  return width;
}

void print_specs(const char* title, const std::vector<tdaot::TensorSpec>& specs) {
  std::cout << title << "\n";
  const int width = static_cast<int>(key_width(specs));
  for (const auto& spec : specs) {
    std::cout << "  " << std::left << std::setw(width) << spec.key << "  " << std::setw(8)
              << tdaot::dtype_name(spec.dtype) << "  " << tdaot::format_batched_shape(spec.shape)
              << "\n";
  }
}

int inspect(const Options& options) {
  const tdaot::Manifest m = tdaot::read_manifest(options.package);
  if (options.json) {
    std::cout << m.to_json(2) << "\n";
    return 0;
  }
  const auto row = [](const char* name, const std::string& value) {
    std::cout << std::left << std::setw(14) << name << value << "\n";
  };
  row("package", options.package);
  row("schema", std::to_string(m.schema_version));
  row("device", m.device);
  row("cpu target", m.cpu_target + " (isa " + m.cpu_isa + ")");
  row("batch", std::to_string(m.batch.min) + ".." + std::to_string(m.batch.max) +
                   (m.batch.dynamic() ? " (dynamic)" : " (static)"));
  row("interaction", m.interaction_type);
  row("built with", "torch " + m.torch_version + ", tensordict " + m.tensordict_version +
                        ", tdaot " + m.tdaot_version);
  row("source",
      m.source.module_class + (m.source.factory.empty() ? "" : " from " + m.source.factory));
  print_specs("inputs", m.inputs);
  print_specs("outputs", m.outputs);
  return 0;
}

int run_once(const Options& options) {
  const tdaot::Policy policy(options.package);
  const tdaot::Manifest& m = policy.manifest();
  const int64_t batch = batch_size(options, m);
  const auto outputs = policy.run_positional(make_inputs(m, batch, options.random, options.seed));
  std::cout << "ran " << options.package << " with batch " << batch << " of "
            << (options.random ? "random inputs (seed " + std::to_string(options.seed) + ")"
                               : std::string("zeros"))
            << "\n";
  const int width = static_cast<int>(key_width(m.outputs));
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::cout << "  " << std::left << std::setw(width) << m.outputs[i].key << "  " << std::setw(8)
              << tdaot::dtype_name(outputs[i].scalar_type()) << "  " << std::setw(12)
              << tdaot::format_shape(outputs[i].sizes().vec()) << "  " << first_values(outputs[i])
              << "\n";
  }
  return 0;
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

int bench(const Options& options) {
  at::set_num_threads(options.threads);
  const tdaot::Policy policy(options.package);
  const int64_t batch = batch_size(options, policy.manifest());
  const auto inputs = make_inputs(policy.manifest(), batch, /*random=*/true, options.seed);
  for (int i = 0; i < options.warmup; ++i) policy.run_positional(inputs);

  using Clock = std::chrono::steady_clock;
  std::vector<double> micros(options.iters);
  const auto start = Clock::now();
  for (double& sample : micros) {
    const auto t0 = Clock::now();
    policy.run_positional(inputs);
    sample = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::sort(micros.begin(), micros.end());
  const double calls_per_s = options.iters / seconds;

  if (options.json) {
    nlohmann::ordered_json out = {{"package", options.package},
                                  {"batch", batch},
                                  {"iters", options.iters},
                                  {"warmup", options.warmup},
                                  {"threads", options.threads},
                                  {"p50_us", percentile(micros, 0.5)},
                                  {"p99_us", percentile(micros, 0.99)},
                                  {"p999_us", percentile(micros, 0.999)},
                                  {"max_us", micros.back()},
                                  {"calls_per_s", calls_per_s}};
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << options.package << ": batch " << batch << ", " << options.threads << " thread(s), "
            << options.iters << " iters after " << options.warmup << " warmup\n"
            << std::fixed << std::setprecision(1) << "  p50 " << percentile(micros, 0.5)
            << " us  p99 " << percentile(micros, 0.99) << " us  p99.9 " << percentile(micros, 0.999)
            << " us  max " << micros.back() << " us\n"
            << std::setprecision(0) << "  " << calls_per_s << " calls/s\n";
  return 0;
}

CLI::App* add_command(CLI::App& app, const char* name, const char* description, Options& options) {
  CLI::App* command = app.add_subcommand(name, description);
  command->add_option("package", options.package, "path to a .pt2 package built by tdaot")
      ->required();
  return command;
}

void add_batch(CLI::App* command, Options& options) {
  command->add_option("--batch", options.batch, "batch size (default: the package's smallest)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"Inspect, run and benchmark tdaot packages (.pt2).", "tdaot-run"};
  app.require_subcommand(1);

  CLI::App* inspect_cmd = add_command(app, "inspect", "print the package's manifest", options);
  inspect_cmd->add_flag("--json", options.json, "print the manifest as JSON");

  CLI::App* run_cmd =
      add_command(app, "run", "run once on zero (or random) inputs and print outputs", options);
  add_batch(run_cmd, options);
  run_cmd->add_flag("--random", options.random, "random inputs instead of zeros");
  run_cmd->add_option("--seed", options.seed, "seed for --random")->capture_default_str();

  CLI::App* bench_cmd = add_command(app, "bench", "time run_positional on fixed inputs", options);
  add_batch(bench_cmd, options);
  const auto at_least = [](int min) { return CLI::Range(min, std::numeric_limits<int>::max()); };
  bench_cmd->add_option("--iters", options.iters, "timed calls")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd->add_option("--warmup", options.warmup, "untimed calls first")
      ->check(at_least(0))
      ->capture_default_str();
  bench_cmd->add_option("--threads", options.threads, "intra-op threads (at::set_num_threads)")
      ->check(at_least(1))
      ->capture_default_str();
  bench_cmd->add_flag("--json", options.json, "print the results as JSON");

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help
  } catch (const CLI::ParseError& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n\n" << app.help();
    return 2;
  }

  try {
    if (*inspect_cmd) return inspect(options);
    if (*run_cmd) return run_once(options);
    return bench(options);
  } catch (const tdaot::Error& e) {
    std::cerr << "tdaot-run: " << e.what() << "\n";
    return 1;
  }
}
