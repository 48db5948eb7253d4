// Internal: the state both runtimes' Policy share (tdaot/policy_base.h), and the one place each
// runtime's own Impl plugs into: its loaded models' specs and its weight swap. Torch-free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/package/package.h"
#include "core/package/signature.h"
#include "core/weights/weights_check.h"
#include "core/weights/weights_file.h"
#include "tdaot/manifest.h"
#include "tdaot/package.h"
#include "tdaot/policy_base.h"

namespace tdaot::detail {

class PolicyCore {
 public:
  virtual ~PolicyCore() = default;
  PolicyCore(const PolicyCore&) = delete;
  PolicyCore& operator=(const PolicyCore&) = delete;

  // The index, in loaded_specs, of the loaded model a call at `batch` runs on: the narrowest
  // range holding it, ties to the first (Manifest::model_for's rule); npos when none does.
  size_t model_index(int64_t batch) const;
  static constexpr size_t npos = static_cast<size_t>(-1);
  // PolicyBase::batch_sizes.
  std::vector<int64_t> batch_sizes() const;
  // The names of every model the manifest lists (loaded or not): what a weight file must cover.
  std::vector<std::string> model_names() const;

  // PolicyBase's weight calls, serialised by one lock: `file` (read and signature-checked by
  // PolicyBase) checked against every loaded model (check_swap), all before anything changes,
  // then made live by the runtime (apply_swap); a rollback exchanges live and previous.
  void swap_weights(const WeightFile& file) const;
  void rollback_weights() const;
  std::string weights_sha256() const;
  // Counts the weight changes made live: even between them, odd while swap_weights or
  // rollback_weights makes weights live. A step that reads the same even value before and after
  // it ran on the weights of generation value / 2 (the flight recorder's attribution).
  uint64_t weights_version() const noexcept { return weights_version_.load(std::memory_order_acquire); }
  // The live weights' digest and generation (weights_version / 2), read together.
  std::pair<std::string, uint64_t> live_weights() const;

  std::string path;
  std::string sha256;  // of the package file
  // Of its manifest bytes: the package's identity for weight files, unchanged by signing.
  std::string manifest_sha256;
  // Its manifest bytes as the package stores them: what a flight log carries.
  std::string manifest_json;
  Manifest manifest;
  // PackageOptions::trusted_keys as loaded with the package: swap_weights checks weight files
  // against these, whatever happens to the key files later.
  std::vector<PublicKey> trusted_keys;
  // The specs of the loaded models, in the order of the runtime's own model list; filled by the
  // runtime once its models are loaded.
  std::vector<const ModelSpec*> loaded_specs;

 protected:
  // Reads what every runtime keeps of the verified `package`.
  PolicyCore(const Package& package, const PackageOptions& options);

  // The runtime's part of a weight swap, called under the swap lock. swap_targets: each loaded
  // model's constant table (and why it cannot swap, if so). apply_swap: makes `per_model`
  // (check_swap's result, per target) live between calls; may throw WeightsError only for what
  // the checks cannot see (memory, the model refusing its constants). exchange_weights: makes
  // the previous set live again and the live one previous.
  virtual std::vector<SwapTarget> swap_targets() const = 0;
  virtual void apply_swap(const WeightFile& file,
                          const std::vector<std::map<std::string, WeightTensor>>& per_model) const = 0;
  virtual void exchange_weights() const = 0;

 private:
  mutable std::mutex weights_mutex_;
  mutable WeightsLedger ledger_;  // which weights are live (behind the lock)
  mutable std::atomic<uint64_t> weights_version_{0};
};

}  // namespace tdaot::detail
