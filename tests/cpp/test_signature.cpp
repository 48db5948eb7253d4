// Signed packages through the C++ API: tdaot signs in Python (the build_test_packages fixture ran
// `tdaot keygen` and `tdaot sign`), the runtime verifies with OpenSSL. With trusted keys, every
// refusal is a SignatureError that comes before the host checks, the op libraries and the
// extraction: a missing temp_dir and op library would fail those steps, so seeing the
// SignatureError instead shows that nothing was loaded or written.
#include <ATen/Functions.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <optional>

#include "core/manifest/manifest_internal.h"
#include "core/package/signature.h"
#include "tdaot/errors.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot {
namespace {

using test::catch_error;
using test::Contains;

std::string signed_package() { return test::package_path("tutorial_signed.pt2"); }
std::string public_key() { return test::package_path("keys/public.pem"); }
std::string private_key() { return test::package_path("keys/private.pem"); }
std::string other_public_key() { return test::package_path("other_keys/public.pem"); }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool is_signature(const std::string& name) { return name == kSignatureEntry; }

// Options trusting `keys` whose later load steps would fail loudly: an op library that does not
// exist and an extraction directory that cannot be created.
PolicyOptions trusting(std::vector<std::string> keys, const test::TempDir& dir) {
  PolicyOptions options;
  options.trusted_keys = std::move(keys);
  options.op_libraries = {dir.file("no_such_op_library.so")};
  options.temp_dir = dir.file("no/such/dir");
  return options;
}

// Loading `path` with `options` throws a SignatureError naming the package and saying `part`;
// verify_package refuses it alike.
void expect_refused(const std::string& path, const PolicyOptions& options, const std::string& part) {
  const auto error = catch_error<SignatureError>([&] { Policy policy(path, options); });
  ASSERT_TRUE(error);
  EXPECT_EQ(error->path(), path);
  EXPECT_TRUE(Contains(error->what(), part));
  const auto verified = catch_error<SignatureError>(
      [&] { verify_package(path, "", options.trusted_keys); });
  ASSERT_TRUE(verified);
  EXPECT_TRUE(Contains(verified->what(), part));
}

TEST(Signature, SignedPackageLoadsWithItsPublicKeyAsPathOrPemText) {
  for (const std::string& key : {public_key(), read(public_key())}) {
    PolicyOptions options;
    options.trusted_keys = {other_public_key(), key};  // any one trusted key is enough
    const Policy policy(signed_package(), options);
    EXPECT_EQ(policy.run_positional({at::ones({2, 3})})[2].sizes(), (at::IntArrayRef{2, 2}));
    EXPECT_EQ(verify_package(signed_package(), "", options.trusted_keys), policy.sha256());
  }
}

TEST(Signature, SignedPackageLoadsWithoutTrustedKeys) {
  const Policy policy(signed_package());
  EXPECT_EQ(read_manifest_bytes(signed_package()), read_manifest_bytes(test::package_path("tutorial.pt2")));
}

TEST(Signature, UnsignedPackageIsRefusedBeforeAnythingIsLoaded) {
  test::TempDir dir;
  const std::string path = test::package_path("tutorial.pt2");
  expect_refused(path, trusting({public_key()}, dir),
                 "package '" + path + "' is not signed, but trusted keys are set (trusted key ids: ");
}

TEST(Signature, RemovedSignatureEntryIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("unsigned.pt2");
  test::rewrite_package(signed_package(), path,
                        [](const std::string& name, std::string&) { return !is_signature(name); });
  expect_refused(path, trusting({public_key()}, dir), "is not signed");
}

TEST(Signature, PackageSignedByAnotherKeyIsRefusedNamingTheKeys) {
  test::TempDir dir;
  expect_refused(signed_package(), trusting({other_public_key()}, dir),
                 "is signed only by keys that are not trusted (key ids: ");
}

TEST(Signature, ChangedManifestIsRefused) {
  test::TempDir dir;
  const std::string path = dir.file("edited.pt2");
  test::rewrite_manifest(signed_package(), path,
                         [](nlohmann::json& manifest) { manifest["source"]["factory"] = "evil.py:f"; });
  expect_refused(path, trusting({public_key()}, dir),
                 "that does not match its manifest: the manifest was changed after it was signed");
  EXPECT_NO_THROW(verify_package(path));  // self-consistent: only the signature tells
}

TEST(Signature, ChangedFileIsRefusedByItsDigestAndResealingBreaksTheSignature) {
  test::TempDir dir;
  const auto flip = [](const std::string& name, std::string& bytes) {
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".so") == 0) {
      bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
    }
    return true;
  };
  // The signature still matches the manifest; the manifest's digest catches the file.
  const std::string tampered = dir.file("tampered.pt2");
  test::rewrite_package(signed_package(), tampered, flip);
  PolicyOptions options;
  options.trusted_keys = {public_key()};
  const auto error = catch_error<IntegrityError>([&] { Policy policy(tampered, options); });
  ASSERT_TRUE(error);
  EXPECT_EQ(dynamic_cast<const SignatureError*>(&*error), nullptr);
  EXPECT_TRUE(Contains(error->what(), "has sha256"));
  EXPECT_TRUE(Contains(error->what(), "but the manifest records"));
  // Recording the new digests changes the manifest, which the signature covers.
  const std::string resealed = dir.file("resealed.pt2");
  test::rewrite_resealed(signed_package(), resealed, flip);
  expect_refused(resealed, trusting({public_key()}, dir), "does not match its manifest");
}

TEST(Signature, MalformedSignatureEntriesAreRefused) {
  test::TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {"{not json", "has malformed signatures (not JSON: "},
      {R"({"key_id": "x"})", "has malformed signatures (expected a JSON list)"},
      {R"([{"alg": "ed25519"}])", "has a malformed signature #1 (no string 'key_id'"},
  };
  for (const auto& [content, part] : cases) {
    const std::string path = dir.file("malformed.pt2");
    test::rewrite_package(signed_package(), path, [&](const std::string& name, std::string& bytes) {
      if (is_signature(name)) bytes = content;
      return true;
    });
    expect_refused(path, trusting({public_key()}, dir), part);
  }
}

TEST(Signature, UnusableTrustedKeysAreNamed) {
  test::TempDir dir;
  test::write_file(dir.file("garbage.pem"), "not a key at all\n");
  const std::string missing = dir.file("missing.pem");
  const std::pair<std::string, std::string> cases[] = {
      {missing, "trusted key file '" + missing + "' does not exist"},
      {dir.file("garbage.pem"), "trusted key file '" + dir.file("garbage.pem") +
                                    "' is not a PEM public key (no '-----BEGIN PUBLIC KEY-----' block)"},
      {private_key(), "trusted key file '" + private_key() + "' holds a private key ('PRIVATE KEY')"},
      {read(private_key()), "trusted key #1 (PEM text) holds a private key"},
      {"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n",
       "trusted key #1 (PEM text) is not a valid public key: not a DER SubjectPublicKeyInfo"},
      // The refusals of key_der.cpp, which reads keys without OpenSSL.
      {"-----BEGIN PUBLIC KEY-----\nnot*base64\n-----END PUBLIC KEY-----\n",
       "trusted key #1 (PEM text) is not a valid public key: its PEM body is not base64"},
      {"-----BEGIN PUBLIC KEY-----\nMCswBQYDK2VwAyIAAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEB\n"
       "-----END PUBLIC KEY-----\n",
       "trusted key #1 (PEM text) is not a valid public key: an Ed25519 SubjectPublicKeyInfo is 44 "
       "bytes"},
      {"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VuAyEAAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n"
       "-----END PUBLIC KEY-----\n",
       "trusted key #1 (PEM text) is a X25519 key; tdaot signatures are Ed25519"},
      {"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
       "trusted key #1 (PEM text) holds a PEM 'CERTIFICATE' block, not a 'PUBLIC KEY'"},
  };
  for (const auto& [key, part] : cases) expect_refused(signed_package(), trusting({key}, dir), part);
}

// The primitive weight files share: any message, signatures from Python's sign_message.
TEST(Signature, VerifiesAnyMessageSignedInPython) {
  const std::string signatures = read(test::package_path("message.sig.json"));
  const detail::SignedFile file{"weights.tdw", "weight file 'weights.tdw'", "header"};
  const std::vector<std::string> keys{public_key()};
  const std::string id =
      detail::verify_signatures("tdaot signature test message", signatures, keys, file);
  EXPECT_EQ(id.size(), 64u);
  const auto changed = catch_error<SignatureError>([&] {
    detail::verify_signatures("tdaot signature test messagE", signatures, keys, file);
  });
  ASSERT_TRUE(changed);
  EXPECT_EQ(changed->path(), "weights.tdw");
  EXPECT_TRUE(Contains(changed->what(), "weight file 'weights.tdw' has a signature by trusted key " +
                                            id + " (trusted key file '" + public_key() +
                                            "') that does not match its header"));
  const auto unsigned_file = catch_error<SignatureError>(
      [&] { detail::verify_signatures("m", std::nullopt, keys, file); });
  ASSERT_TRUE(unsigned_file);
  EXPECT_TRUE(Contains(unsigned_file->what(), "weight file 'weights.tdw' is not signed"));
}

}  // namespace
}  // namespace tdaot
