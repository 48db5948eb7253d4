#include "common.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>

#include "core/manifest/manifest_internal.h"

namespace tdaot::tool {

CLI::App* add_command(CLI::App& app, const char* name, const char* description,
                      std::string& package) {
  CLI::App* command = app.add_subcommand(name, description);
  command->add_option("package", package, "path to a .pt2 package built by tdaot")->required();
  return command;
}

void add_sha256(CLI::App* command, std::string& expected_sha256) {
  command->add_option("--sha256", expected_sha256,
                      "refuse any package whose sha256 is not this one "
                      "(PolicyOptions::expected_sha256)");
}

void add_public_keys(CLI::App* command, std::vector<std::string>& trusted_keys) {
  command->add_option("--public-key", trusted_keys,
                      "refuse any package (and weight file) without a valid signature by this "
                      "Ed25519 public key (PEM file; repeatable: any one; "
                      "PolicyOptions::trusted_keys)");
}

PolicyOptions LoadFlags::policy_options() const {
  PolicyOptions options;
  options.op_libraries = op_libraries;
  options.expected_sha256 = expected_sha256;
  options.temp_dir = temp_dir;
  options.trusted_keys = trusted_keys;
  return options;
}

void add_load_options(CLI::App* command, LoadFlags& flags) {
  command->add_option("--op-lib", flags.op_libraries,
                      "shared library registering custom operators the package calls "
                      "(repeatable; PolicyOptions::op_libraries)");
  add_sha256(command, flags.expected_sha256);
  add_public_keys(command, flags.trusted_keys);
  command->add_option("--temp-dir", flags.temp_dir,
                      "where the package is extracted while loading (default $TMPDIR or /tmp; "
                      "PolicyOptions::temp_dir)");
}

void add_batch(CLI::App* command, int64_t& batch) {
  command->add_option("--batch", batch, "batch size (default: the package's smallest)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
}

int64_t batch_size(int64_t requested, const Manifest& manifest) {
  return requested >= 0 ? requested : manifest.batch.min;
}

std::vector<at::Tensor> make_tensors(const std::vector<TensorSpec>& specs,
                                     const std::string& device, int64_t batch, bool random,
                                     uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<at::Tensor> inputs;
  for (const auto& spec : specs) {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    const auto options = at::TensorOptions().dtype(tdaot::to_scalar_type(spec.dtype));
    at::Tensor tensor;
    if (!random) {
      tensor = at::zeros(shape, options);
    } else if (spec.dtype == at::kBool) {
      tensor = at::randint(0, 2, shape, generator, options);
    } else if (c10::isIntegralType(tdaot::to_scalar_type(spec.dtype), /*includeBool=*/false)) {
      tensor = at::randint(0, 10, shape, generator, options);
    } else {
      tensor = at::randn(shape, generator, options);
    }
    inputs.push_back(tensor.to(at::Device(device)));
  }
  return inputs;
}

std::vector<at::Tensor> make_inputs(const Manifest& manifest, int64_t batch, bool random,
                                    uint64_t seed) {
  return make_tensors(manifest.inputs, manifest.device, batch, random, seed);
}

int key_width(const std::vector<TensorSpec>& specs) {
  size_t width = 0;
  for (const auto& spec : specs) width = std::max(width, spec.key.size());
  return static_cast<int>(width);
}

namespace {

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

}  // namespace

void print_outputs(const Manifest& manifest, const std::vector<at::Tensor>& outputs) {
  const int width = key_width(manifest.outputs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    std::cout << "  " << std::left << std::setw(width) << manifest.outputs[i].key << "  "
              << std::setw(8) << dtype_name(outputs[i].scalar_type()) << "  " << std::setw(12)
              << format_shape(outputs[i].sizes().vec()) << "  " << first_values(outputs[i])
              << "\n";
  }
}

}  // namespace tdaot::tool
