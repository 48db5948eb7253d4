// Internal: hot weight swap on the lite runtime (lite::Policy::swap_weights, rollback_weights,
// weights_sha256), the full runtime's semantics (runtime/weights.h) with no libtorch:
// - the weight file is read, digested, signature-checked and matched against the package and
//   each loaded model's constant table by the shared core (core/weights), before anything changes;
// - each lite model keeps its live constant set and the previous one; a swap publishes a new set
//   and bumps a generation; a binding brings its own model instance up to date when its next run
//   starts (AOTInductorModelUpdateConstantsMapV2) and never during a run, so a run in flight
//   finishes on the old set; in steady state that check is one atomic load.
// A model's constant table (names, dtypes, shapes) is read once, at the first swap, through its
// library's AOTInductor container entry points (the same table the full runtime reads through
// AOTInductor's runner); that container is kept as the constants the model was built with, for
// rollback. A model whose table cannot be read, or whose library lacks the update entry point, is
// unswappable: a swap is refused naming the model and why.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/run/model_library.h"
#include "core/weights/live_set.h"
#include "core/weights/weights_check.h"

namespace tdaot::detail {

// One constant a model instance is given: contiguous-or-strided memory kept alive by `owner`.
struct LiteConstant {
  std::string name;  // AOTInductor's internal name
  DType dtype = DType::Float32;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;  // empty: contiguous
  void* data = nullptr;
  std::shared_ptr<void> owner;
};
using LiteConstantSet = std::vector<LiteConstant>;

// The swappable constants of one loaded lite model.
class LiteModelWeights {
 public:
  explicit LiteModelWeights(const ModelLibrary& library) : library_(library) {}

  // The model's constant table, read at the first call (the caller holds the policy's swap
  // lock); empty with unswappable() saying why when it cannot be read.
  const ConstantTable& table();
  const std::string& unswappable() const { return unswappable_; }

  // The live and previous constant sets (the built-with set once the table is read).
  LiveSet<LiteConstantSet>& sets() { return sets_; }

  // Before a run, in the binding's thread: gives `instance` (of this model's library, given
  // generation `seen`) the live constant set when a swap or rollback happened since; `held`
  // keeps the set the instance uses alive. One atomic load when nothing changed; allocates only
  // after a swap or rollback. Throws tdaot::Error with the library's message when it fails.
  void refresh(aoti::ModelHandle instance, uint64_t& seen,
               std::shared_ptr<const LiteConstantSet>& held) const;

 private:
  void read_table();

  const ModelLibrary& library_;
  bool table_read_ = false;
  ConstantTable table_;
  std::string unswappable_;
  LiveSet<LiteConstantSet> sets_;
};

// A lite model's steps of a swap; the lock, the ledger and the file's checks are the core's
// (core/run/policy_core.h), shared with the full runtime. Each set is published to the model's
// bindings, which pick it up at their next run.
SwapTarget swap_target(const std::string& name, LiteModelWeights& weights);
void publish_swap(const std::map<std::string, WeightTensor>& constants, LiteModelWeights& weights);

}  // namespace tdaot::detail
