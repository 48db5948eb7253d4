// The bad-input matrix of test_bad_inputs.cpp: every way the manifest can describe to break an
// input (missing or unknown key, each other manifest dtype, rank, per-sample size, batch 0 and
// above the range, non-contiguous, negated view, sparse/mkldnn layout, device, undefined), and
// the check that a call refuses a case with the exact InputError subclass naming the key.
#include <ATen/ATen.h>
#include <c10/util/Type.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/manifest/manifest_internal.h"
#include "tdaot/errors.h"
#include "test_support.h"

namespace tdaot::test::bad_inputs {
namespace {

// Every dtype a manifest can name (manifest.cpp's table).
const std::vector<c10::ScalarType>& manifest_dtypes() {
  static const std::vector<c10::ScalarType> dtypes = {
      at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong,
      at::kInt,   at::kShort,  at::kChar, at::kByte,     at::kBool};
  return dtypes;
}

std::vector<int64_t> batched(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out{batch};
  out.insert(out.end(), shape.begin(), shape.end());
  return out;
}

std::string batch_tail(const Target& target, size_t index, int64_t batch, bool alone) {
  if (target.session) return "but the session was created for batch size " + std::to_string(kBatch);
  if (index > 0 && alone) {
    return "but input '" + target.specs[0].key + "' has batch size " + std::to_string(kBatch);
  }
  (void)batch;
  return "but the package accepts batch sizes " + std::to_string(target.range.min) + ".." +
         std::to_string(target.range.max);
}

}  // namespace

// Every way to break input `index` of `target`.
std::vector<BadCase> cases_for(const Target& target, size_t index) {
  const TensorSpec spec = target.specs[index];
  const std::string& key = spec.key;
  const std::string input = "input '" + key + "'";
  const std::string expected_shape = format_batched_shape(spec.shape);
  const auto options = at::TensorOptions().dtype(tdaot::to_scalar_type(spec.dtype));
  std::vector<BadCase> cases;
  const auto replace = [index](at::Tensor tensor) {
    return [index, tensor](std::vector<at::Tensor>& inputs) { inputs[index] = tensor; };
  };
  const auto shape_case = [&](const std::string& name, const std::vector<int64_t>& shape) {
    cases.push_back(
        {name,
         replace(at::zeros(shape, options)),
         nullptr,
         type<ShapeError>(),
         key,
         {input + " has shape " + format_shape(shape) + ", expected " + expected_shape}});
  };

  cases.push_back({"missing key",
                   nullptr,
                   [key](TensorMap& m) { m.erase(key); },
                   type<MissingKeyError>(),
                   key,
                   {"missing input key(s) '" + key + "'"}});
  const std::string extra = key + "_extra";
  cases.push_back({"unknown key",
                   nullptr,
                   [extra, spec](TensorMap& m) { m.emplace(extra, valid_tensor(spec, kBatch)); },
                   type<UnknownKeyError>(),
                   extra,
                   {"unknown input key '" + extra + "'"}});

  for (const c10::ScalarType dtype : manifest_dtypes()) {
    if (dtype == spec.dtype) continue;
    cases.push_back(
        {"dtype " + dtype_name(dtype),
         replace(at::ones(batched(kBatch, spec.shape), at::TensorOptions().dtype(dtype))),
         nullptr,
         type<DtypeError>(),
         key,
         {input + " has dtype " + dtype_name(dtype) + ", expected " + dtype_name(spec.dtype)}});
  }

  // Rank and per-sample size, including tensors with no elements at all.
  shape_case("scalar", {});
  shape_case("rank: batch dim only", {kBatch});
  auto higher = batched(kBatch, spec.shape);
  higher.push_back(1);
  shape_case("rank: one dim more", higher);
  auto wider = batched(kBatch, spec.shape);
  wider.back() += 1;
  shape_case("per-sample size +1", wider);
  auto empty = batched(kBatch, spec.shape);
  empty.back() = 0;
  shape_case("per-sample size 0 (no elements)", empty);
  if (wider.size() > 2) {
    auto inner = batched(kBatch, spec.shape);
    inner[1] += 1;
    shape_case("inner per-sample size +1", inner);
  }

  // The batch: this input alone, then every input.
  for (const int64_t batch : {int64_t{0}, target.range.max + 1}) {
    const std::string head = input + " has batch size " + std::to_string(batch) + ", ";
    cases.push_back({"batch " + std::to_string(batch) + " (this input)",
                     replace(at::zeros(batched(batch, spec.shape), options)),
                     nullptr,
                     type<BatchSizeError>(),
                     key,
                     {head + batch_tail(target, index, batch, true)}});
    if (index == 0) {
      cases.push_back({"batch " + std::to_string(batch) + " (every input)",
                       [batch, specs = target.specs](std::vector<at::Tensor>& inputs) {
                         for (size_t i = 0; i < inputs.size(); ++i) {
                           inputs[i] = at::zeros(batched(batch, specs[i].shape),
                                                 at::TensorOptions().dtype(tdaot::to_scalar_type(specs[i].dtype)));
                         }
                       },
                       nullptr,
                       type<BatchSizeError>(),
                       key,
                       {head + batch_tail(target, 0, batch, false)}});
    }
  }

  // Layout: right shape and dtype, memory the compiled model cannot read as it is.
  const at::Tensor good = valid_tensor(spec, kBatch);
  const auto layout_case = [&](const std::string& name, const at::Tensor& tensor) {
    ASSERT_EQ(tensor.sizes(), good.sizes()) << name;
    ASSERT_FALSE(tensor.is_contiguous()) << name;
    cases.push_back({name,
                     replace(tensor),
                     nullptr,
                     type<LayoutError>(),
                     key,
                     {input + " is not contiguous (shape " + format_shape(tensor.sizes().vec()) +
                          ", strides " + format_shape(tensor.strides().vec()) + ")",
                      "pass tensor.contiguous()"}});
  };
  layout_case("every other row", at::cat({good, good}).slice(0, 0, 2 * kBatch, 2));
  layout_case("expanded row", good.slice(0, 0, 1).expand(good.sizes()));
  if (good[0].numel() > 1) {
    // The per-sample dims first in memory, the batch dim last: a transposed view.
    std::vector<int64_t> perm;
    for (int64_t d = 1; d < good.dim(); ++d) perm.push_back(d);
    perm.push_back(0);
    std::vector<int64_t> back(good.dim());
    for (int64_t d = 0; d < good.dim(); ++d) back[perm[d]] = d;
    layout_case("transposed", good.permute(perm).contiguous().permute(back));
  }
  if (spec.dtype != at::kBool) {
    cases.push_back({"negated view",
                     replace(at::_neg_view(good)),
                     nullptr,
                     type<LayoutError>(),
                     key,
                     {input + " is a lazily negated view", "tensor.resolve_neg()"}});
  }
  cases.push_back({"sparse",
                   replace(good.to_sparse()),
                   nullptr,
                   type<LayoutError>(),
                   key,
                   {input + " has layout Sparse", "tensor.to_dense()"}});
  if (spec.dtype == at::kFloat) {
    cases.push_back({"mkldnn",
                     replace(good.to_mkldnn()),
                     nullptr,
                     type<LayoutError>(),
                     key,
                     {input + " has layout Mkldnn"}});
  }

  cases.push_back({"meta device",
                   replace(at::empty(batched(kBatch, spec.shape), options.device(at::kMeta))),
                   nullptr,
                   type<DeviceError>(),
                   key,
                   {input + " is on device meta, but the package was built for device cpu"}});
  cases.push_back({"undefined tensor",
                   replace(at::Tensor()),
                   nullptr,
                   type<InputError>(),
                   key,
                   {input + " is an undefined tensor"}});
  return cases;
}

// Runs `call`, which must throw exactly `bad.error` as described; returns whether it did.
bool expect_refused(const BadCase& bad, const std::function<void()>& call) {
  try {
    call();
  } catch (const InputError& e) {
    const std::string what = e.what();
    bool ok = true;
    if (typeid(e) != *bad.error) {
      ADD_FAILURE() << "expected " << c10::demangle(bad.error->name()) << ", got "
                    << c10::demangle(typeid(e).name()) << ": " << what;
      ok = false;
    }
    const auto names_key = Contains(what, "'" + bad.key + "'");
    EXPECT_TRUE(names_key);
    ok = ok && names_key;
    if (e.key() != bad.key) {
      ADD_FAILURE() << "key() is '" << e.key() << "', expected '" << bad.key << "': " << what;
      ok = false;
    }
    for (const auto& part : bad.parts) {
      const auto found = Contains(what, part);
      EXPECT_TRUE(found);
      ok = ok && found;
    }
    return ok;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << c10::demangle(bad.error->name()) << ", got "
                  << c10::demangle(typeid(e).name()) << ": " << e.what();
    return false;
  }
  ADD_FAILURE() << "expected " << c10::demangle(bad.error->name()) << ", nothing thrown";
  return false;
}

}  // namespace tdaot::test::bad_inputs
