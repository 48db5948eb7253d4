#include "test_support.h"

#include <ATen/Functions.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/accumulate.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdlib>
#include <fstream>
#include <new>
#include <mutex>
#include <random>
#include <set>

#include "core/package/digest.h"
#include "tdaot/manifest.h"

namespace {
thread_local tdaot::test::AllocationCounter::Counts* allocation_counts = nullptr;

// Forwards to the CPU allocator it replaced, calling `hook` first on every allocation.
class HookedCpuAllocator final : public c10::Allocator {
 public:
  HookedCpuAllocator(c10::Allocator* base, void (*hook)()) : base_(base), hook_(hook) {}
  c10::DataPtr allocate(size_t n) override {
    hook_();
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  void copy_data(void* dest, const void* src, size_t count) const override {
    base_->copy_data(dest, src, count);
  }

 private:
  c10::Allocator* base_;
  void (*hook_)();
};

void count_tensor_storage() {
  if (allocation_counts != nullptr) ++allocation_counts->tensors;
}
}  // namespace

// Not under AddressSanitizer (make test-asan), whose own operator new/delete must see every pair:
// torch's code pairs a nothrow new (ASan's, not replaced here) with a sized delete (this file's
// free), which ASan reports as a mismatch. That run leaves out the Allocations tests.
#if defined(__SANITIZE_ADDRESS__)
#define TDAOT_TEST_REPLACE_NEW 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TDAOT_TEST_REPLACE_NEW 0
#endif
#endif
#ifndef TDAOT_TEST_REPLACE_NEW
#define TDAOT_TEST_REPLACE_NEW 1
#endif

#if TDAOT_TEST_REPLACE_NEW
// GCC 12 inlines these into this file's own new/delete pairs and then reports free() of what
// "operator new" returned (-Wmismatched-new-delete): here that pairing is the point.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
// Replaced so that AllocationCounter sees every plain new; arrays and sized deletes forward here.
void* operator new(size_t size) {
  if (allocation_counts != nullptr) ++allocation_counts->news;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

namespace tdaot::test {

AllocationCounter::AllocationCounter() : previous_(allocation_counts) {
  install_cpu_allocation_hook(&count_tensor_storage);
  allocation_counts = &counts_;
}
AllocationCounter::~AllocationCounter() { allocation_counts = previous_; }

namespace fs = std::filesystem;

void rewrite_package(const std::string& src, const std::string& dst, const RecordEdit& edit,
                     const std::map<std::string, std::string>& extra) {
  caffe2::serialize::PyTorchStreamReader reader(src);
  // The writer prefixes records with dst's file stem, as torch's own .pt2 writer does.
  caffe2::serialize::PyTorchStreamWriter writer(dst);
  // As torch's PT2ArchiveWriter: format version 6 names its version record ".data/version".
  writer.setMinVersion(6);
  for (const std::string& name : reader.getAllRecords()) {
    // Records the writer adds by itself (version, serialization id) must not be written twice.
    if (writer.getAllWrittenRecords().count(name) != 0 || name == ".data/version" ||
        name == ".data/serialization_id") {
      continue;
    }
    auto [data, size] = reader.getRecord(name);
    std::string bytes(static_cast<const char*>(data.get()), size);
    if (edit(name, bytes)) writer.writeRecord(name, bytes.data(), bytes.size());
  }
  for (const auto& [name, bytes] : extra) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

void rewrite_metadata(const std::string& src, const std::string& dst,
                      const std::function<void(nlohmann::json&)>& edit) {
  bool found = false;
  rewrite_package(src, dst, [&](const std::string& name, std::string& bytes) {
    // The loaders read the wrapper's metadata; the kernel's copy is left alone.
    const std::string suffix = "wrapper_metadata.json";
    if (name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      nlohmann::json metadata = nlohmann::json::parse(bytes);
      edit(metadata);
      bytes = metadata.dump();
      found = true;
    }
    return true;
  });
  ASSERT_TRUE(found) << src << " has no *wrapper_metadata.json record";
}

void rewrite_manifest(const std::string& src, const std::string& dst,
                      const std::function<void(nlohmann::json&)>& edit) {
  rewrite_metadata(src, dst, [&](nlohmann::json& metadata) {
    nlohmann::json manifest =
        nlohmann::json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
    edit(manifest);
    metadata[kManifestMetadataKey] = manifest.dump();
  });
}

void install_cpu_allocation_hook(void (*hook)()) {
  static std::mutex mutex;
  static std::set<void (*)()> installed;
  std::lock_guard<std::mutex> lock(mutex);
  if (!installed.insert(hook).second) return;
  // Never freed: tensors allocated through it may outlive any test. Each wraps the previous
  // allocator, above torch's default priority; hooks only act while a test arms them.
  c10::SetCPUAllocator(new HookedCpuAllocator(c10::GetCPUAllocator(), hook), /*priority=*/100);
}

std::vector<at::Tensor> random_inputs(const Manifest& manifest, int64_t batch) {
  std::vector<at::Tensor> inputs;
  for (const auto& spec : manifest.inputs) {
    std::vector<int64_t> shape{batch};
    shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
    inputs.push_back(at::randn(shape, at::TensorOptions().dtype(tdaot::to_scalar_type(spec.dtype))));
  }
  return inputs;
}

std::map<std::string, at::Tensor> keyed(const std::vector<TensorSpec>& specs,
                                        const std::vector<at::Tensor>& inputs) {
  std::map<std::string, at::Tensor> map;
  for (size_t i = 0; i < inputs.size(); ++i) map.emplace(specs[i].key, inputs[i]);
  return map;
}

void rewrite_resealed(const std::string& src, const std::string& dst, const RecordEdit& edit) {
  TempDir dir;
  const std::string edited = dir.file("edited.pt2");
  std::map<std::string, std::string> digests;
  rewrite_package(src, edited, [&](const std::string& name, std::string& bytes) {
    const bool keep = edit(name, bytes);
    const bool metadata = name.size() > 14 && name.rfind("_metadata.json") == name.size() - 14;
    if (keep && name.rfind("data/", 0) == 0 && !metadata) {
      digests[name] = detail::sha256_hex(bytes);
    }
    return keep;
  });
  rewrite_manifest(edited, dst, [&](nlohmann::json& manifest) { manifest["files"] = digests; });
}

at::Tensor valid_tensor(const TensorSpec& spec, int64_t batch) {
  std::vector<int64_t> shape{batch};
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  if (spec.dtype == at::kBool) {
    return at::arange(c10::multiply_integers(shape), at::kLong)
        .remainder(2)
        .to(at::kBool)
        .view(shape);
  }
  return at::randn(shape, at::TensorOptions().dtype(tdaot::to_scalar_type(spec.dtype)));
}

std::vector<at::Tensor> valid_inputs(const std::vector<TensorSpec>& specs, int64_t batch) {
  std::vector<at::Tensor> inputs;
  for (const auto& spec : specs) inputs.push_back(valid_tensor(spec, batch));
  return inputs;
}

std::vector<at::Tensor> in_order(const Manifest& manifest, const TensorMap& outputs) {
  std::vector<at::Tensor> ordered;
  for (const auto& spec : manifest.outputs) ordered.push_back(outputs.at(spec.key));
  return ordered;
}

bool all_equal(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!at::equal(got[i], want[i])) return false;
  }
  return true;
}

}  // namespace tdaot::test
