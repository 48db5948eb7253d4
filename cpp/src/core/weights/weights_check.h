// Internal: what a weight swap checks of a read weight file against a loaded package before it
// changes anything, and which weights are live. Torch-free, one implementation for both runtimes
// (the full runtime's runtime/weights.cpp, the lite runtime's lite/weights.cpp): each gives the
// constant tables of the models it loaded and applies the constants this returns its own way.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/weights/weights_file.h"
#include "tdaot/dtype.h"

namespace tdaot::detail {

// One constant a model takes: the dtype, shape and strides of its live value (empty strides:
// contiguous). A swap hands the model its new value in those strides (in_layout).
struct ConstantInfo {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  // The original name (AOTInductor's "original FQN": the parameter or buffer it was lifted
  // from), or empty. A swap requires the file's model/<m>/<constant> to hold the same bytes as
  // its weights/<fqn> when the file has one: an edited or mixed file is refused naming the
  // constant (the weights digest covers every constant anyway; this is the earlier, more
  // specific refusal for the constants lifted 1:1 from a weight).
  std::string fqn;
};
// A model's constants by AOTInductor's internal name.
using ConstantTable = std::map<std::string, ConstantInfo>;

// One loaded model, as a swap checks it.
struct SwapTarget {
  std::string name;
  const ConstantTable* table = nullptr;
  std::string unswappable;  // why its weights cannot be swapped, or empty
};

// Checks `file` (read and checked by read_weight_file, its signature by the caller) against the
// package of manifest sha256 `manifest_sha256` holding `package_models`, loaded as `targets`:
// made for this package; every entry weights/<name> or model/<m>/<constant> of a model the
// package holds; for each target, swappable, and exactly its table's constants with their dtypes
// and shapes. Throws WeightsError naming the file and the tensor at fault. Returns, per target in
// order, the file's constants by internal name.
std::vector<std::map<std::string, WeightTensor>> check_swap(
    const WeightFile& file, const std::string& manifest_sha256,
    const std::vector<std::string>& package_models, const std::vector<SwapTarget>& targets);

// Throws WeightsError naming the weight file `weights_path` and the package `package_path` when
// the package records no weights digest (`manifest_weights_sha256` empty: built by an earlier
// tdaot, or where a model of it could not be loaded): no digest could then say which weights it
// runs, so it cannot swap weights.
void check_swappable(const std::string& weights_path, const std::string& package_path,
                     const std::string& manifest_weights_sha256);

// Which weights are live (their sha256) and which were before, for weights_sha256 and rollback.
// Not synchronised: the caller holds its swap lock.
class WeightsLedger {
 public:
  explicit WeightsLedger(std::string built_with) : live_(std::move(built_with)) {}
  const std::string& live() const { return live_; }
  // A swap starts changing the models: until swapped(), there is nothing to roll back to.
  void swapping() { has_previous_ = false; }
  void swapped(const std::string& sha256);
  // Throws WeightsError naming the package when there is nothing to roll back to.
  void check_rollback(const std::string& package_path) const;
  void rolled_back() { std::swap(live_, previous_); }

 private:
  std::string live_;
  std::string previous_;
  bool has_previous_ = false;
};

}  // namespace tdaot::detail
