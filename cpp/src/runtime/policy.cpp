// tdaot::Policy: package checks (package.h), host checks, then AOTInductor's runner behind input
// validation.
#include "tdaot/torch/policy.h"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/error_text.h"
#include "core/package/digest.h"
#include "runtime/torch_host.h"
#include "runtime/ops.h"
#include "runtime/policy_impl.h"
#include "runtime/heap.h"

#ifdef TDAOT_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace tdaot {
namespace {

// e.what() without the C++ backtrace c10::Error appends, for one-line messages.
std::string exception_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  // TDAOT_BACKTRACE=1 keeps the frames (core/error_text.h); AOTI messages end in newlines.
  return detail::without_backtrace(c10_error && !detail::backtraces_wanted()
                                       ? c10_error->what_without_backtrace()
                                       : e.what());
}

void check_options(const PolicyOptions& options) {
  const auto require = [](bool ok, const char* name, int value, const char* rule) {
    if (!ok) {
      throw InvalidArgumentError(std::string("PolicyOptions.") + name + " must be " + rule + ", got " +
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

// Refuses a model whose AOTInductor metadata names another device than the manifest.
void check_device_key(const detail::ExtractedModel& files, const detail::Metadata& metadata,
                      const Manifest& manifest, const std::string& path) {
  const auto key = metadata.find("AOTI_DEVICE_KEY");
  if (key == metadata.end() || key->second != manifest.device) {
    const std::string which = manifest.models.size() > 1 ? " of model '" + files.name + "'" : "";
    throw ManifestError(path, "package '" + path + "': AOTInductor's metadata" + which +
                                  " names device '" +
                                  (key == metadata.end() ? std::string("<none>") : key->second) +
                                  "', but the manifest says '" + manifest.device + "'");
  }
}

std::string load_failure(const detail::ExtractedModel& files, const Manifest& manifest,
                         const std::string& path, const std::string& why) {
  const std::string which = manifest.models.size() > 1 ? "model '" + files.name + "': " : "";
  return "package '" + path + "' could not be loaded by AOTInductor: " + which + why;
}

// AOTInductor's runner for the device the package was compiled for, on the extracted library.
std::unique_ptr<torch::inductor::AOTIModelContainerRunner> create_runner(
    const detail::ExtractedModel& files, const detail::Metadata& metadata,
    const Manifest& manifest, size_t num_runners, c10::Device device, const std::string& path) {
  const auto key = metadata.find("AOTI_DEVICE_KEY");
  auto& registry = torch::inductor::getAOTIModelRunnerRegistry();
  const auto create = registry.find(key->second);
  if (create == registry.end()) {
    throw HostMismatchError(path, "package '" + path + "' needs AOTInductor's '" + key->second +
                                      "' runner, which this torch does not provide");
  }
  try {
    auto runner = create->second(files.library, num_runners, device.str(), files.directory,
                                 /*run_single_threaded=*/false);
    if (!files.weights_blob.empty()) runner->update_constant_buffer_from_blob(files.weights_blob);
    return runner;
  } catch (const std::exception& e) {
    throw PackageError(path, load_failure(files, manifest, path, exception_text(e)));
  }
}

// The arrayref route for a model that has it (see Policy::Impl::Model), else null.
std::unique_ptr<detail::ArrayrefLibrary> open_arrayref(const detail::ExtractedModel& files,
                                                       const ModelSpec& spec,
                                                       const Manifest& manifest, c10::Device device,
                                                       const std::string& path) {
  // A model instance made from the library alone has no proxy executor (through which
  // AOTInductor calls custom operators) and no weights from a separate blob.
  if (device.is_cuda() || spec.batch.dynamic() || !files.weights_blob.empty() ||
      !manifest.custom_ops.empty()) {
    return nullptr;
  }
  try {
    return detail::ArrayrefLibrary::open(files.library);
  } catch (const std::exception& e) {
    throw PackageError(path, load_failure(files, manifest, path, e.what()));
  }
}

// The models to load: every one the manifest lists, or the one PolicyOptions::model_name names.
std::vector<std::string> models_to_load(const detail::Package& package,
                                        const PolicyOptions& options) {
  if (!options.model_name.empty()) {
    package.require_model(options.model_name);
    return {options.model_name};
  }
  std::vector<std::string> names;
  for (const auto& model : package.manifest().models) names.push_back(model.name);
  return names;
}

}  // namespace

// check_options runs before the package is read, so a bad option never costs a file read.
Policy::Impl::Impl(std::string package_path, const PolicyOptions& opts)
    : Impl((check_options(opts), detail::Package(std::move(package_path), opts)), opts) {}

// The package (and its bytes in memory) lives only until this constructor returns.
Policy::Impl::Impl(const detail::Package& package, const PolicyOptions& opts)
    : PolicyCore(package, opts),
      options(opts),
      metadata(package.metadata()),
      // Packages built for another host are refused before their library is even extracted.
      device((detail::check_host(manifest, path, detail::current_host()), model_device(manifest, options, path))),
      validator(manifest, device) {
  if (options.intra_op_threads > 0) at::set_num_threads(options.intra_op_threads);
  if (options.keep_freed_memory) detail::keep_freed_memory();
  detail::load_op_libraries(options.op_libraries);
  detail::check_custom_ops(manifest, path);
  files.emplace(package.extract(options.temp_dir, models_to_load(package, options)));
  for (const detail::ExtractedModel& extracted : files->models) {
    Model model;
    model.spec = &*std::find_if(manifest.models.begin(), manifest.models.end(),
                                [&](const ModelSpec& spec) { return spec.name == extracted.name; });
    const detail::Metadata& model_metadata = package.metadata(extracted.name);
    check_device_key(extracted, model_metadata, manifest, path);
    model.arrayref = open_arrayref(extracted, *model.spec, manifest, device, path);
    if (model.arrayref) {
      try {
        model.instances =
            std::make_unique<detail::InstancePool>(*model.arrayref, options.num_runners);
      } catch (const Error& e) {
        throw PackageError(path, load_failure(extracted, manifest, path, e.what()));
      }
      // A runner on the same library, only to read the model's constant table.
      const auto probe = create_runner(extracted, model_metadata, manifest, 1, device, path);
      model.weights = std::make_unique<detail::ModelWeights>(*probe);
      if (model.arrayref->update_constants == nullptr) {
        model.weights->set_unswappable("its library lacks AOTInductorModelUpdateConstantsMapV2");
      }
    } else {
      model.runner = create_runner(extracted, model_metadata, manifest,
                                   static_cast<size_t>(options.num_runners), device, path);
      model.weights = std::make_unique<detail::ModelWeights>(*model.runner);
      if (detail::PackedWeights::wanted(*model.spec) && !device.is_cuda()) {
        model.packed = std::make_unique<detail::PackedWeights>(*model.spec, model.weights->table(), path);
        model.packed->pack_live(*model.runner);
      }
    }
    models.push_back(std::move(model));
  }
  for (const Model& model : models) loaded_specs.push_back(model.spec);
  warm_up();
  // CPU kernels are all in the libraries, which stay mapped: the files are no longer needed, so
  // nothing is left behind even if the process is killed later. CUDA kernels load lazily.
  if (!device.is_cuda()) files.reset();
}

void Policy::Impl::warm_up() const {
  if (options.warmup_runs == 0) return;
  for (const Model& model : models) {
    const std::vector<at::Tensor> inputs = detail::zero_inputs(manifest, model.spec->batch.min, device);
    // Sequential calls cycle through the container's runners (a finished runner goes to the
    // back of the queue), so runs x num_runners calls warm every one of them.
    const int calls = options.warmup_runs * options.num_runners;
    try {
      for (int i = 0; i < calls; ++i) execute(model, inputs);
    } catch (const ExecutionError& e) {
      throw ExecutionError(std::string(e.what()) + " (in a warm-up run at load)");
    }
  }
}

const Policy::Impl::Model& Policy::Impl::model_for(int64_t batch, const std::string& key) const {
  // Manifest::model_for's rule among the loaded models: no allocation, a few comparisons.
  const size_t best = model_index(batch);
  if (best != npos) return models[best];
  // Only with PolicyOptions::model_name: every batch of the range is served by some model.
  std::string loaded;
  for (const Model& model : models) loaded += (loaded.empty() ? "'" : ", '") + model.spec->name + "'";
  throw BatchSizeError(key, (key.empty() ? "batch size " : "input '" + key + "' has batch size ") +
                                std::to_string(batch) + ", which package '" + path +
                                "' serves with a model that is not loaded (loaded: " + loaded +
                                ", by PolicyOptions::model_name); its models: " +
                                manifest.describe_models());
}

void Policy::Impl::apply_intra_op_threads() const {
  // OpenMP's (and MKL's) thread count belongs to the calling thread: at::set_num_threads at
  // load does not reach a control-loop thread started later, which would run ATen ops on the
  // default pool (measured: 2x the p50 and 12 ms stalls at batch 64 on a busy 2-core host).
  // So the option is applied in each calling thread, whenever that thread's count differs.
  const int threads = options.intra_op_threads;
  if (threads > 0 && at::get_num_threads() != threads) at::set_num_threads(threads);
}

std::string Policy::Impl::describe(const Model& model) const {
  if (manifest.models.size() == 1) return "package '" + path + "'";
  return "model '" + model.spec->name + "' of package '" + path + "'";
}

std::vector<at::Tensor> Policy::Impl::execute(const std::vector<at::Tensor>& inputs) const {
  return execute(model_for(inputs.front().size(0), manifest.inputs.front().key), inputs);
}

std::vector<at::Tensor> Policy::Impl::execute_arrayref(
    const Model& model, const std::vector<at::Tensor>& inputs) const {
  std::vector<AOTInductorArrayRefTensor> in;
  in.reserve(inputs.size());
  for (const at::Tensor& input : inputs) in.push_back(detail::describe(input));
  std::vector<AOTInductorArrayRefTensor> out(manifest.outputs.size());
  std::vector<at::Tensor> outputs;
  outputs.reserve(out.size());
  const int64_t batch = inputs.front().size(0);
  for (const TensorSpec& spec : manifest.outputs) {
    outputs.push_back(at::empty(detail::batched_shape(batch, spec.shape), at::dtype(to_scalar_type(spec.dtype))));
  }
  const detail::InstancePool::Lease instance(*model.instances);
  model.weights->refresh(*model.arrayref, instance.handle(), instance.generation());
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // for any ATen call it makes
    if (model.arrayref->run(instance.handle(), static_cast<int32_t>(in.size()), in.data(),
                            static_cast<int32_t>(out.size()), out.data()) != AOTI_RUNTIME_SUCCESS) {
      throw ExecutionError(describe(model) + ": the compiled model failed: " +
                           model.arrayref->error_text());
    }
  }
  // Read now: the arrays are the library's thread_local ones, reused by this thread's next call.
  const std::string problem =
      detail::copy_outputs(out, detail::output_slots(outputs, manifest.outputs), manifest.outputs);
  if (!problem.empty()) throw ExecutionError(describe(model) + ": the compiled model " + problem);
  return outputs;
}

std::vector<at::Tensor> Policy::Impl::execute(const Model& model,
                                              const std::vector<at::Tensor>& inputs) const {
  apply_intra_op_threads();
  if (model.instances) return execute_arrayref(model, inputs);
  const std::optional<int64_t>& rows = model.spec->chunk_rows;
  if (rows && inputs.front().size(0) > *rows) return execute_slices(model, inputs, *rows);
  return execute_runner(model, inputs);
}

namespace {

// Copies `from` into `to`: by memory when both are CPU contiguous of one dtype and size (a
// binding's outputs, a runner's results), which skips the dispatcher's few microseconds per
// tensor; else copy_. Throws ExecutionError via `fail` when the sizes differ.
template <typename Fail>
void copy_output(at::Tensor& to, const at::Tensor& from, const Fail& fail) {
  if (!to.sizes().equals(from.sizes())) fail(to, from);
  if (to.is_cpu() && from.is_cpu() && to.is_contiguous() && from.is_contiguous() &&
      to.scalar_type() == from.scalar_type()) {
    std::memcpy(to.mutable_data_ptr(), from.const_data_ptr(), from.nbytes());
  } else {
    to.copy_(from);
  }
}

}  // namespace

void Policy::Impl::execute_into(const Model& model, const std::vector<at::Tensor>& inputs,
                                std::vector<at::Tensor>& outputs) const {
  const auto fail = [&](const at::Tensor& to, const at::Tensor& from) {
    const size_t i = static_cast<size_t>(&to - outputs.data());
    throw ExecutionError(describe(model) + ": the compiled model returned output '" +
                         manifest.outputs[i].key + "' of shape " + format_shape(from.sizes().vec()) +
                         ", expected " + format_shape(to.sizes().vec()));
  };
  apply_intra_op_threads();
  const int64_t batch = inputs.front().size(0);
  const std::optional<int64_t>& rows = model.spec->chunk_rows;
  if (model.instances || !rows || batch <= *rows) {
    const std::vector<at::Tensor> results =
        model.instances ? execute_arrayref(model, inputs) : execute_runner(model, inputs);
    for (size_t i = 0; i < results.size(); ++i) copy_output(outputs[i], results[i], fail);
    return;
  }
  // The slices execute() would run, each copied straight into its rows of `outputs`.
  std::vector<at::Tensor> slice(inputs.size());
  std::vector<at::Tensor> rows_of(outputs.size());
  for (int64_t start = 0; start < batch;) {
    const int64_t length = slice_length(model, batch, start, *rows);
    for (size_t i = 0; i < inputs.size(); ++i) slice[i] = inputs[i].narrow(0, start, length);
    const std::vector<at::Tensor> part = execute_runner(model, slice);
    for (size_t i = 0; i < part.size(); ++i) {
      rows_of[i] = outputs[i].narrow(0, start, length);
      copy_output(rows_of[i], part[i], [&](const at::Tensor&, const at::Tensor& from) {
        fail(outputs[i], from);
      });
    }
    start += length;
  }
}

int64_t Policy::Impl::slice_length(const Model& model, int64_t batch, int64_t start, int64_t rows) {
  int64_t length = std::min(rows, batch - start);
  // A remainder the model does not serve (below its smallest batch) joins this slice.
  const int64_t rest = batch - start - length;
  if (rest > 0 && rest < model.spec->batch.min) length += rest;
  return length;
}

std::vector<at::Tensor> Policy::Impl::execute_slices(const Model& model,
                                                     const std::vector<at::Tensor>& inputs,
                                                     int64_t rows) const {
  const int64_t batch = inputs.front().size(0);
  std::vector<at::Tensor> outputs;
  std::vector<at::Tensor> slice(inputs.size());
  for (int64_t start = 0; start < batch;) {
    const int64_t length = slice_length(model, batch, start, rows);
    for (size_t i = 0; i < inputs.size(); ++i) slice[i] = inputs[i].narrow(0, start, length);
    const std::vector<at::Tensor> part = execute_runner(model, slice);
    if (outputs.empty()) {
      for (const at::Tensor& output : part) {
        std::vector<int64_t> shape = output.sizes().vec();
        shape.front() = batch;
        outputs.push_back(at::empty(shape, output.options()));
      }
    }
    for (size_t i = 0; i < part.size(); ++i) outputs[i].narrow(0, start, length).copy_(part[i]);
    start += length;
  }
  return outputs;
}

std::vector<at::Tensor> Policy::Impl::execute_runner(const Model& model,
                                                     const std::vector<at::Tensor>& inputs) const {
  std::vector<at::Tensor> outputs;
  try {
    // The compiled model is forward-only: its operator calls skip the autograd and
    // ADInplaceOrView dispatch keys (0.86x the time per call on the tutorial policy at batch 1,
    // benchmarks/README.md). Unlike InferenceMode, the outputs stay normal tensors; they never
    // require grad, even for inputs that do.
    const at::AutoDispatchBelowADInplaceOrView below_autograd;
    // No stream handle: AOTI's CUDA runner then uses the caller's current stream.
    outputs = model.runner->run(inputs);
  } catch (const std::exception& e) {
    throw ExecutionError(describe(model) + ": the compiled model failed: " +
                         exception_text(e));
  }
  if (outputs.size() != manifest.outputs.size()) {
    throw ExecutionError(describe(model) + ": the compiled model returned " +
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

void check_batch_in_range(const Manifest& manifest, const std::string& path, int64_t batch,
                          const std::string& what) {
  if (manifest.batch.contains(batch)) return;
  std::string message = what + " of batch size " + std::to_string(batch) + " for package '" +
                        path + "', which accepts batch sizes " + std::to_string(manifest.batch.min) +
                        ".." + std::to_string(manifest.batch.max);
  if (manifest.models.size() > 1) message += " (models " + manifest.describe_models() + ")";
  throw BatchSizeError("", message);
}

std::vector<at::Tensor> zero_inputs(const Manifest& manifest, int64_t batch, c10::Device device) {
  std::vector<at::Tensor> inputs;
  inputs.reserve(manifest.inputs.size());
  for (const auto& spec : manifest.inputs) {
    inputs.push_back(at::zeros(batched_shape(batch, spec.shape),
                               at::TensorOptions().dtype(to_scalar_type(spec.dtype)).device(device)));
  }
  return inputs;
}

}  // namespace detail

Policy::Policy(const std::string& package_path, const PolicyOptions& options)
    : PolicyBase(std::make_shared<const Impl>(package_path, options), "tdaot::Policy") {}

TensorMap Policy::run(const TensorMap& inputs) const {
  const Impl& self = core_as<Impl>();
  return detail::keyed_outputs(self.manifest, self.execute(self.validator.order_keyed(inputs)));
}

std::vector<at::Tensor> Policy::run_positional(const std::vector<at::Tensor>& inputs) const {
  const Impl& self = core_as<Impl>();
  self.validator.check_positional(inputs);
  return self.execute(inputs);
}

}  // namespace tdaot
