// tdaot::Binding: owned inputs and outputs for one batch size, run in place; on a model with the
// minimal arrayref interface through its plain C entry point (see tdaot/binding.h).
#include "tdaot/binding.h"

#include <ATen/Functions.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/run/busy_guard.h"
#include "core/run/carry.h"
#include "runtime/carry_buffers.h"
#include "runtime/cuda_graph.h"
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

const at::Tensor& find(const std::vector<TensorSpec>& specs, const std::vector<at::Tensor>& tensors,
                       const std::string& key, const char* kind) {
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].key == key) return tensors[i];
  }
  throw UnknownKeyError(key, std::string("unknown ") + kind + " key '" + key +
                                 "'; the binding's " + kind + "s: " + detail::key_list(specs));
}

}  // namespace

struct Binding::Impl {
  Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows, const BindOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  void run();
  // The allocation-free path: the model's C entry point on the owned buffers.
  void run_arrayref();
  // AOTInductor's runner on the owned inputs, its outputs copied into the owned ones.
  void run_runner();
  void set_up_arrayref();
  void set_up_cuda_graph();
  // Throws tdaot::Error when an input or output no longer has the memory it was bound with.
  void check_bound_memory() const;
  [[noreturn]] void fail(const std::string& problem) const;
  void require_recurrent() const;

  std::shared_ptr<const Policy::Impl> policy;
  const Manifest& manifest;
  int64_t batch;
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
  std::vector<detail::OutputSlot> output_slots;  // where each call's outputs are copied
  detail::Carry carry;  // recurrent packages: the state and is_init inputs
  std::unique_ptr<detail::CudaGraphRun> graph;  // BindOptions::cuda_graph
  std::atomic<bool> busy{false};
};

Binding::Impl::Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows,
                    const BindOptions& options)
    : policy(std::move(policy_impl)), manifest(policy->manifest), batch(rows), carry(manifest) {
  detail::check_batch_in_range(manifest, policy->path, batch, "a binding");
  model = &policy->model_for(batch, "");
  for (const TensorSpec& spec : manifest.inputs) inputs.push_back(zeros(batch, spec, policy->device));
  for (const TensorSpec& spec : manifest.outputs) {
    outputs.push_back(zeros(batch, spec, policy->device));
  }
  detail::TensorBuffers buffers(inputs);
  carry.reset(buffers);  // every row starts new
  for (const at::Tensor& input : inputs) input_data.push_back(input.data_ptr());
  for (const at::Tensor& output : outputs) output_data.push_back(output.data_ptr());
  if (options.cuda_graph) {
    set_up_cuda_graph();
  } else if (model->arrayref) {
    set_up_arrayref();
  }
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

void Binding::Impl::require_recurrent() const {
  if (!manifest.recurrent) {
    throw InvalidArgumentError("package '" + policy->path +
                "' is not recurrent (its manifest has no 'recurrent' section): a binding of it "
                "has no state to reset");
  }
}

void Binding::Impl::run() {
  policy->apply_intra_op_threads();
  if (graph) {
    check_bound_memory();
    graph->replay();
  } else if (handle != nullptr) {
    run_arrayref();
  } else {
    run_runner();
  }
  detail::TensorBuffers buffers(inputs, outputs);
  carry.after_step(buffers);
}

void Binding::Impl::check_bound_memory() const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].data_ptr() != input_data[i]) {
      throw Error("input '" + manifest.inputs[i].key +
                  "' of the binding no longer has the memory it was bound with (resize_ or "
                  "set_?); write a binding's tensors in place");
    }
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].data_ptr() != output_data[i]) {
      throw Error("output '" + manifest.outputs[i].key +
                  "' of the binding no longer has the memory it was bound with (resize_ or "
                  "set_?); read a binding's tensors in place");
    }
  }
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
  policy->validator.check_positional(inputs);  // a tensor resized by its user is refused here
  const std::vector<at::Tensor> results = policy->execute(*model, inputs);
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].sizes() != outputs[i].sizes()) {
      fail("returned output '" + manifest.outputs[i].key + "' of shape " +
           format_shape(results[i].sizes().vec()) + ", expected " +
           format_shape(outputs[i].sizes().vec()));
    }
    outputs[i].copy_(results[i]);
  }
}

Binding::Binding(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Binding::~Binding() = default;
Binding::Binding(Binding&&) noexcept = default;
Binding& Binding::operator=(Binding&&) noexcept = default;

Binding::Impl& Binding::impl() const {
  if (!impl_) throw InvalidArgumentError("this tdaot::Binding was moved from; use the Binding it was moved to");
  return *impl_;
}

int64_t Binding::batch() const { return impl().batch; }

const std::string& Binding::model() const { return impl().model->spec->name; }

bool Binding::allocation_free() const { return impl().handle != nullptr; }

bool Binding::cuda_graph() const { return impl().graph != nullptr; }

at::Tensor Binding::input(const std::string& key) const {
  const Impl& self = impl();
  return find(self.manifest.inputs, self.inputs, key, "input");
}

at::Tensor Binding::output(const std::string& key) const {
  const Impl& self = impl();
  return find(self.manifest.outputs, self.outputs, key, "output");
}

const std::vector<at::Tensor>& Binding::inputs() const { return impl().inputs; }

const std::vector<at::Tensor>& Binding::outputs() const { return impl().outputs; }

void Binding::run() {
  Impl& self = impl();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  self.run();
}

void Binding::reset() {
  Impl& self = impl();
  self.require_recurrent();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  detail::TensorBuffers buffers(self.inputs);
  self.carry.reset(buffers);
}

void Binding::reset(const at::Tensor& mask) {
  Impl& self = impl();
  self.require_recurrent();
  detail::BusyGuard guard(self.busy, kConcurrentUse);
  detail::check_reset_mask(mask, self.batch, self.policy->device, "binding");
  detail::TensorBuffers buffers(self.inputs);
  buffers.set_rows(mask);
  self.carry.reset_rows(buffers);
}

Binding Policy::bind(int64_t batch, const BindOptions& options) const {
  impl();  // throws for a moved-from Policy
  return Binding(std::make_unique<Binding::Impl>(impl_, batch, options));
}

}  // namespace tdaot
