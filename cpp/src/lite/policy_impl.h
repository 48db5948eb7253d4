// Internal: the state behind tdaot::lite::Policy, shared with its bindings.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/package/signature.h"
#include "core/run/model_library.h"
#include "lite/weights.h"
#include "tdaot/lite.h"

namespace tdaot::detail {
// The symbols of `needs` (a model's recorded lite needs) that this process does not provide
// (looked up in its global scope, where a model library resolves them), in order: what
// lite::Policy refuses a model for before loading it. Exported for the tests.
std::vector<std::string> unprovided(const std::vector<std::string>& needs);
}  // namespace tdaot::detail

namespace tdaot::lite {

struct Policy::Impl {
  // One loaded lite model: its manifest entry, its library's entry points and its swappable
  // constants (lite/weights.h).
  struct Model {
    ModelSpec spec;
    std::unique_ptr<detail::ModelLibrary> library;
    std::unique_ptr<detail::LiteModelWeights> weights;
  };

  Impl(const std::string& package_path, const Options& options);

  // The lite model serving `batch` (the narrowest range, as Manifest::model_for); throws
  // BatchSizeError naming the served batch sizes.
  const Model& model_for(int64_t batch) const;
  std::vector<int64_t> batch_sizes() const;
  // "model 'b1' (batch 1) of package 'p.pt2'", for messages.
  std::string describe(const Model& model) const;

  // The loaded models as LiteWeights::swap and rollback take them.
  std::vector<detail::LiteWeights::Target> weight_targets() const;

  std::string path;
  std::string sha256;
  // The sha256 of the manifest bytes: what a weight file is matched by (weights_check.h).
  std::string manifest_sha256;
  Manifest manifest;
  std::vector<Model> models;
  // Options::trusted_keys as loaded with the package: swap_weights checks weight files against
  // these, not against whatever the key files hold later.
  std::vector<detail::PublicKey> trusted_keys;
  // Which weights are live; behind a pointer, as Impl is shared const.
  std::unique_ptr<detail::LiteWeights> live_weights;
};

}  // namespace tdaot::lite
