// Internal: the state behind tdaot::lite::Policy, shared with its bindings.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/package/signature.h"
#include "core/run/model_library.h"
#include "core/run/policy_core.h"
#include "lite/inplace_constants.h"
#include "lite/weights.h"
#include "tdaot/lite.h"

namespace tdaot::detail {
// The symbols of `needs` (a model's recorded lite needs) that this process does not provide
// (looked up in its global scope, where a model library resolves them), in order: what
// lite::Policy refuses a model for before loading it. Exported for the tests.
std::vector<std::string> unprovided(const std::vector<std::string>& needs);
}  // namespace tdaot::detail

namespace tdaot::lite {

struct Policy::Impl : detail::PolicyCore {
  // One loaded lite model: its manifest entry, its library's entry points, its swappable
  // constants (lite/weights.h) and, when readable, their layout in the library for instances
  // that use them in place (null: AOTInductor copies them, for the reason `inplace_why`;
  // lite/inplace_constants.h), as Policy::constants() reports it.
  struct Model {
    ModelSpec spec;
    std::unique_ptr<detail::ModelLibrary> library;
    std::unique_ptr<detail::LiteModelWeights> weights;
    std::unique_ptr<const detail::InplaceConstants> inplace;
    std::string inplace_why;  // "" when `inplace` is set
  };

  Impl(const std::string& package_path, const PolicyOptions& options);

  // The lite model serving `batch` (PolicyCore::model_index); throws BatchSizeError naming the
  // served batch sizes.
  const Model& model_for(int64_t batch) const;
  // "model 'b1' (batch 1) of package 'p.pt2'", for messages.
  std::string describe(const Model& model) const;

  // PolicyCore's weight swap steps: each model's live constant set, picked up by its bindings'
  // next run.
  std::vector<detail::SwapTarget> swap_targets() const override;
  void apply_swap(const detail::WeightFile& file,
                  const std::vector<std::map<std::string, detail::WeightTensor>>& per_model) const override;
  void exchange_weights() const override;

  std::vector<Model> models;  // in the order of PolicyCore::loaded_specs

 private:
  Impl(const detail::Package& package, const PolicyOptions& options);
};

}  // namespace tdaot::lite
