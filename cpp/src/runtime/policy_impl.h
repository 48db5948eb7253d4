// Internal: the state behind tdaot::Policy, shared with tdaot::Session and tdaot::Binding.
#pragma once

#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/arrayref.h"
#include "core/package/package.h"
#include "core/package/signature.h"
#include "core/run/policy_core.h"
#include "tdaot/torch/policy.h"
#include "runtime/validation.h"
#include "runtime/weights.h"

namespace tdaot {

struct Policy::Impl : detail::PolicyCore {
  // One loaded model of the package, run through one of two routes.
  struct Model {
    const ModelSpec* spec;  // in Impl::manifest
    // A library exporting the minimal arrayref interface (tdaot's static-batch CPU latency
    // models, constants embedded, no custom operators): its plain C entry points, and
    // num_runners instances for Policy calls (arrayref.h says why never AOTInductor's container).
    std::unique_ptr<detail::ArrayrefLibrary> arrayref;
    std::unique_ptr<detail::InstancePool> instances;
    // Any other model: AOTInductor's runner. Thread-safe: its container hands each call one of
    // num_runners model instances and blocks while none is free. Non-const only because
    // AOTIModelContainerRunner::run is not.
    std::unique_ptr<torch::inductor::AOTIModelContainerRunner> runner;
    // Its swappable constants (weights.h).
    std::unique_ptr<detail::ModelWeights> weights;
    // A runner model's weights given to oneDNN packed (packed_weights.h), or null.
    std::unique_ptr<detail::PackedWeights> packed;
  };

  Impl(std::string package_path, const PolicyOptions& options);

  // The loaded model a call at `batch` runs on (Manifest::model_for among the loaded models).
  // Throws BatchSizeError, naming `key`, when none serves it: with PolicyOptions::model_name
  // set, a batch of the package's range that the chosen model does not serve.
  const Model& model_for(int64_t batch, const std::string& key) const;
  // Runs validated inputs (in manifest order) on the model for their batch size and checks
  // the output count.
  std::vector<at::Tensor> execute(const std::vector<at::Tensor>& inputs) const;
  std::vector<at::Tensor> execute(const Model& model, const std::vector<at::Tensor>& inputs) const;
  // execute() on a runner model, the call whole.
  std::vector<at::Tensor> execute_runner(const Model& model, const std::vector<at::Tensor>& inputs) const;
  // execute() of a call of more than `rows` rows (the model's ModelSpec::chunk_rows): the runner
  // on slices of at most `rows` rows, their outputs copied into new tensors of the whole batch.
  // The model's intermediates then stay the size of a slice: above glibc's mmap threshold each
  // call mapped, faulted in and unmapped them afresh (tdaot.builder.tuning).
  std::vector<at::Tensor> execute_slices(const Model& model, const std::vector<at::Tensor>& inputs,
                                         int64_t rows) const;
  // A runner model's call on validated `inputs`, its outputs copied into `outputs` (the
  // manifest's shapes at the inputs' batch, CPU contiguous or on the policy's device): what
  // execute() runs, chunked the same way, for a Binding's buffers. Throws ExecutionError when
  // the model returns another shape.
  void execute_into(const Model& model, const std::vector<at::Tensor>& inputs,
                    std::vector<at::Tensor>& outputs) const;
  // The length of the slice at `start` of a call of `batch` rows chunked by `rows`.
  static int64_t slice_length(const Model& model, int64_t batch, int64_t start, int64_t rows);
  // execute() on an arrayref model: the outputs are new contiguous tensors.
  std::vector<at::Tensor> execute_arrayref(const Model& model,
                                           const std::vector<at::Tensor>& inputs) const;
  // Applies PolicyOptions::intra_op_threads to the calling thread when its count differs
  // (OpenMP's count belongs to each thread). Allocates nothing.
  void apply_intra_op_threads() const;
  // "model 'b1' of package 'p'" (or "package 'p'" when the package has one model).
  std::string describe(const Model& model) const;

  // PolicyCore's weight swap steps: the runners' constant buffers, the arrayref instances' sets.
  std::vector<detail::SwapTarget> swap_targets() const override;
  void apply_swap(const detail::WeightFile& file,
                  const std::vector<std::map<std::string, detail::WeightTensor>>& per_model) const override;
  void exchange_weights() const override;

  PolicyOptions options;
  detail::Metadata metadata;
  // The device inputs must be on: cpu, or cuda with the index the model was loaded on.
  c10::Device device;
  detail::InputValidator validator;  // refers to `manifest`; Impl never moves (held by pointer)
  // The extracted files, while the runners need them (see PolicyOptions::temp_dir).
  std::optional<detail::Extraction> files;
  std::vector<Model> models;  // the loaded models, in manifest order (PolicyCore::loaded_specs')
  // The loaded models as the swap steps take them.
  std::vector<detail::SwapModel> swap_models() const;

 private:
  Impl(const detail::Package& package, const PolicyOptions& options);
  void warm_up() const;
};

namespace detail {

// Outputs in manifest order, keyed by manifest key.
TensorMap keyed_outputs(const Manifest& manifest, std::vector<at::Tensor>&& outputs);

// Zero tensors for every input of `manifest` at `batch`, on `device`.
std::vector<at::Tensor> zero_inputs(const Manifest& manifest, int64_t batch, c10::Device device);

// [batch, *shape]
std::vector<int64_t> batched_shape(int64_t batch, const std::vector<int64_t>& shape);

// Throws BatchSizeError (with no key) when `manifest`'s range lacks `batch`: "<what> of batch
// size N for package 'p', which accepts batch sizes A..B (models ...)".
void check_batch_in_range(const Manifest& manifest, const std::string& path, int64_t batch,
                          const std::string& what);

// Checks a reset mask (bool [batch] on `device`) for `owner` ("session", "binding").
void check_reset_mask(const at::Tensor& mask, int64_t batch, c10::Device device,
                      const char* owner);

// Sets every element of the rows of `tensor` ([batch, ...]) where the checked `mask` is true.
void fill_masked_rows(at::Tensor& tensor, const at::Tensor& mask, bool value);

}  // namespace detail
}  // namespace tdaot
