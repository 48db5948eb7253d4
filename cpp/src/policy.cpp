// tdaot::Policy: package checks (package.h), host checks, then AOTInductor's runner behind input
// validation.
#include "tdaot/policy.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <utility>

#include "host.h"
#include "ops.h"
#include "policy_impl.h"

#ifdef TDAOT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tdaot {
namespace {

void check_options(const PolicyOptions& options) {
  const auto require = [](bool ok, const char* name, int value, const char* rule) {
    if (!ok) {
      throw Error(std::string("PolicyOptions.") + name + " must be " + rule + ", got " +
                  std::to_string(value));
    }
  };
  require(options.intra_op_threads >= 0, "intra_op_threads", options.intra_op_threads,
          ">= 0 (0 leaves torch's setting alone)");
  require(options.num_runners >= 1, "num_runners", options.num_runners, ">= 1");
  require(options.warmup_runs >= 0, "warmup_runs", options.warmup_runs, ">= 0");
  require(options.device_index >= -1, "device_index", options.device_index,
          ">= -1 (-1 is the current device)");
}

// check_host has already refused cuda packages on hosts without CUDA.
c10::Device model_device(const Manifest& manifest, const PolicyOptions& options,
                         const std::string& path) {
  if (manifest.device != "cuda") return c10::Device(c10::DeviceType::CPU);
#ifdef TDAOT_WITH_CUDA
  (void)path;
  const auto index = options.device_index >= 0 ? static_cast<c10::DeviceIndex>(options.device_index)
                                               : c10::cuda::current_device();
  return c10::Device(c10::DeviceType::CUDA, index);
#else
  (void)options;
  throw HostMismatchError(path, "package '" + path +
                                    "' was built for device 'cuda', but this tdaot runtime was "
                                    "compiled against a torch without CUDA");
#endif
}

// AOTInductor's runner for the device the package was compiled for, on the extracted library.
std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(
    const detail::ExtractedModel& files, const detail::Metadata& metadata,
    const Manifest& manifest, const PolicyOptions& options, c10::Device device,
    const std::string& path) {
  const auto key = metadata.find("AOTI_DEVICE_KEY");
  if (key == metadata.end() || key->second != manifest.device) {
    throw ManifestError(path, "package '" + path + "': AOTInductor's metadata names device '" +
                                  (key == metadata.end() ? std::string("<none>") : key->second) +
                                  "', but the manifest says '" + manifest.device + "'");
  }
  auto& registry = torch::inductor::getAOTIModelRunnerRegistry();
  const auto create = registry.find(key->second);
  if (create == registry.end()) {
    throw HostMismatchError(path, "package '" + path + "' needs AOTInductor's '" + key->second +
                                      "' runner, which this torch does not provide");
  }
  try {
    auto runner = create->second(files.library, static_cast<size_t>(options.num_runners),
                                 device.str(), files.directory(), /*run_single_threaded=*/false);
    if (!files.weights_blob.empty()) runner->update_constant_buffer_from_blob(files.weights_blob);
    return runner;
  } catch (const std::exception& e) {
    throw PackageError(path, "package '" + path + "' could not be loaded by AOTInductor: " +
                                 detail::exception_text(e));
  }
}

}  // namespace

// check_options runs before the package is read, so a bad option never costs a file read.
Policy::Impl::Impl(std::string package_path, const PolicyOptions& opts)
    : Impl((check_options(opts), detail::Package(std::move(package_path), opts)), opts) {}

// The package (and its bytes in memory) lives only until this constructor returns.
Policy::Impl::Impl(const detail::Package& package, const PolicyOptions& opts)
    : path(package.path()),
      options(opts),
      sha256(package.sha256()),
      metadata(package.metadata()),
      manifest(package.manifest()),
      // Packages built for another host are refused before their library is even extracted.
      device((detail::check_host(manifest, path), model_device(manifest, options, path))),
      validator(manifest, device) {
  if (options.intra_op_threads > 0) at::set_num_threads(options.intra_op_threads);
  detail::load_op_libraries(options.op_libraries);
  detail::check_custom_ops(manifest, path);
  files.emplace(package.extract(options.temp_dir));
  runner = create_runner(*files, metadata, manifest, options, device, path);
  warm_up();
  // CPU kernels are all in the library, which stays mapped: the files are no longer needed, so
  // nothing is left behind even if the process is killed later. CUDA kernels load lazily.
  if (!device.is_cuda()) files.reset();
}

void Policy::Impl::warm_up() const {
  if (options.warmup_runs == 0 || manifest.batch.max < 1) return;
  const std::vector<at::Tensor> inputs =
      detail::zero_inputs(manifest, std::max<int64_t>(manifest.batch.min, 1), device);
  // Sequential calls cycle through the container's runners (a finished runner goes to the back
  // of the queue), so runs x num_runners calls warm every one of them.
  const int calls = options.warmup_runs * options.num_runners;
  try {
    for (int i = 0; i < calls; ++i) execute(inputs);
  } catch (const ExecutionError& e) {
    throw ExecutionError(std::string(e.what()) + " (in a warm-up run at load)");
  }
}

std::vector<at::Tensor> Policy::Impl::execute(const std::vector<at::Tensor>& inputs) const {
  // OpenMP's (and MKL's) thread count belongs to the calling thread: at::set_num_threads at
  // load does not reach a control-loop thread started later, which would run ATen ops on the
  // default pool (measured: 2x the p50 and 12 ms stalls at batch 64 on a busy 2-core host).
  // So the option is applied in each calling thread, whenever that thread's count differs.
  const int threads = options.intra_op_threads;
  if (threads > 0 && at::get_num_threads() != threads) at::set_num_threads(threads);
  std::vector<at::Tensor> outputs;
  try {
    // The compiled model is forward-only: its operator calls skip the autograd and
    // ADInplaceOrView dispatch keys (0.86x the time per call on the tutorial policy at batch 1,
    // benchmarks/README.md). Unlike InferenceMode, the outputs stay normal tensors; they never
    // require grad, even for inputs that do.
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    // No stream handle: AOTI's CUDA runner then uses the caller's current stream.
    outputs = runner->run(inputs);
  } catch (const std::exception& e) {
    throw ExecutionError("package '" + path +
                         "': the compiled model failed: " + detail::exception_text(e));
  }
  if (outputs.size() != manifest.outputs.size()) {
    throw ExecutionError("package '" + path + "': the compiled model returned " +
                         std::to_string(outputs.size()) + " outputs, but the manifest lists " +
                         std::to_string(manifest.outputs.size()));
  }
  return outputs;
}

namespace detail {

TensorMap keyed_outputs(const Manifest& manifest, std::vector<at::Tensor>&& outputs) {
  TensorMap result;
  for (size_t i = 0; i < outputs.size(); ++i) {
    result.emplace(manifest.outputs[i].key, std::move(outputs[i]));
  }
  return result;
}

std::vector<int64_t> batched_shape(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

std::vector<at::Tensor> zero_inputs(const Manifest& manifest, int64_t batch, c10::Device device) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(manifest.inputs.size());
  for (const auto& spec : manifest.inputs) {
    inputs.push_back(at::zeros(batched_shape(batch, spec.shape),
                               at::TensorOptions().dtype(spec.dtype).device(device)));
  }
  return inputs;
}

}  // namespace detail

Policy::Policy(const std::string& package_path, const PolicyOptions& options)
    : impl_(std::make_shared<const Impl>(package_path, options)) {}

Policy::~Policy() = default;
Policy::Policy(Policy&&) noexcept = default;
Policy& Policy::operator=(Policy&&) noexcept = default;

const Policy::Impl& Policy::impl() const {
  if (!impl_) throw Error("this tdaot::Policy was moved from; use the Policy it was moved to");
  return *impl_;
}

const Manifest& Policy::manifest() const { return impl().manifest; }

const std::string& Policy::path() const { return impl().path; }

const std::string& Policy::sha256() const { return impl().sha256; }

const std::unordered_map<std::string, std::string>& Policy::metadata() const {
  return impl().metadata;
}

TensorMap Policy::run(const TensorMap& inputs) const {
  const Impl& self = impl();
  return detail::keyed_outputs(self.manifest, self.execute(self.validator.order_keyed(inputs)));
}

std::vector<at::Tensor> Policy::run_positional(const std::vector<at::Tensor>& inputs) const {
  const Impl& self = impl();
  self.validator.check_positional(inputs);
  return self.execute(inputs);
}

}  // namespace tdaot
