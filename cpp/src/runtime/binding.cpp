// tdaot::Binding: owned inputs and outputs for one batch size, run in place; on a model with the
// minimal arrayref interface through its plain C entry point (see tdaot/binding.h).
#include "tdaot/torch/binding.h"

#include <ATen/Functions.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/run/binding_core.h"
#include "core/run/carry.h"
#include "runtime/carry_buffers.h"
#include "runtime/cuda_graph.h"
#include "runtime/envelope.h"
#include "runtime/policy_impl.h"

namespace tdaot {
namespace {

constexpr const char* kConcurrentUse =
    "tdaot::Binding used from two threads at once: a binding is for one thread; bind one per "
    "thread (bindings may share one Policy)";

at::Tensor zeros(int64_t batch, const TensorSpec& spec, c10::Device device) {
  return at::zeros(detail::batched_shape(batch, spec.shape),
                   at::TensorOptions().dtype(to_scalar_type(spec.dtype)).device(device));
}

}  // namespace

struct Binding::Impl : detail::BindingCore {
  Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows, const BindOptions& options);
  ~Impl() override;

  const std::string& model_name() const override { return model->spec->name; }
  void step() override;
  void reset_rows(const std::vector<bool>* rows) override;
  const Interventions* envelope_counts() const override {
    return envelope ? &envelope->interventions() : nullptr;
  }
  const SupervisorState* supervisor_state(int64_t row) const override {
    return envelope ? envelope->supervisor(row) : nullptr;
  }
  // The allocation-free path: the model's C entry point on the owned buffers.
  void run_arrayref();
  // AOTInductor's runner on the owned inputs, its outputs copied into the owned ones.
  void run_runner();
  void set_up_arrayref();
  void set_up_cuda_graph();
  // Throws tdaot::Error when an input or output no longer has the memory it was bound with.
  void check_bound_memory() const;
  bool buffers_in_place() const noexcept override;
  [[noreturn]] void fail(const std::string& problem) const;

  std::shared_ptr<const Policy::Impl> policy;
  const Policy::Impl::Model* model;
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> outputs;
  // The allocation-free path: this binding's model instance and the descriptors of its buffers.
  const detail::ArrayrefLibrary* library = nullptr;
  detail::OwnedInstance instance;               // deleted with the Impl, or when set-up throws
  AOTInductorModelHandle& handle = instance.handle;
  uint64_t weights_generation = 0;  // of the constants `handle` has (weights.h)
  std::vector<AOTInductorArrayRefTensor> in;
  std::vector<AOTInductorArrayRefTensor> out;  // filled by each call: the library's own arrays
  std::vector<void*> input_data;               // the owned inputs' memory, as bound
  std::vector<void*> output_data;              // the owned outputs' memory, as bound
  std::vector<std::vector<int64_t>> input_sizes;   // their sizes, as bound
  std::vector<std::vector<int64_t>> output_sizes;
  std::vector<detail::OutputSlot> output_slots;  // where each call's outputs are copied
  detail::Carry carry;  // recurrent packages: the state and is_init inputs
  std::unique_ptr<detail::CudaGraphRun> graph;  // BindOptions::cuda_graph
  std::optional<detail::Envelope> envelope;  // BindOptions::envelope, and/or the supervisor
};

Binding::Impl::Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows,
                    const BindOptions& options)
    : BindingCore(policy_impl->manifest, policy_impl->path, rows, kConcurrentUse),
      policy(std::move(policy_impl)),
      carry(manifest) {
  detail::check_batch_in_range(manifest, policy->path, batch, "a binding");
  if (options.record != 0 && !policy->device.is_cpu()) {
    throw InvalidArgumentError("BindOptions::record = " + std::to_string(options.record) + ": package '" +
                               policy->path + "' runs on '" + manifest.device +
                               "', and the flight recorder records CPU bindings only (copying device "
                               "buffers each run would synchronise with the device)");
  }
  model = &policy->model_for(batch, "");
  for (const TensorSpec& spec : manifest.inputs) inputs.push_back(zeros(batch, spec, policy->device));
  for (const TensorSpec& spec : manifest.outputs) {
    outputs.push_back(zeros(batch, spec, policy->device));
  }
  detail::TensorBuffers buffers(inputs);
  carry.reset(buffers);  // every row starts new
  for (const at::Tensor& input : inputs) {
    input_data.push_back(input.data_ptr());
    input_sizes.push_back(input.sizes().vec());
  }
  for (const at::Tensor& output : outputs) {
    output_data.push_back(output.data_ptr());
    output_sizes.push_back(output.sizes().vec());
  }
  if (options.cuda_graph) {
    set_up_cuda_graph();
  } else if (model->arrayref) {
    set_up_arrayref();
  }
  std::optional<Supervisor> supervisor =
      detail::chosen_supervisor(manifest, policy->path, options.supervisor);
  if (options.envelope || supervisor) envelope.emplace(manifest, batch, options.envelope, supervisor);
  std::vector<detail::RecordedBuffer> recorded_in, recorded_out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    recorded_in.push_back({manifest.inputs[i].key, manifest.inputs[i].dtype, input_sizes[i], input_data[i],
                           inputs[i].nbytes()});
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    recorded_out.push_back({manifest.outputs[i].key, manifest.outputs[i].dtype, output_sizes[i],
                            output_data[i], outputs[i].nbytes()});
  }
  start_recording(options, *policy, "full", supervisor ? &*supervisor : nullptr, std::move(recorded_in),
                  std::move(recorded_out));
}

void Binding::Impl::set_up_cuda_graph() {
  if (!policy->device.is_cuda()) {
    throw InvalidArgumentError("BindOptions::cuda_graph is for CUDA packages, but package '" + policy->path +
                "' was built for device '" + manifest.device + "'");
  }
  // CUDA packages keep their extracted files while loaded (their kernels load lazily).
  graph = std::make_unique<detail::CudaGraphRun>(
      policy->files->model(model->spec->name), policy->device, inputs, outputs,
      policy->describe(*model) + " (binding of batch size " + std::to_string(batch) + ")");
}

void Binding::Impl::set_up_arrayref() {
  for (const auto* list : {&inputs, &outputs}) {
    for (const at::Tensor& tensor : *list) {
      if (tensor.dim() > AOTI_ARRAYREF_TENSOR_MAX_DIMS) return;  // the runner's path takes any
    }
  }
  const detail::ArrayrefLibrary& lib = *model->arrayref;
  // Its own instance (with its own copy of the constants embedded in the library), used by
  // this binding's thread only: the Policy's instances serve its other callers.
  try {
    instance.library = &lib;
    handle = lib.new_instance();
  } catch (const Error& e) {
    fail(e.what());
  }
  library = &lib;
  size_t count = 0;
  if (lib.num_outputs(handle, &count) != AOTI_RUNTIME_SUCCESS || count != outputs.size()) {
    fail("has " + std::to_string(count) + " outputs, but the manifest lists " +
         std::to_string(outputs.size()));
  }
  for (const at::Tensor& input : inputs) in.push_back(detail::describe(input));
  out.resize(outputs.size());
  output_slots = detail::output_slots(outputs, manifest.outputs);
  // One call on the zero inputs checks what the model writes against the manifest (it changes
  // no state: nothing is carried), and makes this thread's output arrays.
  if (lib.run(handle, static_cast<int32_t>(in.size()), in.data(), static_cast<int32_t>(out.size()),
              out.data()) != AOTI_RUNTIME_SUCCESS) {
    fail("failed on zero inputs: " + lib.error_text());
  }
  const std::string problem = detail::copy_outputs(out, output_slots, manifest.outputs);
  if (!problem.empty()) fail(problem + " (on zero inputs)");
}

Binding::Impl::~Impl() = default;

void Binding::Impl::fail(const std::string& problem) const {
  throw ExecutionError(policy->describe(*model) + ": the compiled model " + problem +
                       " (binding of batch size " + std::to_string(batch) + ")");
}

void Binding::Impl::reset_rows(const std::vector<bool>* rows) {
  detail::TensorBuffers buffers(inputs);
  if (rows == nullptr) {
    carry.reset(buffers);
    if (envelope) envelope->reset();
    return;
  }
  // The carry selects rows by a bool tensor on the policy's device.
  at::Tensor mask = at::empty({batch}, at::TensorOptions().dtype(at::kBool));
  bool* data = mask.mutable_data_ptr<bool>();
  for (int64_t row = 0; row < batch; ++row) data[row] = (*rows)[static_cast<size_t>(row)];
  mask = mask.to(policy->device);
  buffers.set_rows(mask);
  carry.reset_rows(buffers);
  if (envelope) envelope->reset(*rows);
}

void Binding::Impl::step() {
  policy->apply_intra_op_threads();
  if (graph) {
    check_bound_memory();
    graph->replay();
  } else if (handle != nullptr) {
    run_arrayref();
  } else {
    run_runner();
  }
  // A non-finite step does not count: the state stays, is_init marks stay for the next run.
  if (envelope && !envelope->guard(inputs, outputs)) return;
  detail::TensorBuffers buffers(inputs, outputs);
  carry.after_step(buffers);
}

namespace {
// Whether tensor `i` of `list` still has the memory and sizes it was bound with.
bool bound_in_place(const std::vector<at::Tensor>& list, const std::vector<void*>& data,
                    const std::vector<std::vector<int64_t>>& sizes, size_t i) noexcept {
  return list[i].data_ptr() == data[i] && list[i].sizes().equals(sizes[i]);
}
}  // namespace

void Binding::Impl::check_bound_memory() const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!bound_in_place(inputs, input_data, input_sizes, i)) {
      throw InvalidArgumentError("input '" + manifest.inputs[i].key +
                  "' of the binding no longer has the memory it was bound with "
                  "(resize_ or set_?); write a binding's tensors in place");
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!bound_in_place(outputs, output_data, output_sizes, i)) {
      throw InvalidArgumentError("output '" + manifest.outputs[i].key +
                  "' of the binding no longer has the memory it was bound with "
                  "(resize_ or set_?); read a binding's tensors in place");
    }
  }
}

bool Binding::Impl::buffers_in_place() const noexcept {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!bound_in_place(inputs, input_data, input_sizes, i)) return false;
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!bound_in_place(outputs, output_data, output_sizes, i)) return false;
  }
  return true;
}

void Binding::Impl::run_arrayref() {
  model->weights->refresh(*library, handle, weights_generation);  // after a swap only
  check_bound_memory();
  {
    const at::AutoDispatchBelowADInplaceOrView below_autograd;  // for any ATen call it makes
    if (library->run(handle, static_cast<int32_t>(in.size()), in.data(),
                     static_cast<int32_t>(out.size()), out.data()) != AOTI_RUNTIME_SUCCESS) {
      fail("failed: " + library->error_text());
    }
  }
  // The library's output arrays are thread_local and may move between calls: read them now.
  const std::string problem = detail::copy_outputs(out, output_slots, manifest.outputs);
  if (!problem.empty()) fail(problem);
}

void Binding::Impl::run_runner() {
  // The plain call's code (Policy::Impl::execute: the model for the batch, its chunking), on
  // the binding's own inputs, the results copied into its outputs by memory. The inputs were
  // valid when bound; a tensor resized or re-pointed by its user since is refused here, and
  // nothing else about them can change, so the validator the plain call runs is not needed.
  check_bound_memory();
  policy->execute_into(*model, inputs, outputs);
}

Binding::Binding(std::unique_ptr<Impl> impl) : BindingBase(std::move(impl), "tdaot::Binding") {}

bool Binding::allocation_free() const { return core_as<Impl>().handle != nullptr; }

bool Binding::cuda_graph() const { return core_as<Impl>().graph != nullptr; }

at::Tensor Binding::input(const std::string& key) const {
  const Impl& self = core_as<Impl>();
  return self.inputs[self.index_of(key, /*output=*/false)];
}

at::Tensor Binding::output(const std::string& key) const {
  const Impl& self = core_as<Impl>();
  return self.outputs[self.index_of(key, /*output=*/true)];
}

const std::vector<at::Tensor>& Binding::inputs() const { return core_as<Impl>().inputs; }

const std::vector<at::Tensor>& Binding::outputs() const { return core_as<Impl>().outputs; }

void Binding::reset(const at::Tensor& mask) {
  const Impl& self = core_as<Impl>();
  detail::check_reset_mask(mask, self.batch, self.policy->device, "binding");
  const at::Tensor rows = mask.to(at::kCPU).contiguous();
  const bool* selected = rows.const_data_ptr<bool>();
  BindingBase::reset(std::vector<bool>(selected, selected + self.batch));
}

Binding Policy::bind(int64_t batch, const BindOptions& options) const {
  return Binding(std::make_unique<Binding::Impl>(shared_core_as<Impl>(), batch, options));
}

}  // namespace tdaot
