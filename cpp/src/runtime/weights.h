// Internal: hot weight swap (Policy::swap_weights / rollback_weights / weights_sha256).
//
// Every model of a package keeps two sets of constants and swaps between calls:
// - a model run through AOTInductor's runner: its container's active and inactive constant
//   buffers. A swap fills the inactive one (update_constant_buffer) while calls go on, then
//   swap_constant_buffer, which waits for the calls in flight (the container's reader/writer
//   lock: a call runs on one buffer from start to end);
// - an arrayref model (arrayref.h): each model instance holds the constants it was last given.
//   A swap publishes a new constant set and bumps a generation; an instance is brought up to
//   date when a call takes it (InstancePool lease, Binding::run) and never during a call, so a
//   call in flight finishes on the old set. In steady state that check is one atomic load.
// The previous set stays for rollback_weights, which exchanges live and previous.
#pragma once

#include <ATen/Tensor.h>
#include <torch/csrc/inductor/aoti_runner/model_container_runner.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/weights/live_set.h"
#include "core/weights/weights_check.h"
#include "runtime/packed_weights.h"
#include "runtime/arrayref.h"

namespace tdaot::detail {

// One set of constants of one arrayref model, by AOTInductor's internal names.
struct ConstantSet {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;
};

// The swappable constants of one loaded model.
class ModelWeights {
 public:
  // Reads the model's constant table from `runner` (the model's own runner, or one made from
  // the arrayref library only for this). A model whose table cannot be read (its constants'
  // original names collide) is marked unswappable, with the reason.
  explicit ModelWeights(const torch::inductor::AOTIModelContainerRunner& runner);

  // Every constant the model takes: internal name -> (dtype, shape) of its live value.
  const ConstantTable& table() const { return table_; }
  // Why this model cannot swap, or empty.
  const std::string& unswappable() const { return unswappable_; }
  void set_unswappable(std::string why) { unswappable_ = std::move(why); }

  // Arrayref models: brings `handle` (an instance of `library`, given generation `seen`) to
  // the live constant set (a new instance when that is the library's own). Allocates only
  // after a swap or rollback.
  void refresh(const ArrayrefLibrary& library, AOTInductorModelHandle& handle,
               uint64_t& seen) const;
  // Arrayref models: the live and previous constant sets (null: the library's own).
  LiveSet<ConstantSet>& sets() { return sets_; }

 private:
  ConstantTable table_;
  std::string unswappable_;
  LiveSet<ConstantSet> sets_;
};

// One loaded model of a package, as a swap reaches it. The policy-wide part (the lock, which
// weights are live, the file's checks) is the core's (core/run/policy_core.h), shared with the
// lite runtime; these are the full runtime's steps of it.
struct SwapModel {
  std::string name;
  ModelWeights* weights;
  torch::inductor::AOTIModelContainerRunner* runner;  // null for an arrayref model
  PackedWeights* packed = nullptr;                      // its weights packed for oneDNN, if any
};
std::vector<SwapTarget> swap_targets(const std::vector<SwapModel>& models);
// Loads the checked constants beside the live ones (runners: their inactive buffers), then makes
// them live (runners: swap_constant_buffer, which waits for the calls in flight).
void apply_swap(const WeightFile& file, const std::vector<std::map<std::string, WeightTensor>>& per_model,
                const std::vector<SwapModel>& models, c10::Device device);
// Makes the previous weights live again (and the live ones previous).
void exchange_weights(const std::vector<SwapModel>& models);

}  // namespace tdaot::detail
