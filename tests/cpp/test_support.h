// Helpers shared by the full runtime's C++ tests: rewritten package copies, allocation counting,
// inputs; with the torch-free fixtures of fixtures.h (fixture packages, temp dirs, exception
// checks), shared with the lite runtime's tests.
#pragma once

#include <ATen/Tensor.h>
#include <c10/util/Type.h>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <typeinfo>
#include <vector>

#include "fixtures.h"

#include "tdaot/manifest.h"
#include "tdaot/torch/types.h"

namespace tdaot::test {

// The torch-free fixtures every test executable shares (fixtures.h).
using fixtures::catch_error;
using fixtures::Contains;
using fixtures::package_path;
using fixtures::read_file;
using fixtures::TempDir;
using fixtures::write_file;

// Copies the zip `src` to `dst` record by record. `edit` sees each record's name (without the
// archive prefix) and bytes, may change the bytes, and returns false to drop the record;
// `extra` records are appended.
using RecordEdit = std::function<bool(const std::string& name, std::string& bytes)>;
void rewrite_package(const std::string& src, const std::string& dst, const RecordEdit& edit,
                     const std::map<std::string, std::string>& extra = {});

// rewrite_package, then the digests of the edited files written into the copy's manifest, as a
// build would: the copy passes the integrity checks, so a test reaches what comes after them.
void rewrite_resealed(const std::string& src, const std::string& dst, const RecordEdit& edit);

// Copies a package with its AOTInductor metadata (a JSON object of strings) edited.
void rewrite_metadata(const std::string& src, const std::string& dst,
                      const std::function<void(nlohmann::json&)>& edit);

// Copies a package with its tdaot manifest (parsed from the metadata) edited.
void rewrite_manifest(const std::string& src, const std::string& dst,
                      const std::function<void(nlohmann::json&)>& edit);

// Wraps c10's CPU allocator (once per hook) so that `hook` runs before every tensor storage
// allocation, in the allocating thread. Hooks stay installed; they should act only when armed.
void install_cpu_allocation_hook(void (*hook)());

// Counts the heap allocations this thread makes while the counter lives: operator new (the
// test binary replaces the global one) and tensor storage from c10's CPU allocator (wrapped by
// a counting allocator installed on first use), which uses posix_memalign, not new.
class AllocationCounter {
 public:
  AllocationCounter();
  ~AllocationCounter();
  AllocationCounter(const AllocationCounter&) = delete;
  AllocationCounter& operator=(const AllocationCounter&) = delete;
  // operator new calls.
  size_t count() const { return counts_.news; }
  // CPU tensor storages allocated.
  size_t tensor_count() const { return counts_.tensors; }

  struct Counts {
    size_t news = 0;
    size_t tensors = 0;
  };

 private:
  Counts counts_;
  Counts* previous_;
};

// Random tensors (randn in each input's dtype) for every input of `manifest` at `batch`, in
// manifest order.
std::vector<at::Tensor> random_inputs(const Manifest& manifest, int64_t batch);

// `inputs` (in the order of `specs`) keyed by the specs' keys.
std::map<std::string, at::Tensor> keyed(const std::vector<TensorSpec>& specs,
                                        const std::vector<at::Tensor>& inputs);

// A valid tensor for `spec` at `batch` (bools alternate, floats are random).
at::Tensor valid_tensor(const TensorSpec& spec, int64_t batch);

// valid_tensor for every spec, in order.
std::vector<at::Tensor> valid_inputs(const std::vector<TensorSpec>& specs, int64_t batch);

// The keyed `outputs` in the order of the manifest's outputs.
std::vector<at::Tensor> in_order(const Manifest& manifest, const TensorMap& outputs);

// Same count, and at::equal pairwise.
bool all_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want);

}  // namespace tdaot::test

// The bad-input matrix, generated from a manifest (test_bad_inputs_cases.cpp) and run through
// Policy and Session (test_bad_inputs.cpp).
namespace tdaot::test::bad_inputs {

// The batch size of the valid inputs every case edits.
inline constexpr int64_t kBatch = 4;

// One bad call: an edit of valid batch-kBatch inputs, the error it must raise and what its
// message must hold. `key` is the key the error must name (InputError::key() and "'key'").
struct BadCase {
  std::string name;
  std::function<void(std::vector<at::Tensor>&)> edit;  // positional form; null if keyed only
  std::function<void(TensorMap&)> edit_keyed;          // keyed form; null: keyed(edit(inputs))
  const std::type_info* error;
  std::string key;
  std::vector<std::string> parts;
};

template <typename E>
const std::type_info* type() {
  return &typeid(E);
}

// Where the batch-size messages differ: a Policy compares against its range and its first
// input, a Session against its own batch.
struct Target {
  const std::vector<TensorSpec>& specs;
  BatchRange range;
  bool session = false;
};

// Every way to break input `index` of `target`.
std::vector<BadCase> cases_for(const Target& target, size_t index);

// Runs `call`, which must throw exactly `bad.error` as described; returns whether it did.
bool expect_refused(const BadCase& bad, const std::function<void()>& call);

}  // namespace tdaot::test::bad_inputs
