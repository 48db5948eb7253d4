// Signed weight files (build_test_packages.py: tutorial_signed_v2*.tdw, made for
// tutorial_signed.pt2): with trusted keys, Policy::swap_weights takes only a weight file signed
// by one of them, and every refusal names the file while the old weights keep serving (the same
// refusals as the lite runtime's, weight_refusals.h);
// without trusted keys signatures are not looked at. Also verify_weights and file_kind.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/package/digest.h"
#include "core/package/signature.h"
#include "tdaot/manifest.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"
#include "weight_refusals.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

std::string signed_package() { return test::package_path("tutorial_signed.pt2"); }
using test_weights::signed_weights;
std::string public_key() { return test::package_path("keys/public.pem"); }
std::string key_id(const std::string& key) {
  return detail::load_public_keys({key}, "")[0].id;
}

std::vector<at::Tensor> observation() { return {at::linspace(-1.0, 1.0, 3).reshape({1, 3})}; }

bool equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!at::equal(a[i], b[i])) return false;
  }
  return true;
}

PolicyOptions trusting(const std::string& key) {
  PolicyOptions options;
  options.trusted_keys = {key};
  return options;
}

TEST(WeightSignature, SignedWeightsSwapInWithTrustedKeys) {
  const Policy policy(signed_package(), trusting(public_key()));
  const auto before = policy.run_positional(observation());
  policy.swap_weights(signed_weights());
  const WeightFileInfo info = verify_weights(signed_weights(), {public_key()});
  EXPECT_EQ(info.signed_by, key_id(public_key()));
  EXPECT_EQ(info.base_sha256, policy.sha256());
  EXPECT_EQ(info.base_manifest_sha256, detail::sha256_hex(read_manifest_bytes(signed_package())));
  EXPECT_EQ(policy.weights_sha256(), info.weights_sha256);
  // The same tensors as tutorial_v2.tdw: the same outputs as that swap on the unsigned package.
  const Policy unsigned_policy(test::package_path("tutorial.pt2"));
  unsigned_policy.swap_weights(test::package_path("tutorial_v2.tdw"));
  const auto after = policy.run_positional(observation());
  EXPECT_FALSE(equal(after, before));
  EXPECT_TRUE(equal(after, unsigned_policy.run_positional(observation())));
}

TEST(WeightSignature, EveryUnvouchedFileIsRefusedNamingItAndTheOldWeightsKeepServing) {
  const Policy policy(signed_package(), trusting(public_key()));
  const auto before = policy.run_positional(observation());
  const std::string built_with = policy.weights_sha256();
  for (const test_weights::Refusal& refusal : test_weights::unvouched_files()) {
    const std::string& path = refusal.path;
    const std::string& message = refusal.message;
    const auto error = catch_error<SignatureError>([&] { policy.swap_weights(path); });
    ASSERT_TRUE(error) << path;
    EXPECT_EQ(error->path(), path);
    EXPECT_TRUE(Contains(error->what(), "weight file '" + path + "' " + message));
    EXPECT_EQ(policy.weights_sha256(), built_with);
    EXPECT_TRUE(equal(policy.run_positional(observation()), before));
    const auto verified =
        catch_error<SignatureError>([&] { verify_weights(path, {public_key()}); });
    ASSERT_TRUE(verified);
    EXPECT_TRUE(Contains(verified->what(), message));
  }
  // A tensor byte changed after signing: its digest refuses it before the signature is read.
  test::TempDir dir;
  const std::string tampered = test_weights::flip_last_byte(dir, signed_weights());
  const auto error = catch_error<WeightsError>([&] { policy.swap_weights(tampered); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "weight file '" + tampered + "' does not match its digest"));
  EXPECT_TRUE(equal(policy.run_positional(observation()), before));
}

TEST(WeightSignature, WithoutTrustedKeysSignaturesAreNotLookedAt) {
  const Policy policy(signed_package());
  policy.swap_weights(test::package_path("tutorial_signed_v2_unsigned.tdw"));
  policy.swap_weights(test::package_path("tutorial_signed_v2_other.tdw"));
  EXPECT_EQ(verify_weights(signed_weights()).signed_by, "");
}

TEST(WeightSignature, TheKeysAreThoseLoadedWithThePackage) {
  test::TempDir dir;
  const std::string key = dir.file("public.pem");
  std::filesystem::copy_file(public_key(), key);
  const Policy policy(signed_package(), trusting(key));
  std::filesystem::remove(key);  // e.g. rotated on disk: the loaded policy keeps its keys
  policy.swap_weights(signed_weights());
  EXPECT_EQ(policy.weights_sha256(), verify_weights(signed_weights()).weights_sha256);
}

TEST(WeightSignature, FileKindIsToldByContent) {
  EXPECT_EQ(file_kind(signed_package()), FileKind::kPackage);
  EXPECT_EQ(file_kind(signed_weights()), FileKind::kWeights);
  test::TempDir dir;
  const std::string text = dir.file("notes.tdw");
  test::write_file(text, "not a weight file");
  for (const std::string& path : {text, dir.file("missing.pt2")}) {
    const auto error = catch_error<PackageError>([&] { file_kind(path); });
    ASSERT_TRUE(error);
    EXPECT_EQ(error->path(), path);
    EXPECT_TRUE(Contains(error->what(), "'" + path + "'"));
  }
  const auto error = catch_error<PackageError>([&] { file_kind(text); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "is neither a tdaot package (.pt2: a zip archive) nor a "
                                      "tdaot weight file (.tdw: safetensors"));
}

TEST(WeightSignature, WeightsMadeBeforeThePackageWasSignedStillFit) {
  // tutorial_v2.tdw was made for tutorial.pt2; tutorial_signed.pt2 is that package signed: another
  // file sha256, the same manifest, which is what a swap matches.
  const std::string weights = test::package_path("tutorial_v2.tdw");
  const Policy policy(signed_package());
  const WeightFileInfo info = verify_weights(weights);
  ASSERT_NE(info.base_sha256, policy.sha256());
  policy.swap_weights(weights);
  EXPECT_EQ(policy.weights_sha256(), info.weights_sha256);
}

}  // namespace
}  // namespace tdaot
