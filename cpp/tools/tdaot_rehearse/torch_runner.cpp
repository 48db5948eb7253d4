// tdaot-rehearse-torch's policy on the full runtime: tdaot::Session (libtorch, AOTInductor's
// runner or the package's specialised model), batch 1, the same contract and safety envelope as
// the lite runtime's bound run. Inputs are tensors the runner owns and the loop writes in place.
// Without the envelope (--no-envelope), or recording (--record: the flight recorder is the bound
// run's): the full runtime's tdaot::Binding, bound with the envelope or without it (its envelope
// has the Session's rules). The contract's supervisor runs on either unless --no-supervisor.
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "tdaot/torch/binding.h"
#include "tdaot/torch/policy.h"
#include "tdaot/torch/session.h"
#include "tdaot/torch/types.h"
#include "tdaot_rehearse/rehearsal.h"
#include "tdaot_rehearse/runner.h"

namespace tdaot::rehearse {
namespace {

class TorchRunner final : public PolicyRunner {
 public:
  explicit TorchRunner(const std::string& package) : path_(package), policy_(package) {}

  const Manifest& manifest() const override { return policy_.manifest(); }
  const std::optional<Contract>& contract() const override { return policy_.contract(); }
  void bind(bool envelope, bool supervisor, int64_t record) override {
    if (!manifest().batch.contains(1)) {
      throw UsageError("package '" + path_ + "' does not accept batch 1 (batch " +
                       std::to_string(manifest().batch.min) + ".." + std::to_string(manifest().batch.max) + ")");
    }
    SupervisorOptions supervised;
    supervised.enabled = supervisor;
    if (!envelope || record > 0) {
      BindOptions options;
      options.supervisor = supervised;
      options.envelope = envelope;
      options.record = record;
      binding_.emplace(policy_.bind(1, options));
      return;
    }
    session_.emplace(policy_, 1, supervised);
    for (const TensorSpec& spec : session_->inputs()) {
      std::vector<int64_t> shape{1};
      shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
      inputs_.push_back(at::zeros(shape, at::TensorOptions().dtype(to_scalar_type(spec.dtype))));
    }
  }
  void* input_data(const std::string& key, DType dtype) override {
    if (binding_) return checked(binding_->input(key), key, dtype).data_ptr();
    const std::vector<TensorSpec>& specs = session_->inputs();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].key == key) {
        if (specs[i].dtype != dtype) throw UsageError("input '" + key + "' is " + dtype_name(specs[i].dtype));
        return inputs_[i].data_ptr();
      }
    }
    throw UsageError("input '" + key + "' is not one the session takes");
  }
  void run() override {
    if (binding_) return binding_->run();
    outputs_ = session_->step_positional(inputs_);
    for (at::Tensor& out : outputs_) out = out.contiguous();
  }
  const void* output_data(const std::string& key, DType dtype) const override {
    if (binding_) return checked(binding_->output(key), key, dtype).const_data_ptr();
    const auto index = manifest().output_index(key);
    if (!index || manifest().outputs[*index].dtype != dtype) {
      throw UsageError("output '" + key + "' is not a " + dtype_name(dtype) + " output of the package");
    }
    return outputs_.at(*index).const_data_ptr();
  }
  const Interventions& interventions() const override {
    return session_ ? session_->interventions() : binding_->interventions();
  }
  const SupervisorState* supervisor() const override {
    if (session_) return session_->supervised() ? &session_->supervisor() : nullptr;
    return binding_->supervised() ? &binding_->supervisor() : nullptr;
  }
  void dump(const std::string& path) const override {
    if (!binding_) throw UsageError("the rehearsal was not bound to record (--record)");
    binding_->dump(path);
  }
  std::string describe() const override {
    return binding_ ? "full runtime, tdaot::Binding on model " + binding_->model() : "full runtime, tdaot::Session";
  }

 private:
  static const at::Tensor& checked(const at::Tensor& tensor, const std::string& key, DType dtype) {
    if (tensor.scalar_type() != to_scalar_type(dtype)) throw UsageError("'" + key + "' is not " + dtype_name(dtype));
    return tensor;
  }

  std::string path_;
  Policy policy_;
  std::optional<Binding> binding_;  // without the envelope
  std::optional<Session> session_;
  std::vector<at::Tensor> inputs_;
  std::vector<at::Tensor> outputs_;
};

}  // namespace

const char* const kRuntime = "torch";

std::unique_ptr<PolicyRunner> make_runner(const std::string& package) {
  return std::make_unique<TorchRunner>(package);
}

}  // namespace tdaot::rehearse
