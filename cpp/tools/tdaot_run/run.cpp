// tdaot-run run PKG: one call on zeros, seeded random inputs (--random) or the inputs of a JSON
// file (--inputs), printing each output's dtype, shape and first values.
//
// An inputs file is a JSON object mapping manifest keys to nested arrays, batch dim first:
//   {"observation": [[0.1, 0.2, 0.3], [0.0, 1.0, -1.0]], "is_init": [[true], [false]]}
// Values are numbers (or true/false), converted to the manifest's dtype; integers are exact up
// to 2^53. Every input must be given; keys, shapes and batch sizes are checked like any run.
#include <ATen/Functions.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"
#include "core/inputs_json.h"

namespace tdaot::tool {
namespace {

using nlohmann::json;

struct RunOptions {
  std::string package;
  int64_t batch = -1;  // unset: the package's smallest batch
  bool random = false;
  uint64_t seed = 0;
  std::string inputs_file;
  LoadFlags load;
};

// Inputs keyed by manifest key from a JSON inputs file (see the header comment), read by the
// tools' shared reader (core/inputs_json.h, which refuses malformed, too deep or out-of-range
// JSON naming the file). Keys the manifest lacks are kept (as float32) so that Policy::run
// reports them like any unknown key.
TensorMap read_inputs_file(const std::string& path, const Manifest& manifest) {
  const json root = detail::parse_inputs_json(detail::read_inputs_text(path), path);
  if (!root.is_object()) {
    throw detail::InputsFileError("inputs file '" + path +
                                  "': expected a JSON object of arrays, got " + root.type_name());
  }
  TensorMap inputs;
  for (const auto& [key, value] : root.items()) {
    const detail::NestedValues nested = detail::nested_values(value, key, path);
    const auto index = manifest.input_index(key);
    const auto dtype = index ? tdaot::to_scalar_type(manifest.inputs[*index].dtype) : at::kFloat;
    const at::Tensor values = at::tensor(nested.values, at::TensorOptions().dtype(at::kDouble));
    inputs.emplace(key, values.view(nested.shape).to(dtype).to(at::Device(manifest.device)));
  }
  return inputs;
}

ExitCode run_once(const RunOptions& options) {
  const Policy policy(options.package, options.load.policy_options());
  const Manifest& m = policy.manifest();
  std::vector<at::Tensor> outputs;
  std::string source;
  int64_t batch = 0;
  if (!options.inputs_file.empty()) {
    const TensorMap out = policy.run(read_inputs_file(options.inputs_file, m));
    for (const auto& spec : m.outputs) outputs.push_back(out.at(spec.key));
    batch = outputs.empty() ? 0 : outputs.front().size(0);
    source = "inputs from " + options.inputs_file;
  } else {
    batch = batch_size(options.batch, m);
    outputs = policy.run_positional(make_inputs(m, batch, options.random, options.seed));
    source = options.random ? "random inputs (seed " + std::to_string(options.seed) + ")"
                            : std::string("zeros");
  }
  std::cout << "ran " << options.package << " with batch " << batch << " of " << source << "\n";
  print_outputs(m, outputs);
  return kSuccess;
}

}  // namespace

Command add_run(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = add_command(
      app, "run", "run once on zero (or random) inputs and print outputs", options->package);
  add_batch(command, options->batch);
  add_load_options(command, options->load);
  command->add_flag("--random", options->random, "random inputs instead of zeros");
  command->add_option("--seed", options->seed, "seed for --random")->capture_default_str();
  command
      ->add_option("--inputs", options->inputs_file,
                   "JSON file mapping input keys to nested arrays (batch first)")
      ->excludes("--random")
      ->excludes("--batch");
  return {command, [options] { return run_once(*options); }};
}

}  // namespace tdaot::tool
