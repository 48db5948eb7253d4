// tdaot-run run PKG: one call on zeros, seeded random inputs (--random) or the inputs of a JSON
// file (--inputs), printing each output's dtype, shape and first values.
//
// An inputs file is a JSON object mapping manifest keys to nested arrays, batch dim first:
//   {"observation": [[0.1, 0.2, 0.3], [0.0, 1.0, -1.0]], "is_init": [[true], [false]]}
// Values are numbers (or true/false), converted to the manifest's dtype; integers are exact up
// to 2^53. Every input must be given; keys, shapes and batch sizes are checked like any run.
#include <ATen/Functions.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "common.h"

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

[[noreturn]] void inputs_file_error(const std::string& path, const std::string& problem) {
  throw Error("inputs file '" + path + "': " + problem);
}

// The shape of a nested JSON array, read along its first elements; `fill` checks the rest.
std::vector<int64_t> nested_shape(const json& value) {
  std::vector<int64_t> shape;
  for (const json* level = &value; level->is_array(); level = &level->front()) {
    shape.push_back(static_cast<int64_t>(level->size()));
    if (level->empty()) break;
  }
  return shape;
}

// Appends the scalars of `value` (at `where`, `depth` dims down) to `flat`, refusing ragged
// arrays and non-numbers.
void fill(const json& value, const std::vector<int64_t>& shape, size_t depth,
          const std::string& where, const std::string& path, std::vector<double>& flat) {
  if (depth == shape.size()) {
    if (value.is_boolean()) {
      flat.push_back(value.get<bool>() ? 1.0 : 0.0);
    } else if (value.is_number()) {
      flat.push_back(value.get<double>());
    } else {
      inputs_file_error(path, where + " is " + value.dump() + ", expected a number or a bool");
    }
    return;
  }
  if (!value.is_array() || static_cast<int64_t>(value.size()) != shape[depth]) {
    inputs_file_error(path, where + " is " +
                                (value.is_array() ? "an array of " + std::to_string(value.size())
                                                  : value.dump()) +
                                ", expected an array of " + std::to_string(shape[depth]) +
                                " (the array is not rectangular)");
  }
  for (size_t i = 0; i < value.size(); ++i) {
    fill(value[i], shape, depth + 1, where + "[" + std::to_string(i) + "]", path, flat);
  }
}

// Inputs keyed by manifest key from a JSON inputs file (see the header comment). Keys the
// manifest lacks are kept (as float32) so that Policy::run reports them like any unknown key.
TensorMap read_inputs_file(const std::string& path, const Manifest& manifest) {
  std::ifstream file(path);
  if (!file) inputs_file_error(path, "cannot be read");
  json root;
  try {
    root = json::parse(file);
  } catch (const json::parse_error& e) {
    inputs_file_error(path, std::string("invalid JSON: ") + e.what());
  }
  if (!root.is_object()) {
    inputs_file_error(path,
                      std::string("expected a JSON object of arrays, got ") + root.type_name());
  }
  TensorMap inputs;
  for (const auto& [key, value] : root.items()) {
    const std::vector<int64_t> shape = nested_shape(value);
    std::vector<double> flat;
    fill(value, shape, 0, "'" + key + "'", path, flat);
    const auto index = manifest.input_index(key);
    const auto dtype = index ? tdaot::to_scalar_type(manifest.inputs[*index].dtype) : at::kFloat;
    const at::Tensor values = at::tensor(flat, at::TensorOptions().dtype(at::kDouble));
    inputs.emplace(key, values.view(shape).to(dtype).to(at::Device(manifest.device)));
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
