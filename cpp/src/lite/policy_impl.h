// Internal: the state behind tdaot::lite::Policy, shared with its bindings.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/run/model_library.h"
#include "tdaot/lite.h"

namespace tdaot::detail {
// The symbols of `needs` (a model's recorded lite needs) that this process does not provide
// (looked up in its global scope, where a model library resolves them), in order: what
// lite::Policy refuses a model for before loading it. Exported for the tests.
std::vector<std::string> unprovided(const std::vector<std::string>& needs);
}  // namespace tdaot::detail

namespace tdaot::lite {

struct Policy::Impl {
  // One loaded lite model: its manifest entry and its library's entry points.
  struct Model {
    ModelSpec spec;
    std::unique_ptr<detail::ModelLibrary> library;
  };

  Impl(const std::string& package_path, const Options& options);

  // The lite model serving `batch` (the narrowest range, as Manifest::model_for); throws
  // BatchSizeError naming the served batch sizes.
  const Model& model_for(int64_t batch) const;
  std::vector<int64_t> batch_sizes() const;
  // "model 'b1' (batch 1) of package 'p.pt2'", for messages.
  std::string describe(const Model& model) const;

  std::string path;
  std::string sha256;
  Manifest manifest;
  std::vector<Model> models;
};

}  // namespace tdaot::lite
