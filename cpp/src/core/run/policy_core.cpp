// What both runtimes' Policy share (policy_core.h, tdaot/policy_base.h).
#include "core/run/policy_core.h"

#include <algorithm>
#include <utility>

#include "core/manifest/manifest_internal.h"
#include "core/package/digest.h"
#include "tdaot/errors.h"

namespace tdaot {
namespace detail {
namespace {

// Marks the weights version odd while `version`'s owner makes weights live, and even again
// however that ends (a failed swap leaves the old weights live: a new generation all the same,
// which only costs a recording that spans it its attribution).
class WeightsChange {
 public:
  explicit WeightsChange(std::atomic<uint64_t>& version) : version_(version) {
    version_.fetch_add(1, std::memory_order_acq_rel);
  }
  ~WeightsChange() { version_.fetch_add(1, std::memory_order_acq_rel); }
  WeightsChange(const WeightsChange&) = delete;
  WeightsChange& operator=(const WeightsChange&) = delete;

 private:
  std::atomic<uint64_t>& version_;
};

}  // namespace

PolicyCore::PolicyCore(const Package& package, const PackageOptions& options)
    : path(package.path()),
      sha256(package.sha256()),
      manifest_sha256(sha256_hex(package.manifest_bytes())),
      manifest_json(package.manifest_bytes()),
      manifest(package.manifest()),
      // The package was just verified with the same keys, so they load.
      trusted_keys(load_public_keys(options.trusted_keys, path)),
      // The digest of every tensor a weight file of the unchanged policy holds ("" where the
      // build could not compute it: such a package cannot swap weights).
      ledger_(manifest.weights_sha256) {}

void PolicyCore::swap_weights(const WeightFile& file) const {
  check_swappable(file.path, path, manifest.weights_sha256);
  const std::lock_guard<std::mutex> lock(weights_mutex_);
  const auto per_model = check_swap(file, manifest_sha256, model_names(), swap_targets());
  // Everything is checked: until the runtime has applied it, there is nothing to roll back to.
  ledger_.swapping();
  {
    const WeightsChange change(weights_version_);
    apply_swap(file, per_model);
  }
  ledger_.swapped(file.weights_sha256);
}

void PolicyCore::rollback_weights() const {
  const std::lock_guard<std::mutex> lock(weights_mutex_);
  ledger_.check_rollback(path);
  {
    const WeightsChange change(weights_version_);
    exchange_weights();
  }
  ledger_.rolled_back();
}

std::string PolicyCore::weights_sha256() const {
  const std::lock_guard<std::mutex> lock(weights_mutex_);
  return ledger_.live();
}

std::pair<std::string, uint64_t> PolicyCore::live_weights() const {
  const std::lock_guard<std::mutex> lock(weights_mutex_);  // no change is being made live
  return {ledger_.live(), weights_version() / 2};
}

size_t PolicyCore::model_index(int64_t batch) const {
  const size_t best = narrowest_model(loaded_specs.size(), batch,
                                      [&](size_t i) -> const ModelSpec& { return *loaded_specs[i]; });
  return best == loaded_specs.size() ? npos : best;
}

std::vector<int64_t> PolicyCore::batch_sizes() const {
  std::vector<int64_t> sizes;
  for (const ModelSpec* spec : loaded_specs) {
    for (int64_t b = spec->batch.min; b <= spec->batch.max; ++b) sizes.push_back(b);
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<std::string> PolicyCore::model_names() const {
  std::vector<std::string> names;
  for (const ModelSpec& model : manifest.models) names.push_back(model.name);
  return names;
}

}  // namespace detail

PolicyBase::PolicyBase(std::shared_ptr<const detail::PolicyCore> core, const char* type_name)
    : core_(std::move(core)), type_name_(type_name) {}
PolicyBase::~PolicyBase() = default;
PolicyBase::PolicyBase(PolicyBase&&) noexcept = default;
PolicyBase& PolicyBase::operator=(PolicyBase&&) noexcept = default;

const detail::PolicyCore& PolicyBase::core() const {
  if (!core_) {
    throw InvalidArgumentError(std::string("this ") + type_name_ +
                               " was moved from; use the Policy it was moved to");
  }
  return *core_;
}

const Manifest& PolicyBase::manifest() const { return core().manifest; }
const std::optional<Contract>& PolicyBase::contract() const { return core().manifest.contract; }
const std::string& PolicyBase::path() const { return core().path; }
const std::string& PolicyBase::sha256() const { return core().sha256; }
std::vector<int64_t> PolicyBase::batch_sizes() const { return core().batch_sizes(); }

void PolicyBase::swap_weights(const std::string& weights_path) const {
  const detail::PolicyCore& self = core();
  // A package that cannot swap is refused before the file is read.
  detail::check_swappable(weights_path, self.path, self.manifest.weights_sha256);
  self.swap_weights(detail::read_swap_file(weights_path, self.trusted_keys));
}

std::string PolicyBase::weights_sha256() const { return core().weights_sha256(); }

void PolicyBase::rollback_weights() const { core().rollback_weights(); }

}  // namespace tdaot
