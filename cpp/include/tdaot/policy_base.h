// tdaot::PolicyBase: what a loaded package is, whichever runtime loaded it. tdaot::Policy (the
// full runtime, tdaot/policy.h) and tdaot::lite::Policy (tdaot/lite.h) both derive from it, so
// these calls are written and documented once. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tdaot/contract.h"
#include "tdaot/manifest.h"

namespace tdaot {

namespace detail {
class PolicyCore;  // the shared state behind both runtimes' Policy (src/core/run/policy_core.h)
}  // namespace detail

class PolicyBase {
 public:
  // The manifest read from the package.
  const Manifest& manifest() const;
  // The deployment contract the package was built with (tdaot/contract.h), or nullopt.
  const std::optional<Contract>& contract() const;
  // The path the package was loaded from.
  const std::string& path() const;
  // The sha256 of the package file as loaded (64 lowercase hex digits), for logs and pinning.
  const std::string& sha256() const;
  // Every batch size the loaded models serve, ascending (a dynamic model's range listed whole):
  // what bind() and, on the full runtime, run() accept.
  std::vector<int64_t> batch_sizes() const;

  // Hot weight swap (docs: weight swap). Reads the weight file at `weights_path`
  // (tdaot.export_weights) and checks all of it first: its digests, its signature when the
  // policy was loaded with trusted_keys (a valid one by any of those keys, as loaded then), that
  // it was made for this package (its manifest's sha256, which signing the package does not
  // change), every constant of every loaded model present with its name, shape and dtype, every
  // value finite. Then makes it live between calls: a call in flight finishes on the old
  // weights, every call that starts after swap_weights returns runs on the new ones (every run
  // path and binding alike), never a mix. Throws WeightsError naming the file and tensor (or the
  // model whose weights cannot be swapped and why), or SignatureError naming the file; the live
  // weights then keep serving unchanged. Safe to call while other threads run the policy;
  // swaps and rollbacks are serialised. A package whose manifest records no weights_sha256
  // cannot swap: WeightsError naming it and the file, before the file is read.
  void swap_weights(const std::string& weights_path) const;
  // The digest of the live weights (tdaot.export_weights's: of every tensor of the weight file,
  // the policy's parameters and buffers and every model's constants, so it covers every byte
  // the models run); for a package as loaded, its manifest's weights_sha256 ("" for a package
  // that records none, which cannot swap weights).
  std::string weights_sha256() const;
  // Makes the weights live before the last swap (or rollback) live again. Throws WeightsError
  // when there are none (nothing swapped yet).
  void rollback_weights() const;

 protected:
  // `type_name` ("tdaot::Policy") names the class in the message for a moved-from object. The
  // special members are these: a Policy is movable, not copyable, and needs to declare none.
  PolicyBase(std::shared_ptr<const detail::PolicyCore> core, const char* type_name);
  ~PolicyBase();
  PolicyBase(PolicyBase&&) noexcept;
  PolicyBase& operator=(PolicyBase&&) noexcept;
  PolicyBase(const PolicyBase&) = delete;
  PolicyBase& operator=(const PolicyBase&) = delete;

  // The shared state; throws InvalidArgumentError on a moved-from object instead of crashing.
  const detail::PolicyCore& core() const;
  // The same as the runtime's own Impl (derived from PolicyCore; instantiated where it is
  // complete), by reference for a call, shared for the bindings and sessions that keep it.
  template <typename Impl>
  const Impl& core_as() const {
    return static_cast<const Impl&>(core());
  }
  template <typename Impl>
  std::shared_ptr<const Impl> shared_core_as() const {
    core();  // throws for a moved-from Policy
    return std::static_pointer_cast<const Impl>(core_);
  }
  // Shared so that bindings and sessions keep the loaded model alive after the Policy goes.
  std::shared_ptr<const detail::PolicyCore> core_;

 private:
  const char* type_name_;
};

}  // namespace tdaot
