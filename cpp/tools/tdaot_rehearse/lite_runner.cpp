// tdaot-rehearse's policy on the lite runtime: tdaot::lite::Binding, batch 1, no libtorch.
#include <algorithm>

#include "tdaot/lite.h"
#include "tdaot_rehearse/rehearsal.h"
#include "tdaot_rehearse/runner.h"

namespace tdaot::rehearse {
namespace {

class LiteRunner final : public PolicyRunner {
 public:
  explicit LiteRunner(const std::string& package) : path_(package), policy_(package) {}

  const Manifest& manifest() const override { return policy_.manifest(); }
  const std::optional<Contract>& contract() const override { return policy_.contract(); }
  void bind(bool envelope, bool supervisor, int64_t record) override {
    const std::vector<int64_t> served = policy_.batch_sizes();
    if (std::find(served.begin(), served.end(), 1) == served.end()) {
      throw UsageError("package '" + path_ +
                       "' has no batch-1 lite model (build it with batch 1, or the default tuning, which "
                       "specialises batch 1; or rehearse it with --runtime torch)");
    }
    lite::BindOptions options;
    options.envelope = envelope;
    options.supervisor.enabled = supervisor;
    options.record = record;
    binding_.emplace(policy_.bind(1, options));
  }
  void* input_data(const std::string& key, DType dtype) override { return binding_->input_data(key, dtype); }
  void run() override { binding_->run(); }
  const void* output_data(const std::string& key, DType dtype) const override {
    return binding_->output_data(key, dtype);
  }
  const Interventions& interventions() const override { return binding_->interventions(); }
  const SupervisorState* supervisor() const override {
    return binding_->supervised() ? &binding_->supervisor() : nullptr;
  }
  void dump(const std::string& path) const override { binding_->dump(path); }
  std::string describe() const override { return "lite model " + binding_->model(); }

 private:
  std::string path_;
  lite::Policy policy_;
  std::optional<lite::Binding> binding_;
};

}  // namespace

const char* const kRuntime = "lite";

std::unique_ptr<PolicyRunner> make_runner(const std::string& package) {
  return std::make_unique<LiteRunner>(package);
}

}  // namespace tdaot::rehearse
