// The bad-input matrix: every input of the fixture packages (tutorial, nested, recurrent) is
// broken in every way the manifest can describe (missing or unknown key, each other manifest
// dtype, rank, per-sample size, batch 0 and above the range, non-contiguous, negated view,
// sparse/mkldnn layout, device, undefined) through the keyed and the positional path of a
// Policy and of a Session. Each refusal must be the exact InputError subclass naming the key,
// and the same loaded policy (or session) must still give the reference result afterwards.
// NaN and inf are data, not errors: they go through and stay in their rows.
//
// The cases are generated from the loaded manifests, so the matrix is data: one test per
// package and path, each looping over its cases (ctest runs every TEST in its own process,
// so one TEST per case would pay a package load per case).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Type.h>
#include <c10/util/accumulate.h>
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "tdaot/errors.h"
#include "tdaot/policy.h"
#include "tdaot/session.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::Contains;

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

// A valid, deterministic tensor for `spec` at `batch` (bools alternate, floats are random).
at::Tensor valid_tensor(const TensorSpec& spec, int64_t batch) {
  const auto shape = batched(batch, spec.shape);
  if (spec.dtype == at::kBool) {
    return at::arange(c10::multiply_integers(shape), at::kLong)
        .remainder(2)
        .to(at::kBool)
        .view(shape);
  }
  return at::randn(shape, at::TensorOptions().dtype(spec.dtype));
}

std::vector<at::Tensor> valid_inputs(const std::vector<TensorSpec>& specs, int64_t batch) {
  std::vector<at::Tensor> inputs;
  for (const auto& spec : specs) inputs.push_back(valid_tensor(spec, batch));
  return inputs;
}

using test::keyed;

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

constexpr int64_t kBatch = 4;

// One bad call: an edit of valid batch-4 inputs, the error it must raise and what its message
// must hold. `key` is the key the error must name (InputError::key() and "'key'" in the text).
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

std::string batch_tail(const Target& target, size_t index, int64_t batch, bool alone) {
  if (target.session) return "but the session was created for batch size " + std::to_string(kBatch);
  if (index > 0 && alone) {
    return "but input '" + target.specs[0].key + "' has batch size " + std::to_string(kBatch);
  }
  (void)batch;
  return "but the package accepts batch sizes " + std::to_string(target.range.min) + ".." +
         std::to_string(target.range.max);
}

// Every way to break input `index` of `target`.
std::vector<BadCase> cases_for(const Target& target, size_t index) {
  const TensorSpec spec = target.specs[index];
  const std::string& key = spec.key;
  const std::string input = "input '" + key + "'";
  const std::string expected_shape = format_batched_shape(spec.shape);
  const auto options = at::TensorOptions().dtype(spec.dtype);
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
                                                 at::TensorOptions().dtype(specs[i].dtype));
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

// ---- Policy::run and Policy::run_positional ----

class BadInputs : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    policy_ = std::make_unique<Policy>(test::package_path(GetParam() + ".pt2"));
    good_ = valid_inputs(policy_->manifest().inputs, kBatch);
    reference_ = policy_->run_positional(good_);
    for (auto& tensor : reference_) tensor = tensor.clone();
  }

  const Policy& policy() const { return *policy_; }
  const Manifest& manifest() const { return policy_->manifest(); }
  Target target() const { return {manifest().inputs, manifest().batch}; }

  // After every refusal: the same policy still returns the reference, on both paths.
  void expect_still_right(const std::string& after) {
    EXPECT_TRUE(all_equal(policy().run_positional(good_), reference_)) << "after " << after;
    EXPECT_TRUE(
        all_equal(in_order(manifest(), policy().run(keyed(manifest().inputs, good_))), reference_))
        << "after " << after;
  }

  // Runs every case of the matrix through `path` ("keyed" or "positional").
  void run_matrix(bool keyed_path) {
    size_t count = 0;
    size_t tried = 0;
    for (size_t index = 0; index < manifest().inputs.size(); ++index) {
      for (const BadCase& bad : cases_for(target(), index)) {
        if (!keyed_path && !bad.edit) continue;  // missing/unknown keys exist only by key
        SCOPED_TRACE(manifest().inputs[index].key + ": " + bad.name);
        std::vector<at::Tensor> inputs = good_;
        TensorMap map;
        if (bad.edit) bad.edit(inputs);
        map = keyed(manifest().inputs, inputs);
        if (bad.edit_keyed) bad.edit_keyed(map);
        ++tried;
        const bool refused = keyed_path
                                 ? expect_refused(bad, [&] { policy().run(map); })
                                 : expect_refused(bad, [&] { policy().run_positional(inputs); });
        if (!refused) continue;
        expect_still_right(bad.name);
        ++count;
      }
    }
    // Every case was refused, and the matrix is not small by accident (9 dtypes, 5 shapes,
    // 2 batches, 4+ layouts, device, undefined per input).
    EXPECT_EQ(count, tried);
    EXPECT_GE(count, manifest().inputs.size() * 21);
  }

  std::unique_ptr<Policy> policy_;
  std::vector<at::Tensor> good_;
  std::vector<at::Tensor> reference_;
};

TEST_P(BadInputs, KeyedPathRefusesEachCaseNamingTheKey) { run_matrix(true); }

TEST_P(BadInputs, PositionalPathRefusesEachCaseNamingTheKey) { run_matrix(false); }

TEST_P(BadInputs, CudaInputIsADeviceError) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device on this host";
  for (size_t index = 0; index < manifest().inputs.size(); ++index) {
    std::vector<at::Tensor> inputs = good_;
    inputs[index] = inputs[index].to(at::kCUDA);
    const std::string& key = manifest().inputs[index].key;
    const BadCase bad{"cuda",  nullptr,
                      nullptr, type<DeviceError>(),
                      key,     {"input '" + key + "' is on device cuda", "built for device cpu"}};
    EXPECT_TRUE(expect_refused(bad, [&] { policy().run_positional(inputs); }));
    EXPECT_TRUE(expect_refused(bad, [&] { policy().run(keyed(manifest().inputs, inputs)); }));
    expect_still_right("cuda");
  }
}

// NaN and inf are data: the call succeeds, the other rows are exactly what they were, and a
// NaN row makes some output of its row NaN (the fixtures propagate it through every path,
// given is_init false so the recurrent state is read).
TEST_P(BadInputs, NanAndInfPassThroughRowByRow) {
  std::vector<at::Tensor> good = good_;
  for (size_t i = 0; i < good.size(); ++i) {
    if (manifest().inputs[i].dtype == at::kBool) good[i] = at::zeros_like(good[i]);
  }
  const auto reference = policy().run_positional(good);
  size_t checked = 0;
  for (size_t index = 0; index < good.size(); ++index) {
    if (!at::isFloatingType(manifest().inputs[index].dtype)) continue;
    SCOPED_TRACE(manifest().inputs[index].key);
    std::vector<at::Tensor> inputs = good;
    inputs[index] = good[index].clone();
    inputs[index][0].fill_(std::numeric_limits<double>::quiet_NaN());
    inputs[index][1].fill_(std::numeric_limits<double>::infinity());
    inputs[index][2].fill_(-std::numeric_limits<double>::infinity());
    for (const bool keyed_path : {false, true}) {
      std::vector<at::Tensor> out;
      ASSERT_NO_THROW(
          out = keyed_path ? in_order(manifest(), policy().run(keyed(manifest().inputs, inputs)))
                           : policy().run_positional(inputs));
      bool nan_in_row0 = false;
      for (size_t k = 0; k < out.size(); ++k) {
        EXPECT_TRUE(at::equal(out[k][3], reference[k][3])) << "finite row of output " << k;
        if (at::isFloatingType(out[k].scalar_type())) {
          nan_in_row0 = nan_in_row0 || out[k][0].isnan().any().item<bool>();
        }
      }
      EXPECT_TRUE(nan_in_row0) << "a NaN input row gave no NaN output";
    }
    expect_still_right("NaN/inf");
    ++checked;
  }
  EXPECT_GT(checked, 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BadInputs, ::testing::Values("tutorial", "nested", "recurrent"),
                         [](const auto& info) { return info.param; });

// ---- Session::step and Session::step_positional (recurrent) ----

class SessionBadInputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    policy_ = std::make_unique<Policy>(test::package_path("recurrent.pt2"));
  }
  static void TearDownTestSuite() { policy_.reset(); }

  // A session and a twin that only ever gets the valid steps: after each refused step, the
  // session's state and next step must equal the twin's.
  void run_matrix(bool keyed_path) {
    Session session(*policy_, kBatch);
    Session twin(*policy_, kBatch);
    const auto& specs = session.inputs();
    const Target target{specs, policy_->manifest().batch, /*session=*/true};
    size_t count = 0;
    const auto step_both = [&](const std::string& after) {
      const auto given = valid_inputs(specs, kBatch);
      EXPECT_TRUE(all_equal(session.step_positional(given), twin.step_positional(given)))
          << "after " << after;
      EXPECT_TRUE(at::equal(session.state().at("hidden"), twin.state().at("hidden")))
          << "after " << after;
    };
    step_both("nothing");
    for (size_t index = 0; index < specs.size(); ++index) {
      for (const BadCase& bad : cases_for(target, index)) {
        if (!keyed_path && !bad.edit) continue;
        SCOPED_TRACE(specs[index].key + ": " + bad.name);
        std::vector<at::Tensor> inputs = valid_inputs(specs, kBatch);
        if (bad.edit) bad.edit(inputs);
        TensorMap map = keyed(specs, inputs);
        if (bad.edit_keyed) bad.edit_keyed(map);
        const bool refused = keyed_path
                                 ? expect_refused(bad, [&] { session.step(map); })
                                 : expect_refused(bad, [&] { session.step_positional(inputs); });
        EXPECT_TRUE(at::equal(session.state().at("hidden"), twin.state().at("hidden")))
            << "a refused step changed the state";
        if (!refused) continue;
        step_both(bad.name);
        ++count;
      }
    }
    EXPECT_GE(count, keyed_path ? 25u : 23u);  // observation: 9 dtypes, 5 shapes, 4 batches, ...
  }

  static inline std::unique_ptr<Policy> policy_;
};

TEST_F(SessionBadInputs, KeyedStepRefusesEachCaseAndKeepsTheState) { run_matrix(true); }

TEST_F(SessionBadInputs, PositionalStepRefusesEachCaseAndKeepsTheState) { run_matrix(false); }

// A NaN observation poisons its own row's state, and only that row, until reset(mask).
TEST_F(SessionBadInputs, NanStaysInItsRowUntilThatRowIsReset) {
  Session session(*policy_, kBatch);
  Session twin(*policy_, kBatch);
  at::Tensor observation = at::randn({kBatch, 3});
  at::Tensor poisoned = observation.clone();
  poisoned[0].fill_(std::numeric_limits<double>::quiet_NaN());
  const auto out = session.step({{"observation", poisoned}});
  const auto want = twin.step({{"observation", observation}});
  const auto rows = at::arange(1, kBatch);
  for (const auto& [key, tensor] : want) {
    EXPECT_TRUE(out.at(key)[0].isnan().all().item<bool>()) << key;
    EXPECT_TRUE(at::equal(out.at(key).index_select(0, rows), tensor.index_select(0, rows))) << key;
  }
  for (int step = 0; step < 2; ++step) {  // carried: row 0 stays NaN, the others are untouched
    observation = at::randn({kBatch, 3});
    const auto a = session.step_positional({observation});
    const auto b = twin.step_positional({observation});
    EXPECT_TRUE(a[1][0].isnan().all().item<bool>());
    EXPECT_TRUE(at::equal(a[1].index_select(0, rows), b[1].index_select(0, rows)));
  }
  const at::Tensor row0 = at::tensor({1, 0, 0, 0}).to(at::kBool);
  session.reset(row0);
  twin.reset(row0);
  observation = at::randn({kBatch, 3});
  EXPECT_TRUE(
      all_equal(session.step_positional({observation}), twin.step_positional({observation})));
}

}  // namespace
}  // namespace tdaot
