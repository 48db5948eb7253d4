#include "package_refusals.h"

#include <sys/stat.h>
#include <zip.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/manifest/manifest_internal.h"
#include "core/package/signature.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"

namespace tdaot::test_packages {
namespace {

using fixtures::package_path;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The archive's top folder ("package/"), from its entries' names.
std::string prefix_of(const std::string& package) {
  std::string prefix;
  fixtures::edit_zip(package, package + ".probe", [&](const std::string& name, std::string&) {
    if (prefix.empty()) prefix = name.substr(0, name.find('/') + 1);
    return false;
  });
  std::filesystem::remove(package + ".probe");
  return prefix;
}

// Gives the entry `name` of the zip at `path` the Unix file type and mode `mode` (a symlink, a
// pipe: what extraction must never create).
void set_mode(const std::string& path, const std::string& name, uint32_t mode) {
  int code = 0;
  zip_t* zip = zip_open(path.c_str(), 0, &code);
  ASSERT_NE(zip, nullptr) << path;
  const zip_int64_t index = zip_name_locate(zip, name.c_str(), 0);
  ASSERT_GE(index, 0) << name;
  ASSERT_EQ(zip_file_set_external_attributes(zip, static_cast<zip_uint64_t>(index), 0,
                                             ZIP_OPSYS_UNIX, mode << 16),
            0);
  ASSERT_EQ(zip_close(zip), 0) << path;
}

// A copy of `src` with a byte of model b1's library changed; sets `library` to its name in the
// manifest ("data/aotinductor/b1/....so").
void tamper_b1(const std::string& src, const std::string& dst, std::string& library) {
  fixtures::edit_zip(src, dst, [&](const std::string& name, std::string& bytes) {
    if (name.find("/data/aotinductor/b1/") == std::string::npos || !ends_with(name, ".so")) {
      return false;
    }
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
    library = name.substr(name.find("data/"));
    return true;
  });
}

}  // namespace

std::vector<Refusal> refusals(const fixtures::TempDir& dir, const std::string& extract) {
  const std::string tutorial = package_path("tutorial.pt2");
  const std::string signed_package = package_path("tutorial_signed.pt2");
  const std::string prefix = prefix_of(tutorial);
  PackageOptions plain;
  plain.temp_dir = extract;
  PackageOptions trusting = plain;
  trusting.trusted_keys = {package_path("keys/public.pem")};
  std::vector<Refusal> cases;
  const auto add = [&](std::string name, std::string path, PackageOptions options,
                       const std::type_info& error, std::vector<std::string> parts) {
    cases.push_back({std::move(name), std::move(path), std::move(options), &error, std::move(parts)});
  };

  PackageOptions pinned = plain;
  pinned.expected_sha256 = std::string(64, '0');
  add("pinned to another digest", tutorial, pinned, typeid(IntegrityError),
      {"package '" + tutorial + "' has sha256 ",
       ", but the pinned expected_sha256 is " + std::string(64, '0')});
  PackageOptions malformed_pin = plain;
  malformed_pin.expected_sha256 = "sha256:abc";
  add("a malformed pin", tutorial, malformed_pin, typeid(InvalidArgumentError),
      {"expected_sha256 must be a sha256 digest (64 hex digits), got 'sha256:abc'"});

  std::string library;
  tamper_b1(tutorial, dir.file("tampered.pt2"), library);
  add("a model library changed", dir.file("tampered.pt2"), plain, typeid(IntegrityError),
      {"file '" + library + "' has sha256 ", "but the manifest records"});
  const std::string extra = "data/aotinductor/b1/libextra.so";
  fixtures::edit_zip(tutorial, dir.file("added.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {{prefix + extra, "\x7f" "ELF"}});
  add("a file added", dir.file("added.pt2"), plain, typeid(IntegrityError),
      {"holds a file '" + extra + "' that its manifest does not list"});
  std::string dropped;
  fixtures::edit_zip(tutorial, dir.file("removed.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {}, [&](const std::string& name) {
    if (!dropped.empty() || name.find("/data/aotinductor/b1/") == std::string::npos ||
        !ends_with(name, ".cpp")) {
      return false;
    }
    dropped = name.substr(prefix.size());
    return true;
  });
  add("a file removed", dir.file("removed.pt2"), plain, typeid(IntegrityError),
      {"lacks the file '" + dropped + "' that its manifest lists"});
  const std::string climbing = prefix + "data/aotinductor/b1/../../../../../tdaot-test-canary";
  fixtures::edit_zip(tutorial, dir.file("climbing.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {{climbing, "pwned"}});
  add("an entry climbing out", dir.file("climbing.pt2"), plain, typeid(PackageError),
      {"has an unsafe entry '" + climbing + "'"});
  const std::string absolute = "/tmp/tdaot-test-canary-absolute";
  fixtures::edit_zip(tutorial, dir.file("absolute.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {{absolute, "pwned"}});
  add("an absolute entry", dir.file("absolute.pt2"), plain, typeid(PackageError),
      {"has an unsafe entry '" + absolute + "'"});
  for (const auto& [mode, kind] : std::vector<std::pair<uint32_t, std::string>>{
           {S_IFLNK | 0777, "a symbolic link"}, {S_IFIFO | 0644, "a named pipe"}}) {
    const std::string path = dir.file("special" + std::to_string(mode) + ".pt2");
    const std::string entry = prefix + "data/aotinductor/b1/libc.so";
    fixtures::edit_zip(tutorial, path, [](const std::string&, std::string&) { return false; },
                       {{entry, "/lib/x86_64-linux-gnu/libc.so.6"}});
    set_mode(path, entry, mode);
    add("an entry that is " + kind, path, plain, typeid(PackageError),
        {"entry '" + entry + "' that is " + kind});
  }
  fixtures::edit_zip(tutorial, dir.file("two_tops.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {{"other/data/x", ""}});
  add("two top folders", dir.file("two_tops.pt2"), plain, typeid(PackageError),
      {"has entries under both '" + prefix + "' and 'other/data/x'"});
  PackageOptions small = plain;
  small.max_package_bytes = std::filesystem::file_size(tutorial) - 1;
  add("a file above the size limit", tutorial, small, typeid(PackageError),
      {"is larger than the limit of " + std::to_string(small.max_package_bytes) + " bytes"});
  PackageOptions no_dir = plain;
  no_dir.temp_dir = dir.file("missing/below");
  add("an extraction dir that cannot be made", tutorial, no_dir, typeid(PackageError),
      {"no temporary directory could be created under '" + no_dir.temp_dir + "'"});

  add("unsigned, keys trusted", tutorial, trusting, typeid(SignatureError),
      {"package '" + tutorial + "' is not signed, but trusted keys are set (trusted key ids: "});
  fixtures::edit_zip(signed_package, dir.file("unsigned.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {}, [&](const std::string& name) { return name == prefix + std::string(kSignatureEntry); });
  add("its signature removed", dir.file("unsigned.pt2"), trusting, typeid(SignatureError),
      {"is not signed"});
  PackageOptions other = plain;
  other.trusted_keys = {package_path("other_keys/public.pem")};
  add("signed by another key", signed_package, other, typeid(SignatureError),
      {"is signed only by keys that are not trusted (key ids: "});
  fixtures::edit_zip(signed_package, dir.file("edited.pt2"), [](const std::string& name,
                                                                 std::string& bytes) {
    if (!ends_with(name, "_metadata.json")) return false;
    nlohmann::json metadata = nlohmann::json::parse(bytes);
    nlohmann::json manifest = nlohmann::json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
    manifest["source"]["factory"] = "evil.py:f";
    metadata[kManifestMetadataKey] = manifest.dump();
    bytes = metadata.dump();
    return true;
  });
  add("its manifest changed after signing", dir.file("edited.pt2"), trusting, typeid(SignatureError),
      {"that does not match its manifest: the manifest was changed after it was signed"});
  int malformed = 0;
  for (const auto& [content, part] : std::vector<std::pair<std::string, std::string>>{
           {"{not json", "has malformed signatures (not JSON: "},
           {R"({"key_id": "x"})", "has malformed signatures (expected a JSON list)"},
           {R"([{"alg": "ed25519"}])", "has a malformed signature #1 (no string 'key_id'"}}) {
    const std::string path = dir.file("malformed" + std::to_string(++malformed) + ".pt2");
    fixtures::edit_zip(signed_package, path, [&, content = content](const std::string& name,
                                                                    std::string& bytes) {
      if (name != prefix + std::string(kSignatureEntry)) return false;
      bytes = content;
      return true;
    });
    add("malformed signatures #" + std::to_string(malformed), path, trusting,
        typeid(SignatureError), {part});
  }
  // Issue 38: a signature in another algorithm is named as such, not as an untrusted key.
  const std::string our_id = detail::load_public_keys({package_path("keys/public.pem")}, "")[0].id;
  fixtures::edit_zip(signed_package, dir.file("rsa.pt2"), [&](const std::string& name,
                                                             std::string& bytes) {
    if (name != prefix + std::string(kSignatureEntry)) return false;
    bytes = R"([{"key_id": ")" + our_id + R"(", "alg": "rsa", "signature": "AAAA"}])";
    return true;
  });
  add("a signature in algorithm rsa", dir.file("rsa.pt2"), trusting, typeid(SignatureError),
      {"signature #1 by key id " + our_id + " uses algorithm 'rsa', which is not supported",
       "tdaot verifies 'ed25519' signatures only"});
  // Every model's metadata edited alike (so the manifests agree): the manifest's first input
  // 2^62 wide, then AOTInductor's device key 'cuda' for a 'cpu' manifest.
  const auto edit_metadata = [&](const std::string& path,
                                 const std::function<void(nlohmann::json&, nlohmann::json&)>& edit) {
    fixtures::edit_zip(tutorial, path, [&](const std::string& name, std::string& bytes) {
      if (!ends_with(name, "_metadata.json")) return false;
      nlohmann::json metadata = nlohmann::json::parse(bytes);
      nlohmann::json manifest =
          nlohmann::json::parse(metadata.at(kManifestMetadataKey).get<std::string>());
      edit(metadata, manifest);
      metadata[kManifestMetadataKey] = manifest.dump();
      bytes = metadata.dump();
      return true;
    });
  };
  edit_metadata(dir.file("huge_shape.pt2"), [](nlohmann::json&, nlohmann::json& manifest) {
    manifest["inputs"][0]["shape"] = {int64_t{1} << 62};
  });
  add("an input shape of 2^62", dir.file("huge_shape.pt2"), plain, typeid(ManifestError),
      {"inputs[0].shape", "has shape [B, 4611686018427387904]",
       "one sample would exceed 1073741824 bytes"});
  edit_metadata(dir.file("cuda_key.pt2"), [](nlohmann::json& metadata, nlohmann::json&) {
    metadata["AOTI_DEVICE_KEY"] = "cuda";
  });
  add("AOTI_DEVICE_KEY cuda, manifest cpu", dir.file("cuda_key.pt2"), plain, typeid(ManifestError),
      {"names device 'cuda', but the manifest says 'cpu'"});
  // Model 'model' without its metadata file: said so, not "is not a .pt2 package".
  fixtures::edit_zip(tutorial, dir.file("no_metadata.pt2"), [](const std::string&, std::string&) {
    return false;
  }, {}, [&](const std::string& name) {
    return name.rfind(prefix + "data/aotinductor/model/", 0) == 0 &&
           ends_with(name, "wrapper_metadata.json");
  });
  add("model 'model' without its metadata file", dir.file("no_metadata.pt2"), plain,
      typeid(PackageError),
      {"has model 'model' (folder '" + prefix + "data/aotinductor/model/') but not its metadata file"});
  std::string signed_library;
  tamper_b1(signed_package, dir.file("signed_tampered.pt2"), signed_library);
  add("signed, a model library changed", dir.file("signed_tampered.pt2"), trusting,
      typeid(IntegrityError), {"file '" + signed_library + "' has sha256 "});
  fixtures::write_file(dir.file("garbage.pem"), "not a key at all\n");
  for (const auto& [key, part] : std::vector<std::pair<std::string, std::string>>{
           {dir.file("missing.pem"), "trusted key file '" + dir.file("missing.pem") + "' does not exist"},
           {dir.file("garbage.pem"), "trusted key file '" + dir.file("garbage.pem") +
                                         "' is not a PEM public key"},
           {package_path("keys/private.pem"), "trusted key file '" + package_path("keys/private.pem") +
                                                  "' holds a private key ('PRIVATE KEY')"}}) {
    PackageOptions unusable = plain;
    unusable.trusted_keys = {key};
    add("an unusable trusted key " + key, signed_package, unusable, typeid(SignatureError), {part});
  }
  return cases;
}

void expect_refused(const Refusal& refusal, const std::function<void()>& load) {
  SCOPED_TRACE(refusal.name + " (" + refusal.path + ")");
  try {
    load();
    ADD_FAILURE() << "expected " << fixtures::type_name(*refusal.error) << ", nothing thrown";
  } catch (const Error& e) {
    EXPECT_EQ(typeid(e), *refusal.error)
        << "expected " << fixtures::type_name(*refusal.error) << ", got "
        << fixtures::type_name(typeid(e)) << ": " << e.what();
    for (const std::string& part : refusal.parts) EXPECT_TRUE(fixtures::Contains(e.what(), part));
  }
}

}  // namespace tdaot::test_packages
