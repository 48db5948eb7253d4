// Fuzz target over manifest parsing (tdaot::Manifest::from_json) and input validation
// (tdaot::detail::InputValidator). Built two ways from this one file: with libFuzzer
// (`make fuzz`, clang -fsanitize=fuzzer,address,undefined) and as the replay executable that
// ctest runs over corpus/ and regressions/ (replay_main.cpp, any compiler).
//
// An input is manifest JSON, optionally followed by a NUL byte and a "tensor script": the bytes
// after the NUL choose the validator's device, how many tensors are passed and, per tensor, its
// dtype, device, sizes (the manifest's shape with the batch and dims perturbed, or free-form),
// strides and whether it is passed positionally or by key. A script that runs out reads zeros,
// so every byte string is a valid input, and zeros mean "as the manifest says".
//
// What must hold (anything else aborts, which libFuzzer reports as a crash):
// - from_json returns or throws tdaot::ManifestError; never another exception, crash or UB.
// - A parsed manifest survives to_json -> from_json -> to_json unchanged.
// - The validator either accepts or throws a tdaot::InputError subclass; and when it accepts,
//   the tensors really match the manifest (count, dtype, device, shape, shared batch in range,
//   contiguous).
// The tensors are meta tensors (no memory, so a manifest asking for [B, 2^40] costs nothing) or
// small CPU tensors.
#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <typeinfo>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/torch/policy.h"
#include "runtime/validation.h"

namespace {

using tdaot::Manifest;
using tdaot::TensorSpec;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_manifest: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// TDAOT_FUZZ_VERBOSE=1 prints what each input did (for checking what a seed reaches).
bool verbose() {
  static const bool on = [] {
    const char* v = std::getenv("TDAOT_FUZZ_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

void note(const std::string& what) {
  if (verbose()) std::fprintf(stderr, "  %s\n", what.c_str());
}

std::string describe(const std::exception& e) {
  return std::string(typeid(e).name()) + ": " + e.what();
}

// The tensor script: bytes read in order, zeros once it runs out.
class Script {
 public:
  Script(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  int64_t int64() {
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = (value << 8) | byte();
    return static_cast<int64_t>(value);
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Manifest dtypes first, then some a manifest cannot name.
constexpr c10::ScalarType kDtypes[] = {
    c10::ScalarType::Float,  c10::ScalarType::Double,       c10::ScalarType::Half,
    c10::ScalarType::BFloat16, c10::ScalarType::Long,       c10::ScalarType::Int,
    c10::ScalarType::Short,  c10::ScalarType::Char,         c10::ScalarType::Byte,
    c10::ScalarType::Bool,   c10::ScalarType::ComplexFloat, c10::ScalarType::UInt16,
};
constexpr size_t kNumDtypes = sizeof(kDtypes) / sizeof(kDtypes[0]);

// a + b wrapping around instead of overflowing (the manifest's sizes may be INT64_MAX).
int64_t wrapping_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}

// A size near `expected`: mostly itself, sometimes one off or arbitrary.
int64_t perturb(Script& s, int64_t expected) {
  switch (s.byte() % 8) {
    case 5: return wrapping_add(expected, 1);
    case 6: return wrapping_add(expected, -1);
    case 7: return s.int64();
    default: return expected;
  }
}

int64_t pick_batch(Script& s, const tdaot::BatchRange& range) {
  switch (s.byte() % 8) {
    case 0: return range.min;
    case 1: return range.max;
    case 2: return wrapping_add(range.min, -1);
    case 3: return wrapping_add(range.max, 1);
    case 4: return 0;
    case 5: return s.int64();
    default: return wrapping_add(range.min, s.byte());
  }
}

// One tensor for `spec` (nullptr: a tensor for no spec) at `batch`, or nullopt when torch
// itself refuses the sizes/strides the script asks for (negative, overflowing).
std::optional<at::Tensor> make_tensor(Script& s, const TensorSpec* spec, int64_t batch,
                                      c10::DeviceType device) {
  const uint8_t mode = s.byte();
  if (mode == 0xff) return at::Tensor();  // undefined
  const c10::ScalarType dtype =
      (spec == nullptr || (mode & 0x80) != 0) ? kDtypes[s.byte() % kNumDtypes] : tdaot::to_scalar_type(spec->dtype);
  std::vector<int64_t> sizes;
  if (spec != nullptr && (mode & 0x40) == 0) {
    const bool perturbed = (mode & 0x20) != 0;
    sizes.push_back(batch);
    for (int64_t dim : spec->shape) sizes.push_back(perturbed ? perturb(s, dim) : dim);
    if (perturbed && s.byte() % 4 == 0) sizes.push_back(s.byte() % 4);
    if (perturbed && s.byte() % 4 == 0) sizes.pop_back();
  } else {
    const int rank = s.byte() % 6;
    for (int i = 0; i < rank; ++i) sizes.push_back(i == 0 ? batch : perturb(s, s.byte() % 5));
  }
  std::vector<int64_t> strides(sizes.size());
  int64_t stride = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = stride;
    if (!__builtin_mul_overflow(stride, std::max<int64_t>(sizes[i], 1), &stride)) continue;
    stride = 1;  // torch refuses such sizes below anyway
  }
  if ((mode & 0x10) != 0 && !strides.empty()) {
    // Free-form strides, non-negative as torch requires.
    for (auto& st : strides) {
      const uint8_t choice = s.byte();
      if (choice % 4 == 0) st = choice / 4;
      if (choice % 4 == 1) st = s.int64() & INT64_MAX;
    }
  }
  const c10::DeviceType other =
      device == c10::DeviceType::Meta ? c10::DeviceType::CPU : c10::DeviceType::Meta;
  const c10::DeviceType where = (mode & 0x08) != 0 ? other : device;
  const auto options = at::TensorOptions().dtype(dtype).device(where);
  try {
    for (int64_t size : sizes) {
      if (size < 0) return std::nullopt;
    }
    // A meta tensor costs no memory whatever its sizes. A CPU one is allocated for real, so
    // only when small; otherwise the meta tensor stands in. (at::from_blob over a dummy buffer
    // would avoid the allocation, but an overflowing storage size makes it std::terminate.)
    at::Tensor tensor = at::empty_strided(sizes, strides, options.device(c10::DeviceType::Meta));
    if (where == c10::DeviceType::CPU && tensor.storage().nbytes() <= (size_t{1} << 16)) {
      tensor = at::empty_strided(sizes, strides, options);
    }
    // A lazily negated view: same metadata, a flag the compiled model would ignore.
    if ((mode & 0x04) != 0) tensor = at::_neg_view(tensor);
    return tensor;
  } catch (const c10::Error&) {
    return std::nullopt;
  }
}

bool shape_matches(const TensorSpec& spec, const at::Tensor& t) {
  if (t.dim() != static_cast<int64_t>(spec.shape.size()) + 1) return false;
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    if (t.size(static_cast<int64_t>(i) + 1) != spec.shape[i]) return false;
  }
  return true;
}

// What acceptance promises: checked independently of the validator's code.
void check_accepted(const Manifest& m, c10::DeviceType device,
                    const std::vector<at::Tensor>& inputs, const char* path) {
  const std::string where = std::string(path) + " accepted ";
  if (inputs.size() != m.inputs.size()) {
    fail(where + std::to_string(inputs.size()) + " inputs for " + std::to_string(m.inputs.size()));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = m.inputs[i];
    const at::Tensor& t = inputs[i];
    if (!t.defined()) fail(where + "an undefined tensor for " + spec.key);
    if (t.device().type() != device) fail(where + "a tensor on the wrong device for " + spec.key);
    if (t.scalar_type() != spec.dtype) fail(where + "a tensor of the wrong dtype for " + spec.key);
    if (!shape_matches(spec, t)) fail(where + "a tensor of the wrong shape for " + spec.key);
    if (!m.batch.contains(t.size(0))) fail(where + "a batch out of range for " + spec.key);
    if (t.size(0) != inputs[0].size(0)) fail(where + "differing batch sizes at " + spec.key);
    if (!t.is_contiguous()) fail(where + "a non-contiguous tensor for " + spec.key);
    if (t.is_neg()) fail(where + "a lazily negated tensor for " + spec.key);
  }
}

void fuzz_validation(const Manifest& m, Script& s) {
  const uint8_t setup = s.byte();
  const c10::DeviceType device = (setup & 1) != 0 ? c10::DeviceType::CPU : c10::DeviceType::Meta;
  const bool keyed = (setup & 2) != 0;
  const tdaot::detail::InputValidator validator(m, c10::Device(device));

  const int64_t batch = pick_batch(s, m.batch);
  // Mostly one tensor per input; sometimes one fewer or more.
  size_t count = m.inputs.size();
  if ((setup & 0x0c) == 0x04 && count > 0) --count;
  if ((setup & 0x0c) == 0x08) ++count;

  std::vector<at::Tensor> tensors;
  for (size_t i = 0; i < count; ++i) {
    const TensorSpec* spec = i < m.inputs.size() ? &m.inputs[i] : nullptr;
    // Rarely a batch of its own, to reach the shared-batch check.
    const int64_t own = s.byte() % 16 == 15 ? pick_batch(s, m.batch) : batch;
    auto tensor = make_tensor(s, spec, own, device);
    if (!tensor) {
      note("torch refused the tensor the script asks for");
      return;
    }
    tensors.push_back(std::move(*tensor));
  }

  try {
    if (!keyed) {
      validator.check_positional(tensors);
      check_accepted(m, device, tensors, "check_positional");
      note("check_positional accepted " + std::to_string(tensors.size()) + " tensor(s)");
      return;
    }
    tdaot::TensorMap map;
    for (size_t i = 0; i < tensors.size(); ++i) {
      std::string key = i < m.inputs.size() ? m.inputs[i].key : "extra" + std::to_string(i);
      if (s.byte() % 16 == 15) key += ".x";  // a key the manifest does not have
      map.emplace(std::move(key), tensors[i]);
    }
    const std::vector<at::Tensor> ordered = validator.order_keyed(map);
    check_accepted(m, device, ordered, "order_keyed");
    note("order_keyed accepted " + std::to_string(ordered.size()) + " tensor(s)");
    for (size_t i = 0; i < ordered.size(); ++i) {
      if (!ordered[i].is_same(map.at(m.inputs[i].key))) {
        fail("order_keyed returned another tensor for " + m.inputs[i].key);
      }
    }
  } catch (const tdaot::InputError& e) {
    if (e.what()[0] == '\0') fail("InputError without a message");
    note(std::string("validator: ") + e.what());
  } catch (const std::exception& e) {
    fail("the validator threw something other than tdaot::InputError: " + describe(e));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t json_size = 0;
  while (json_size < size && data[json_size] != 0) ++json_size;
  const std::string text(reinterpret_cast<const char*>(data), json_size);

  std::optional<Manifest> manifest;
  try {
    manifest = Manifest::from_json(text, "fuzz.pt2");
  } catch (const tdaot::ManifestError& e) {
    if (e.path() != "fuzz.pt2") fail("ManifestError names '" + e.path() + "', not fuzz.pt2");
    note(std::string("from_json: ") + e.what());
    return 0;
  } catch (const std::exception& e) {
    fail("from_json threw something other than tdaot::ManifestError: " + describe(e));
  }

  // Serialising a parsed manifest and parsing it back is the identity.
  try {
    const std::string once = manifest->to_json();
    const std::string twice = Manifest::from_json(once, "fuzz.pt2").to_json();
    if (once != twice) fail("to_json/from_json round trip changed\n" + once + "\ninto\n" + twice);
  } catch (const std::exception& e) {
    fail("the round trip of a parsed manifest threw " + describe(e));
  }

  note("parsed: " + std::to_string(manifest->inputs.size()) + " input(s)");
  const size_t script_start = json_size < size ? json_size + 1 : size;
  Script script(data + script_start, size - script_start);
  fuzz_validation(*manifest, script);
  return 0;
}
