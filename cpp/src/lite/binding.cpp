// tdaot::lite::Binding: owned input and output buffers for one batch size, run in place through
// the model's plain C entry point; for a recurrent package a bound session (tdaot/lite.h).
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>

#include "core/run/binding_core.h"
#include "core/run/buffer_envelope.h"
#include "core/run/carry.h"
#include "core/run/supervisor.h"
#include "lite/policy_impl.h"

namespace tdaot::lite {
namespace {

constexpr const char* kConcurrentUse =
    "tdaot::lite::Binding used from two threads at once: a binding is for one thread; bind one "
    "per thread (bindings may share one Policy)";

struct FreeAligned {
  void operator()(void* p) const { std::free(p); }
};

// One input or output of `spec`'s dtype and [batch, *shape], 64-byte aligned and zeroed, its
// memory held in `storage`.
BoundBuffer allocate(const TensorSpec& spec, int64_t batch,
                     std::vector<std::unique_ptr<void, FreeAligned>>& storage) {
  BoundBuffer b{spec.key, spec.dtype, {batch}, nullptr, 0};
  b.shape.insert(b.shape.end(), spec.shape.begin(), spec.shape.end());
  int64_t count = 1;
  for (int64_t d : b.shape) count *= d;
  b.bytes = static_cast<size_t>(count) * element_size(b.dtype);
  const size_t rounded = b.bytes == 0 ? 64 : (b.bytes + 63) / 64 * 64;
  storage.emplace_back(std::aligned_alloc(64, rounded));
  if (!storage.back()) throw std::bad_alloc();
  b.data = storage.back().get();
  std::memset(b.data, 0, rounded);
  return b;
}

}  // namespace

struct Binding::Impl : detail::BindingCore {
  Impl(std::shared_ptr<const Policy::Impl> policy_impl, int64_t rows, const BindOptions& options)
      : BindingCore(policy_impl->manifest, policy_impl->path, rows, kConcurrentUse),
        policy(std::move(policy_impl)),
        model(policy->model_for(rows)),
        instance(*model.library, model.inplace ? model.inplace->create(*model.library) : nullptr),
        carry(manifest) {
    for (const TensorSpec& spec : manifest.inputs) inputs.push_back(allocate(spec, batch, storage));
    for (const TensorSpec& spec : manifest.outputs) outputs.push_back(allocate(spec, batch, storage));
    for (const BoundBuffer& b : inputs) {
      if (b.shape.size() > static_cast<size_t>(detail::aoti::kMaxDims)) {
        fail("takes an input of " + std::to_string(b.shape.size()) + " dims (at most " +
             std::to_string(detail::aoti::kMaxDims) + ")");
      }
      in.push_back(detail::describe(b.data, b.dtype, b.shape));
      input_data.push_back(b.data);
    }
    for (const BoundBuffer& b : outputs) {
      output_data.push_back(b.data);
      output_slots.push_back({b.data, b.dtype, b.shape});
    }
    std::vector<void*> state_data;
    std::vector<size_t> state_bytes;
    for (const BoundBuffer& b : inputs) {
      state_data.push_back(b.data);
      state_bytes.push_back(b.bytes);
    }
    buffers.emplace(std::move(state_data), std::move(state_bytes), output_data, batch);
    out.resize(outputs.size());
    size_t count = 0;
    if (model.library->num_outputs(instance.handle(), &count) != detail::aoti::kSuccess ||
        count != outputs.size()) {
      fail("has " + std::to_string(count) + " outputs, but the manifest lists " +
           std::to_string(outputs.size()));
    }
    // One call on the zero inputs checks what the model writes against the manifest and makes
    // this thread's output arrays; nothing is carried.
    call();
    if (options.envelope) envelope.emplace(manifest, batch);
    const std::optional<Supervisor> config =
        detail::chosen_supervisor(manifest, policy->path, options.supervisor);
    if (config) supervisor.emplace(manifest, *config, batch);
    carry.reset(*buffers);  // every row starts new
    std::vector<detail::RecordedBuffer> recorded_in, recorded_out;
    for (const BoundBuffer& b : inputs) recorded_in.push_back({b.key, b.dtype, b.shape, b.data, b.bytes});
    for (const BoundBuffer& b : outputs) recorded_out.push_back({b.key, b.dtype, b.shape, b.data, b.bytes});
    start_recording(options, *policy, "lite", config ? &*config : nullptr, std::move(recorded_in),
                    std::move(recorded_out));
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw ExecutionError(policy->describe(model) + ": the compiled model " + problem +
                         " (lite binding of batch size " + std::to_string(batch) + ")");
  }

  // The model on the inputs, its outputs copied into the owned output buffers.
  void call() {
    const detail::ModelLibrary& lib = *model.library;
    model.weights->refresh(instance.handle(), weights_generation, weights_held);  // after a swap
    if (lib.run(instance.handle(), static_cast<int32_t>(in.size()), in.data(),
                static_cast<int32_t>(out.size()), out.data()) != detail::aoti::kSuccess) {
      fail("failed: " + lib.error_text());
    }
    // The library's output arrays are thread_local and may move between calls: read them now.
    const std::string problem = detail::copy_outputs(out.data(), output_slots, manifest.outputs);
    if (!problem.empty()) fail(problem);
  }

  const std::string& model_name() const override { return model.spec.name; }

  void step() override {
    call();
    if (supervisor) supervisor->observe(input_data, output_data);
    const bool stands = !envelope || envelope->guard(input_data, output_data);
    if (supervisor) {
      supervisor->apply(input_data, output_data, envelope ? &envelope->limited_rows() : nullptr);
    }
    // A non-finite step does not count: the state stays, is_init marks stay for the next run.
    if (stands) carry.after_step(*buffers);
  }

  void reset_rows(const std::vector<bool>* rows) override {
    if (rows == nullptr) {
      carry.reset(*buffers);
      if (envelope) envelope->reset();
      if (supervisor) supervisor->reset();
      return;
    }
    buffers->set_rows(*rows);
    carry.reset_rows(*buffers);
    if (envelope) envelope->reset(*rows);
    if (supervisor) supervisor->reset(*rows);
  }

  const Interventions* envelope_counts() const override {
    if (!envelope && !supervisor) return nullptr;
    counts = envelope ? envelope->interventions() : Interventions{};
    if (supervisor) supervisor->add_counts(counts);
    return &counts;
  }

  const SupervisorState* supervisor_state(int64_t row) const override {
    return supervisor ? &supervisor->state(row) : nullptr;
  }

  std::shared_ptr<const Policy::Impl> policy;
  const Policy::Impl::Model& model;
  // The weights generation `instance` has, and the swapped-in constants it reads (lite/weights.h).
  uint64_t weights_generation = 0;
  std::shared_ptr<const detail::LiteConstantSet> weights_held;
  detail::ModelInstance instance;  // this binding's own (over the library's weights when it can)
  std::vector<std::unique_ptr<void, FreeAligned>> storage;  // the buffers' memory
  std::vector<BoundBuffer> inputs;
  std::vector<BoundBuffer> outputs;
  std::vector<detail::aoti::ArrayRefTensor> in;
  std::vector<detail::aoti::ArrayRefTensor> out;  // filled by each call: the library's own arrays
  std::vector<const void*> input_data;
  std::vector<void*> output_data;
  std::vector<detail::OutputSlot> output_slots;  // where each call's outputs are copied
  detail::Carry carry;                       // recurrent packages: the state and is_init inputs
  std::optional<detail::HostBuffers> buffers;  // the carry's view of the buffers
  std::optional<detail::BufferEnvelope> envelope;
  std::optional<detail::TargetSupervisor> supervisor;  // BindOptions::supervisor
  mutable Interventions counts;  // envelope_counts(): the envelope's and the supervisor's
};

Binding::Binding(std::unique_ptr<Impl> impl) : BindingBase(std::move(impl), "tdaot::lite::Binding") {}

void* Binding::input_data(const std::string& key, DType dtype) {
  Impl& self = core_as<Impl>();
  const size_t i = self.index_of(key, /*output=*/false);
  if (self.inputs[i].dtype != dtype) {
    throw DtypeError(key, "input '" + key + "' has dtype " + dtype_name(self.inputs[i].dtype) +
                              ", not " + dtype_name(dtype));
  }
  return self.inputs[i].data;
}

const void* Binding::output_data(const std::string& key, DType dtype) const {
  const Impl& self = core_as<Impl>();
  const size_t i = self.index_of(key, /*output=*/true);
  if (self.outputs[i].dtype != dtype) {
    throw DtypeError(key, "output '" + key + "' has dtype " + dtype_name(self.outputs[i].dtype) +
                              ", not " + dtype_name(dtype));
  }
  return self.outputs[i].data;
}

std::vector<int64_t> Binding::input_shape(const std::string& key) const {
  const Impl& self = core_as<Impl>();
  return self.inputs[self.index_of(key, /*output=*/false)].shape;
}

std::vector<int64_t> Binding::output_shape(const std::string& key) const {
  const Impl& self = core_as<Impl>();
  return self.outputs[self.index_of(key, /*output=*/true)].shape;
}

const std::vector<BoundBuffer>& Binding::inputs() const { return core_as<Impl>().inputs; }

const std::vector<BoundBuffer>& Binding::outputs() const { return core_as<Impl>().outputs; }

Binding Policy::bind(int64_t batch, const BindOptions& options) const {
  if (options.cuda_graph) {
    throw InvalidArgumentError("BindOptions::cuda_graph is for CUDA packages on the full runtime "
                               "(tdaot::Policy); the lite runtime runs CPU models only");
  }
  return Binding(std::make_unique<Binding::Impl>(shared_core_as<Impl>(), batch, options));
}

}  // namespace tdaot::lite
