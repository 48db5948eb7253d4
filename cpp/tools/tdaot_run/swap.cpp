// tdaot-run swap PKG WEIGHTS: the hot weight swap shown on one input. Loads the package, runs
// it on seeded random inputs, swaps in the weight file (tdaot.export_weights) and runs the same
// inputs again, printing the live weights' sha256 and the outputs before and after. With
// --public-key, the package and the weight file must both carry a valid signature by one of
// those keys.
#include <iostream>
#include <memory>

#include "common.h"

namespace tdaot::tool {
namespace {

struct SwapOptions {
  std::string package;
  std::string weights;
  int64_t batch = -1;
  uint64_t seed = 0;
  LoadFlags load;
};

ExitCode swap_once(const SwapOptions& options) {
  const Policy policy(options.package, options.load.policy_options());
  const Manifest& m = policy.manifest();
  const int64_t batch = batch_size(options.batch, m);
  const std::vector<at::Tensor> inputs = make_inputs(m, batch, /*random=*/true, options.seed);
  std::cout << "before: weights sha256 " << policy.weights_sha256() << ", batch " << batch
            << " of random inputs (seed " << options.seed << ")\n";
  print_outputs(m, policy.run_positional(inputs));
  policy.swap_weights(options.weights);
  std::cout << "after swapping in " << options.weights << ": weights sha256 "
            << policy.weights_sha256() << ", the same inputs\n";
  print_outputs(m, policy.run_positional(inputs));
  return kSuccess;
}

}  // namespace

Command add_swap(CLI::App& app) {
  auto options = std::make_shared<SwapOptions>();
  CLI::App* command = add_command(
      app, "swap", "swap in a weight file; print outputs before and after on the same input",
      options->package);
  command->add_option("weights", options->weights, "weight file made by tdaot.export_weights")
      ->required();
  add_batch(command, options->batch);
  add_load_options(command, options->load);
  command->add_option("--seed", options->seed, "seed of the random inputs")->capture_default_str();
  return {command, [options] { return swap_once(*options); }};
}

}  // namespace tdaot::tool
